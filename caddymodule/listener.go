package caddymodule

import (
	"crypto/rand"
	"net"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/internal/keyhash"
)

// hellos maps open connections, by a keyed hash of their remote address
// (never the address itself), to their JA4 fingerprint.
var hellos sync.Map

// connKeys hashes remote addresses for hellos with a key of this process.
var connKeys = func() keyhash.Hasher {
	secret := make([]byte, 32)
	rand.Read(secret)
	return keyhash.New(secret, "tollgate connections")
}()

// ListenerWrapper captures each TLS connection's ClientHello so the tollgate
// handler can add its JA4 fingerprint to the request fingerprint. Place it
// before the tls wrapper (and after proxy_protocol, if used):
//
//	{
//	    servers {
//	        listener_wrappers {
//	            tollgate
//	            tls
//	        }
//	    }
//	}
//
// Only TLS over TCP is covered; HTTP/3 requests carry no JA4.
type ListenerWrapper struct{}

// CaddyModule returns the Caddy module information.
func (ListenerWrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.listeners.tollgate", New: func() caddy.Module { return new(ListenerWrapper) }}
}

// WrapListener wraps l so accepted connections record their ClientHello.
func (ListenerWrapper) WrapListener(l net.Listener) net.Listener {
	return &helloListener{Listener: l}
}

// UnmarshalCaddyfile sets up the wrapper: `tollgate`, with no arguments.
func (*ListenerWrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() || d.NextBlock(0) {
		return d.Errf("tollgate listener wrapper: takes no arguments, got %q", d.Val())
	}
	return nil
}

// ja4Of returns the JA4 fingerprint of r's connection, if it was captured.
func ja4Of(r *http.Request) string {
	if r.TLS == nil {
		return ""
	}
	fp, _ := hellos.Load(connKeys.String(r.RemoteAddr))
	s, _ := fp.(string)
	return s
}

type helloListener struct {
	net.Listener
}

func (l *helloListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &helloConn{
		Conn:    c,
		key:     connKeys.String(c.RemoteAddr().String()),
		capture: new(fingerprint.HelloCapture),
	}, nil
}

// helloConn feeds what it reads to a capture until the ClientHello is
// complete, then publishes its JA4 until the connection closes. Reads
// happen one at a time (the TLS handshake, then the HTTP server).
type helloConn struct {
	net.Conn
	key     uint64
	capture *fingerprint.HelloCapture
}

func (c *helloConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.capture != nil && n > 0 {
		c.capture.Feed(p[:n])
		if c.capture.Done() {
			if fp := c.capture.JA4(); fp != "" {
				hellos.Store(c.key, fp)
			}
			c.capture = nil
		}
	}
	return n, err
}

func (c *helloConn) Close() error {
	hellos.Delete(c.key)
	return c.Conn.Close()
}

// Interface guards
var (
	_ caddy.ListenerWrapper = ListenerWrapper{}
	_ caddyfile.Unmarshaler = (*ListenerWrapper)(nil)
)
