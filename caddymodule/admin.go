package caddymodule

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
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

// Routes returns the admin routes: every path under /tollgate/ goes to
// one dispatcher, so that no path there answers with a redirect or a
// text/plain 404, and a wrong method gets a 405 with Allow.
func (a adminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/tollgate/", Handler: caddy.AdminHandlerFunc(a.dispatch)},
		{Pattern: "/tollgate", Handler: caddy.AdminHandlerFunc(a.dispatch)},
	}
}

// adminRoute is one route: an exact path, or a prefix ending in "/" that
// takes an ID after it, and the methods it answers.
type adminRoute struct {
	path    string
	methods []string
	handle  func(adminAPI, http.ResponseWriter, *http.Request) error
}

// adminRoutes is every route under /tollgate/, matched in order.
var adminRoutes = []adminRoute{
	{"/tollgate/status", []string{http.MethodGet}, adminAPI.handleStatus},
	{"/tollgate/clients/", []string{http.MethodGet, http.MethodDelete}, adminAPI.handleClient},
	{"/tollgate/denied", []string{http.MethodGet}, adminAPI.handleDenied},
	{"/tollgate/tiers", []string{http.MethodGet, http.MethodPut, http.MethodDelete}, adminAPI.handleTiers},
	{"/tollgate/grants", []string{http.MethodGet, http.MethodPost}, adminAPI.handleGrantsCollection},
	{"/tollgate/grants/", []string{http.MethodGet, http.MethodDelete}, adminAPI.handleGrant},
	{"/tollgate/reputation", []string{http.MethodGet}, adminAPI.handleReputation},
	{"/tollgate/ui", []string{http.MethodGet}, adminAPI.handleUI},
}

// dispatch routes a request under /tollgate/.
func (a adminAPI) dispatch(w http.ResponseWriter, r *http.Request) error {
	path := r.URL.Path
	for _, rt := range adminRoutes {
		if path != rt.path && !(strings.HasSuffix(rt.path, "/") && strings.HasPrefix(path, rt.path)) {
			continue
		}
		if !slices.Contains(rt.methods, r.Method) {
			allow := strings.Join(rt.methods, ", ")
			w.Header().Set("Allow", allow)
			return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed,
				Err: fmt.Errorf("method %s not allowed on %s; use %s", r.Method, rt.path, allow)}
		}
		return rt.handle(a, w, r)
	}
	if id, ok := strings.CutPrefix(path, "/tollgate/clients"); ok && id == "" {
		return notFound("no route %s: a client is at /tollgate/clients/{id} (a raw key URL-escaped, or h:… as the logs print it); the keys denied now are at /tollgate/denied", path)
	}
	names := make([]string, 0, len(adminRoutes))
	for _, rt := range adminRoutes {
		names = append(names, rt.path)
	}
	return notFound("no route %s; Tollgate's routes are %s", path, strings.Join(names, ", "))
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
	Cluster ClusterView   `json:"cluster"`
	Ring    RingAgreement `json:"ring_agreement"`
	Keys    KeyStats      `json:"keys"`
	Memory  MemoryStats   `json:"memory"`
}

// KeyStats describes the counters this node holds.
type KeyStats struct {
	Held       int    `json:"held"`
	Max        int    `json:"max"`
	Reclaimed  uint64 `json:"reclaimed"`
	Evicted    uint64 `json:"evicted"`
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
	st, err := currentState()
	if err != nil {
		return err
	}
	st.mu.Lock()
	node := st.node
	st.mu.Unlock()
	es := st.engine.Stats()
	out := Status{
		Keys:   KeyStats{Held: es.Keys, Max: es.MaxKeys, Reclaimed: es.Reclaimed, Evicted: es.Evicted, Overflowed: es.Overflowed, Swept: es.Swept},
		Memory: MemoryStats{CounterBytes: int64(es.Keys) * bytesPerKey},
	}
	if node != nil {
		out.Cluster = clusterView(node.Status(), time.Now())
		out.Ring = ringAgreement(node, out.Cluster.RingFingerprint)
	}
	return writeJSON(w, out)
}

// RingAgreement says whether every node routes keys by the same ring as
// this one: each node's ring fingerprint, asked within the list deadline.
type RingAgreement struct {
	Agreed       bool              `json:"agreed"`
	Fingerprints map[string]string `json:"fingerprints"`
	Unreachable  []string          `json:"unreachable_nodes"`
}

func ringAgreement(node *cluster.Node, own string) RingAgreement {
	res := node.Gather(gatherRing, nil, gatherWithin)
	ra := RingAgreement{Agreed: len(res.Unanswered) == 0, Fingerprints: map[string]string{}, Unreachable: res.Unanswered}
	for name, fp := range res.Answers {
		ra.Fingerprints[name] = string(fp)
		if string(fp) != own {
			ra.Agreed = false
		}
	}
	return ra
}

// ClusterView is this node's view of the cluster, as the status shows it.
// A standalone node has no fallback: its fallback fields are left out.
type ClusterView struct {
	Node            string                 `json:"node"`
	Standalone      bool                   `json:"standalone"`
	RingFingerprint string                 `json:"ring_fingerprint"`
	Members         []cluster.MemberStatus `json:"members"`
	PeersInFallback []string               `json:"peers_in_fallback"`
	FallbackMode    string                 `json:"fallback_mode,omitempty"`
	FallbackRatio   *float64               `json:"fallback_ratio,omitempty"`
	FallbackKeys    *int                   `json:"fallback_keys,omitempty"`
	Activations     *uint64                `json:"fallback_activations,omitempty"`
	HandedOffIn     uint64                 `json:"counters_received"`
	Pulled          uint64                 `json:"counters_pulled"`
	PeerFrames      uint64                 `json:"peer_frames"`
	PeerItems       uint64                 `json:"peer_items"`
	LastRingChange  string                 `json:"last_ring_change,omitempty"`
}

func clusterView(s cluster.Status, now time.Time) ClusterView {
	v := ClusterView{
		Node: s.Node, Standalone: s.Standalone, RingFingerprint: s.RingFingerprint,
		Members: s.Members, PeersInFallback: s.PeersInFallback,
		HandedOffIn: s.HandedOffIn, Pulled: s.Pulled, PeerFrames: s.PeerFrames, PeerItems: s.PeerItems,
	}
	if v.Members == nil {
		v.Members = []cluster.MemberStatus{}
	}
	if v.PeersInFallback == nil {
		v.PeersInFallback = []string{}
	}
	if !s.Standalone {
		v.FallbackMode = s.FallbackMode
		v.FallbackRatio, v.FallbackKeys, v.Activations = &s.FallbackRatio, &s.FallbackKeys, &s.Activations
		if ago, err := time.ParseDuration(s.LastRingChangeAgo); err == nil {
			v.LastRingChange = instant(now.Add(-ago))
		}
	}
	return v
}

// ClientView is what GET /tollgate/clients/{id} answers: the client's
// counters in every zone, as their owner sees them.
type ClientView struct {
	ID    string     `json:"id"`
	Owner string     `json:"owner"`
	Zones []ZoneView `json:"zones"`
	// Reputation is the score of the client with this ID (0 to 100,
	// rounded), when reputation is on.
	Reputation *int `json:"reputation,omitempty"`
}

// ZoneView is one zone's counter for a client.
type ZoneView struct {
	Zone      string  `json:"zone"`
	Scope     string  `json:"scope"`
	Algorithm string  `json:"algorithm"`
	Limit     int64   `json:"limit"`
	Window    float64 `json:"window_seconds"`
	Remaining int64   `json:"remaining"`
	Reset     int64   `json:"reset_seconds"`
	Exhausted bool    `json:"exhausted"`
	Source    string  `json:"source"`
	// Grant is the key's grant in a limit zone, if it has one.
	Grant *GrantView `json:"grant,omitempty"`
	// Leases are the key's leases in a concurrent zone.
	Leases []LeaseView `json:"leases,omitempty"`
}

// LeaseView is one lease held.
type LeaseView struct {
	ID      string `json:"id"`
	Expires string `json:"expires"`
}

// ResetResult is what DELETE /tollgate/clients/{id} answers.
type ResetResult struct {
	ID          string   `json:"id"`
	ZonesReset  []string `json:"zones_reset"`
	Unreachable []string `json:"unreachable_peers"`
}

// handleClient serves GET and DELETE /tollgate/clients/{id}[?zone=name].
// {id} is the key as a zone renders it: the client ID by default, or
// whatever the zone's key produced (URL-escaped); or its hashed ID, h:…,
// as the logs print it. A GET of n:<hash>, as {http.tollgate.network}
// renders it, shows that IP network's budgets for requests without a
// session.
func (adminAPI) handleClient(w http.ResponseWriter, r *http.Request) error {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/tollgate/clients/")
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" || strings.Contains(raw, "/") {
		return badRequest("want /tollgate/clients/{id}, with the id URL-escaped; got %q", r.URL.Path)
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	zoneName := r.URL.Query().Get("zone")
	zones := app.zonesNamed(zoneName)
	if len(zones) == 0 {
		if zoneName != "" {
			return notFound("no zone %q in the running config", zoneName)
		}
		return notFound("no zone in the running config")
	}
	keyHash := app.keyHashOf(id)
	if net, ok := parseNetworkID(id); ok && r.Method == http.MethodGet {
		view := ClientView{ID: id, Owner: app.node.Owner(limiter.ZoneKey(net, 0)).Name, Zones: []ZoneView{}}
		for _, z := range zones {
			if !z.countsNetwork() {
				continue
			}
			zv, err := app.networkZoneView(z, net)
			if err != nil {
				return unavailable(err)
			}
			view.Zones = append(view.Zones, zv)
		}
		return writeJSON(w, view)
	}
	switch r.Method {
	case http.MethodGet:
		view := ClientView{ID: id, Owner: app.node.Owner(limiter.ZoneKey(keyHash, 0)).Name, Zones: []ZoneView{}}
		for _, z := range zones {
			zv, err := app.zoneView(z, keyHash, id)
			if err != nil {
				return unavailable(err)
			}
			view.Zones = append(view.Zones, zv)
		}
		if rk := app.reputationKey(keyHash); rk != 0 {
			score, err := app.node.Reputation(rk)
			if err != nil {
				return unavailable(err)
			}
			rounded := int(math.Round(score))
			view.Reputation = &rounded
		}
		return writeJSON(w, view)
	case http.MethodDelete:
		keys := make([]limiter.Key, 0, len(zones)+1)
		out := ResetResult{ID: id, ZonesReset: []string{}}
		for _, z := range zones {
			keys = append(keys, limiter.ZoneKey(keyHash, z.seed))
			out.ZonesReset = append(out.ZonesReset, z.Name)
		}
		if rk := app.reputationKey(keyHash); rk != 0 && zoneName == "" {
			keys = append(keys, rk) // the whole client: its reputation too
		}
		out.Unreachable = app.node.Reset(keys...)
		if out.Unreachable == nil {
			out.Unreachable = []string{}
		}
		var scopes []string
		if zoneName != "" {
			for _, z := range zones {
				scopes = append(scopes, z.scope)
			}
		}
		forgetEverywhere(app.node, gatherDeniedForget, keyHash, scopes)
		app.logger.Info("client reset through the admin API", zap.Strings("zones", out.ZonesReset),
			zap.String("key_hash", hashedID(keyHash)))
		return writeJSON(w, out)
	}
	return methodNotAllowed(r, "GET or DELETE")
}

// zoneView reads one zone's state for a key at its owner.
func (a *App) zoneView(z *Zone, keyHash uint64, id string) (ZoneView, error) {
	key := limiter.ZoneKey(keyHash, z.seed)
	zv := ZoneView{Zone: z.Name, Scope: z.scope, Algorithm: z.limit.Algorithm.String(), Window: z.limit.Window.Seconds()}
	if z.isLease() {
		leases, err := a.node.Leases(key)
		if err != nil {
			return zv, err
		}
		zv.Limit, zv.Remaining = z.Concurrent, max(0, z.Concurrent-int64(len(leases)))
		zv.Exhausted, zv.Source = zv.Remaining == 0, cluster.SourceOwner.String()
		if a.node.Owner(key).Name != a.node.Name() {
			zv.Source = cluster.SourcePeer.String()
		}
		for _, l := range leases {
			zv.Leases = append(zv.Leases, LeaseView{ID: strconv.FormatUint(l.ID, 16), Expires: instant(time.Unix(0, l.Expires))})
		}
		return zv, nil
	}
	res := make([]limiter.Result, 1)
	src := a.node.Peek(time.Now(), []limiter.Request{{Key: key, Zone: z.seed, Limit: z.limit}}, res)
	zv.Limit = z.Limit
	zv.Remaining, zv.Reset = max(0, res[0].Remaining), headerSeconds(res[0].Reset)
	zv.Exhausted, zv.Source = !res[0].Allowed, src.String()
	g, ok, err := a.node.GetGrant(key)
	if err != nil {
		return zv, err
	}
	if ok {
		gv := grantView(z, id, g)
		zv.Grant = &gv
	}
	return zv, nil
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
