package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
)

// adminAPI serves Tollgate's routes on Caddy's admin endpoint, so Caddy's
// admin access control applies to them. The admin server builds it anew
// with New, so it reads the process-wide state from the pool. What each
// route takes and answers is package adminapi.
type adminAPI struct{}

// CaddyModule returns the Caddy module information.
func (adminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.tollgate", New: func() caddy.Module { return new(adminAPI) }}
}

// Routes returns the admin routes: every path under /tollgate/ goes to
// one dispatcher, so that no path there answers with a redirect or a
// text/plain 404, and a wrong method gets a 405 with Allow.
func (a adminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/tollgate/", Handler: caddy.AdminHandlerFunc(a.dispatch)},
		{Pattern: "/tollgate", Handler: caddy.AdminHandlerFunc(a.dispatch)},
	}
}

// handler returns the handler of a route of adminapi.Routes.
func (a adminAPI) handler(path string) caddy.AdminHandlerFunc {
	return map[string]caddy.AdminHandlerFunc{
		adminapi.PathStatus: a.handleStatus, adminapi.PathClients: a.handleClient, adminapi.PathDenied: a.handleDenied,
		adminapi.PathTiers: a.handleTiers, adminapi.PathGrants: a.handleGrantsCollection, adminapi.PathGrant: a.handleGrant,
		adminapi.PathReputation: a.handleReputation, adminapi.PathUI: a.handleUI, adminapi.PathHash: a.handleHash,
		adminapi.PathStream: a.handleStream, adminapi.PathDecisions: a.handleDecisions, adminapi.PathDecision: a.handleDecision,
		adminapi.PathZones: a.handleZones, adminapi.PathHistory: a.handleHistory,
	}[path]
}

// dispatch routes a request under /tollgate/.
func (a adminAPI) dispatch(w http.ResponseWriter, r *http.Request) error {
	path := r.URL.Path
	routes := adminapi.Routes()
	for _, rt := range routes {
		if !rt.Matches(path) {
			continue
		}
		if !slices.Contains(rt.Methods, r.Method) {
			allow := strings.Join(rt.Methods, ", ")
			w.Header().Set("Allow", allow)
			return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed,
				Err: fmt.Errorf("method %s not allowed on %s; use %s", r.Method, rt.Path, allow)}
		}
		return a.handler(rt.Path)(w, r)
	}
	if path == strings.TrimSuffix(adminapi.PathClients, "/") {
		return notFound("no route %s: a client is at /tollgate/clients/{id} (a raw key URL-escaped, or h:… as the logs print it); the keys denied now are at /tollgate/denied", path)
	}
	names := make([]string, 0, len(routes))
	for _, rt := range routes {
		names = append(names, rt.Path)
	}
	return notFound("no route %s; Tollgate's routes are %s", path, strings.Join(names, ", "))
}

// handleUI serves GET /tollgate/ui: the status page.
func (adminAPI) handleUI(w http.ResponseWriter, _ *http.Request) error {
	return adminapi.ServeStatusPage(w)
}

// handleHash serves POST /tollgate/hash: the hashed ID of a raw key given
// in the body, which is never logged.
func (adminAPI) handleHash(w http.ResponseWriter, r *http.Request) error {
	var req adminapi.HashRequest
	if err := decodeBody(r, &req, `{"key": "<a raw key>"}`); err != nil {
		return err
	}
	if req.Key == "" {
		return badRequest(`key is empty: want {"key": "<a raw key>"}`)
	}
	if _, ok := adminapi.ParseHashedID(req.Key); ok {
		return writeJSON(w, adminapi.HashAnswer{ID: req.Key})
	}
	if _, ok := adminapi.ParseNetworkID(req.Key); ok {
		return writeJSON(w, adminapi.HashAnswer{ID: req.Key})
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	return writeJSON(w, adminapi.HashAnswer{ID: adminapi.HashedID(app.keyHashOf(req.Key))})
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

// runningApp returns the running config's app, or an API error.
func runningApp() (*App, error) {
	st, err := currentState()
	if err != nil {
		return nil, err
	}
	app := st.currentApp()
	if app == nil {
		return nil, caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("tollgate is starting")}
	}
	return app, nil
}

func badRequest(format string, args ...any) error {
	return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf(format, args...)}
}

func notFound(format string, args ...any) error {
	return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf(format, args...)}
}

func methodNotAllowed(r *http.Request, allowed string) error {
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use %s", r.Method, allowed)}
}

// unavailable turns an owner that cannot be reached into a 503.
func unavailable(err error) error {
	if errors.Is(err, cluster.ErrUnreachable) {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	return err
}

// decodeBody reads a JSON body strictly: unknown fields are errors. want
// says, for the error messages, what the route takes.
func decodeBody(r *http.Request, v any, want string) error {
	tooLarge := caddy.APIError{HTTPStatus: http.StatusRequestEntityTooLarge,
		Err: fmt.Errorf("the body is too large: an admin request may send at most %d bytes (1 MiB); want %s", adminapi.MaxBody, want)}
	if r.ContentLength > adminapi.MaxBody {
		return tooLarge
	}
	body := http.MaxBytesReader(nil, r.Body, adminapi.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// A body sent without a length may be too large and malformed
		// early on: the size is what to fix first, so read on to the limit.
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge
		}
		if _, rest := io.Copy(io.Discard, body); rest != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](rest); ok {
				return tooLarge
			}
		}
		if errors.Is(err, io.EOF) {
			return badRequest("the body is empty: want %s", want)
		}
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return badRequest("field %q: got a JSON %s, want %s (the body: %s)", te.Field, te.Value, jsonKind(te.Type), want)
		}
		return badRequest("malformed JSON body: %v; want %s", err, want)
	}
	if dec.More() {
		return badRequest("malformed JSON body: more than one value; want %s", want)
	}
	return nil
}

// jsonKind says in words what JSON a Go type takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "\t")
	return enc.Encode(v)
}

// instant renders an instant as every admin answer does: RFC 3339, UTC,
// whole seconds.
func instant(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// instantAfter renders an instant rounded up to the second, for a time
// from which something holds (a key is let through again), as
// retry_after_seconds is rounded up: waiting until it is always enough.
func instantAfter(t time.Time) string {
	return instant(t.Add(time.Second - 1))
}

// Interface guards
var (
	_ caddy.AdminRouter = adminAPI{}
)
