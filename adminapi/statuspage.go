package adminapi

import (
	_ "embed"
	"net/http"
)

// statusPage is the live status page: one self-contained HTML file, with
// its styles and script inline, that reads the admin API it is served on
// (PathStream, and Caddy's /metrics).
//
//go:embed statuspage.html
var statusPage []byte

// ServeStatusPage answers GET /tollgate/ui with the status page, and the
// headers that keep it from being framed, sniffed, cached or made to load
// anything from elsewhere.
func ServeStatusPage(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'")
	_, err := w.Write(statusPage)
	return err
}
