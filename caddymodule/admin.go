package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/cluster"
)

func init() {
	caddy.RegisterModule(adminAPI{})
}

// adminAPI serves Tollgate's routes on Caddy's admin endpoint, so Caddy's
// admin access control applies to them. The admin server builds it anew
// with New, so it reads the process-wide state from the pool.
type adminAPI struct{}

// CaddyModule returns the Caddy module information.
func (adminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.tollgate",
		New: func() caddy.Module { return new(adminAPI) },
	}
}

// Routes returns the admin routes.
func (a adminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/tollgate/status", Handler: caddy.AdminHandlerFunc(a.handleStatus)},
	}
}

// currentState returns the running state, or an API error if Tollgate is
// not running.
func currentState() (*state, error) {
	var st *state
	pool.Range(func(_, v any) bool {
		st, _ = v.(*state)
		return st == nil
	})
	if st == nil {
		return nil, caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("tollgate is not running: no tollgate handler or app is configured")}
	}
	return st, nil
}

// Status is what GET /tollgate/status answers.
type Status struct {
	Cluster cluster.Status `json:"cluster"`
	Keys    KeyStats       `json:"keys"`
	Memory  MemoryStats    `json:"memory"`
}

// KeyStats describes the counters this node holds.
type KeyStats struct {
	Held       int    `json:"held"`
	Max        int    `json:"max"`
	Reclaimed  uint64 `json:"reclaimed"`
	Overflowed uint64 `json:"overflowed"`
	Swept      uint64 `json:"swept"`
}

// MemoryStats estimates the memory the counters take.
type MemoryStats struct {
	CounterBytes int64 `json:"counter_bytes_estimate"`
}

// bytesPerKey is what a counter takes, as measured with a million keys.
const bytesPerKey = 80

func (adminAPI) handleStatus(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use GET", r.Method)}
	}
	st, err := currentState()
	if err != nil {
		return err
	}
	st.mu.Lock()
	node := st.node
	st.mu.Unlock()
	es := st.engine.Stats()
	out := Status{
		Keys:   KeyStats{Held: es.Keys, Max: es.MaxKeys, Reclaimed: es.Reclaimed, Overflowed: es.Overflowed, Swept: es.Swept},
		Memory: MemoryStats{CounterBytes: int64(es.Keys) * bytesPerKey},
	}
	if node != nil {
		out.Cluster = node.Status()
	}
	return writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "\t")
	return enc.Encode(v)
}

// Interface guards
var (
	_ caddy.AdminRouter = adminAPI{}
)
