// Package adminapi is the contract of Tollgate's admin API: the routes under
// /tollgate/ on Caddy's admin endpoint, the JSON each of them takes and
// answers, the shape of its errors, and the status page it serves. The
// fields of its types, with their comments, are the API's reference.
//
// It imports nothing of Caddy's, so the caddy tollgate commands read it
// without the modules, and the admin server in caddymodule fills it.
package adminapi
