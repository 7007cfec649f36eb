package caddymodule

import (
	"crypto/tls"
	"net/http"
	"testing"
)

func TestJA4SeparatesTLSClients(t *testing.T) {
	srv := startCaddyWith(t, caddyOptions{tls: true}, `	servers {
		listener_wrappers {
			tollgate
			tls
		}
	}`, identitySite)
	idWith := func(cfg *tls.Config) string {
		c := newClient(t, srv, "Firefox/140.0", "", false)
		cfg.InsecureSkipVerify = true
		c.http.Transport = &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
		_, body := c.get("/")
		return body
	}
	a1 := idWith(&tls.Config{})
	a2 := idWith(&tls.Config{}) // a new connection, the same TLS stack
	b := idWith(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
	if a1 != a2 {
		t.Fatalf("one TLS client over two connections: %q and %q", a1, a2)
	}
	if a1 == b {
		t.Fatalf("two TLS clients with the same headers but different ClientHellos share %q", a1)
	}
}
