// Package caddymodule is the Caddy side of Tollgate: the tollgate app that
// keeps state across config reloads, the http.handlers.tollgate middleware
// and their Caddyfile syntax.
package caddymodule
