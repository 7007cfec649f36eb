package caddymodule

import (
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRawIPAnywhere drives traffic from known addresses through every
// path (allowed, denied, dry run, cookies issued and renewed, IP pressure),
// then searches everything Tollgate could have written for those addresses:
// its logs at DEBUG, Caddy's log, the admin API and the whole storage.
func TestNoRawIPAnywhere(t *testing.T) {
	ips := []string{"203.0.113.77", "198.51.100.23", "2001:db8:77::5", "::ffff:192.0.2.99"}
	tollgateLog := filepath.Join(t.TempDir(), "tollgate.log")
	srv := startCaddyWith(t, caddyOptions{logLevel: "INFO"}, trustLoopback+`
	tollgate {
		ip_pressure {
			threshold 2 10m
		}
	}
	log tollgate {
		include http.handlers.tollgate tollgate caddy.listeners.tollgate
		level DEBUG
		output file `+tollgateLog+`
	}`, `
	tollgate {
		zone site {
			limit 2 1h
		}
		zone dry {
			limit 1 1h
			key {http.request.header.X-Key}
		}
		dry_run
	}
	tollgate /strict {
		zone strict {
			limit 1 1h
		}
	}
	respond "{http.tollgate.client_id} {http.tollgate.decision}"`)

	for _, ip := range ips {
		for i, ua := range []string{"A", "B", "C"} {
			c := newClient(t, srv, ua, ip, i == 0)
			for range 4 {
				c.get("/")
				c.get("/strict")
			}
		}
	}

	var haystacks []string
	addFile := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		haystacks = append(haystacks, path+"\n"+string(b))
	}
	addFile(srv.LogFile)
	addFile(tollgateLog)
	filepath.WalkDir(filepath.Join(srv.dir, "storage"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			addFile(path)
		}
		return nil
	})
	for _, path := range []string{"/config/", "/metrics", "/reverse_proxy/upstreams"} {
		resp, err := http.Get(srv.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		haystacks = append(haystacks, "admin "+path+"\n"+string(b))
	}
	if !strings.Contains(strings.Join(haystacks, "\n"), "request denied") {
		t.Fatal("no denial was logged: the search would prove nothing")
	}

	for _, ip := range ips {
		for _, needle := range ipForms(ip) {
			for _, h := range haystacks {
				if i := strings.Index(strings.ToLower(h), needle); i >= 0 {
					name, _, _ := strings.Cut(h, "\n")
					t.Errorf("%s appears (as %q) in %s: …%s…", ip, needle, name, h[max(0, i-80):min(len(h), i+80)])
				}
			}
		}
	}
}

// ipForms returns the ways an address could be written down: as given,
// normalised, and as hex bytes.
func ipForms(ip string) []string {
	addr := netip.MustParseAddr(ip)
	forms := []string{strings.ToLower(ip), addr.Unmap().String(), addr.StringExpanded()}
	b := addr.Unmap().AsSlice()
	forms = append(forms, hex.EncodeToString(b))
	return forms
}
