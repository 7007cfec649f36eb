package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// Every Caddy module of Tollgate, and its Caddyfile syntax, is registered
// here:
//
//	tollgate                  the app: state that outlives reloads (app.go)
//	http.handlers.tollgate    the middleware (handler.go)
//	caddy.listeners.tollgate  the ClientHello capture for JA4 (listener.go)
//	admin.api.tollgate        the admin API's routes (admin.go)
//	http.matchers.verified_bot  requests from verified search engine crawlers (crawler.go)
//
// and the tollgate directive and global option (caddyfile.go).
func init() {
	caddy.RegisterModule(new(App))
	caddy.RegisterModule(new(Handler))
	caddy.RegisterModule(ListenerWrapper{})
	caddy.RegisterModule(adminAPI{})
	caddy.RegisterModule(new(VerifiedBot))

	httpcaddyfile.RegisterHandlerDirective("tollgate", parseHandler)
	// Early: before authentication, so unauthenticated floods are limited
	// too, and before anything that proxies or serves.
	httpcaddyfile.RegisterDirectiveOrder("tollgate", httpcaddyfile.Before, "basic_auth")
	httpcaddyfile.RegisterGlobalOption("tollgate", parseApp)
}
