package cli

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestCLITiersSetSendsTheVersionItRead serves the CLI a tier table and
// checks that its PUT is conditional on the version it read.
func TestCLITiersSetSendsTheVersionItRead(t *testing.T) {
	var mu sync.Mutex
	var ifMatch []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPut {
			mu.Lock()
			ifMatch = append(ifMatch, r.Header.Get("If-Match"))
			mu.Unlock()
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, `{"error": "the tier table changed: If-Match \"42\", now \"43\""}`)
			return
		}
		io.WriteString(w, `{"zones": {"api": {"zone": "api", "kind": "limit", "default": 2, "caddyfile": {"pro": 5},
			"overrides": {}, "effective": {"pro": 5}}}, "overrides_version": 42}`)
	}))
	defer srv.Close()
	var out bytes.Buffer
	c := invocationFor(t, strings.TrimPrefix(srv.URL, "http://"), false, &out)
	code, err := runTiersSet(c, []string{"api", "pro=7"})
	if code == exitOK || err == nil || !strings.Contains(err.Error(), "again") {
		t.Errorf("tiers set on a changed table: exit %d, %v; want a failure that says to run it again", code, err)
	}
	if len(ifMatch) != 1 || ifMatch[0] != `"42"` {
		t.Errorf("the PUT's If-Match: %q; want [\"42\"]", ifMatch)
	}
}
