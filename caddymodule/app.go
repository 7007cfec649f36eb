package caddymodule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

func init() {
	caddy.RegisterModule(new(App))
}

// App is the tollgate app: it owns Tollgate's process-wide state (the
// counters, and later the cluster node) for every tollgate handler. The
// state outlives config reloads: a reload provisions a new App, which finds
// the state of the old one in a pool and keeps using it.
//
// Configure it with the `tollgate` global option in the Caddyfile. Without
// it, a tollgate handler loads the app with its defaults.
type App struct {
	// MaxKeys bounds the number of counters held in memory, across all
	// zones. When the bound is reached, counters that have expired are
	// dropped first; if there are none, new keys of a zone share one
	// overflow counter with the zone's limit until room frees up, so memory
	// stays bounded and nobody gets an unlimited budget. Default: 1048576
	// (about 80 MiB at most).
	MaxKeys int `json:"max_keys,omitempty"`

	// Secrets sign session cookies and key every hash Tollgate keeps (of
	// keys, IP networks and fingerprints). Each must be at least 32 bytes;
	// placeholders such as {env.TOLLGATE_SECRET} are replaced. The first
	// signs new cookies, all verify; hashes are keyed with the last, so to
	// rotate, put the new secret first and drop the old one a cookie max
	// age later. Default: one generated on first start and kept in Caddy's
	// storage (under tollgate/secret), fine for a single node.
	Secrets []string `json:"secrets,omitempty"`

	// Cookie configures the session cookie. Default: issued to every
	// client without one, named __tollgate, valid 30 days.
	Cookie *CookieConfig `json:"cookie,omitempty"`

	// IPv4Prefix is how many leading bits of an IPv4 address make one
	// client network (1 to 32). Default: 32.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`

	// IPv6Prefix is how many leading bits of an IPv6 address make one
	// client network (1 to 128). Default: 64.
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// NetworkShare is how many times a zone's limit one IP network (see
	// IPv4Prefix, IPv6Prefix) may spend on requests without a valid session
	// cookie, in zones keyed by the client ID; zones may override it. IP
	// pressure squeezes it. Default: 4.
	NetworkShare int64 `json:"network_share,omitempty"`

	// IPPressure squeezes the cookie-less limits of IP networks that show
	// many distinct fingerprints. Default: on, 20 in 10m, 0.5, for 1h.
	IPPressure *PressureConfig `json:"ip_pressure,omitempty"`

	// Cluster makes this Caddy one node of a cluster that counts every key
	// exactly once. Default: a single node.
	Cluster *ClusterConfig `json:"cluster,omitempty"`

	// Fallback is what a node does with a request whose owner it cannot
	// reach: "local" (default: count it here, with every limit multiplied
	// by FallbackRatio), "open" (let it through) or "closed" (deny it).
	Fallback string `json:"fallback,omitempty"`

	// FallbackRatio multiplies limits while counting for an unreachable
	// owner, above 0 and at most 1. Default: 0.4.
	FallbackRatio float64 `json:"fallback_ratio,omitempty"`

	// Reputation scales each client's limits by its record of violations.
	// Default: on, 1 point per denial, 10 points an hour back, buckets
	// 75/50/25/0 → 1/0.6/0.3/0.1.
	Reputation *ReputationConfig `json:"reputation,omitempty"`

	// SnapshotInterval is how often this node writes its counters,
	// reputations, grants and leases to Caddy's storage (and it does when
	// it stops), so a restart does not hand anyone a clean slate. Default:
	// 1m. Negative: never.
	SnapshotInterval caddy.Duration `json:"snapshot_interval,omitempty"`

	state      *state
	node       *cluster.Node
	nodeCfg    *cluster.Config // the node's cluster settings; nil for a single node
	newNode    bool            // node was created for this config; Start starts it
	nodeActive bool            // Start made node the running one
	logger     *zap.Logger

	hasher     limiter.Hasher
	hashSecret []byte // the secret hashes are keyed with (the last)
	identifier *fingerprint.Identifier
	pressure   *fingerprint.Pressure     // nil when IP pressure is off
	reputation *limiter.ReputationPolicy // nil when off
	repSeed    uint64
	sessions   *sessions // session cookies, their budget and the challenge

	mu         sync.Mutex
	handlers   []*Handler         // every handler of this config, as provisioned
	shared     map[string]*Zone   // the first declaration of each shared zone
	httpApp    *caddyhttp.App     // the http app the handlers are in, if any
	identified bool               // zone identities are set (under mu)
	idOnce     sync.Once          // sets zone identities
	zoneList   []*Zone            // every zone of this config, once identified
	scopes     map[[2]string]bool // the (name, scope) of every zone, once identified
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tollgate",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision finds or creates the process-wide state and applies the config.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.shared = make(map[string]*Zone)
	val, loaded, err := pool.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		return newState(a.MaxKeys)
	})
	if err != nil {
		return fmt.Errorf("creating tollgate state: %w", err)
	}
	a.state = val.(*state)
	if loaded {
		a.state.engine.SetMaxKeys(a.MaxKeys)
	}
	if err := a.provisionIdentity(ctx); err != nil {
		return err
	}
	if err := registerMetrics(ctx.GetMetricsRegistry(), a.state); err != nil {
		return fmt.Errorf("tollgate: registering metrics: %w", err)
	}
	if err := a.provisionNode(); err != nil {
		return err
	}
	if err := a.provisionSessions(ctx); err != nil {
		return err
	}
	if err := a.provisionPolicy(ctx); err != nil {
		return err
	}
	a.state.snapshotEvery.Store(int64(a.snapshotInterval()))
	return nil
}

// snapshotInterval is the configured interval, or the default.
func (a *App) snapshotInterval() time.Duration {
	if a.SnapshotInterval == 0 {
		return defaultSnapshotInterval
	}
	return time.Duration(a.SnapshotInterval)
}

// provisionNode finds the running cluster node (or single node) if the
// settings are the same, or creates one that Start starts: provisioning binds
// nothing and joins nobody, so `caddy validate` can check the config of a
// running node.
func (a *App) provisionNode() error {
	var cfg *cluster.Config
	if a.Cluster != nil {
		c, err := a.clusterSettings(clusterSecret(a.hashSecret))
		if err != nil {
			return fmt.Errorf("tollgate: cluster: %w", err)
		}
		cfg = &c
	}
	node, isNew, err := a.state.nodeFor(cfg, a.logger.Named("cluster"))
	if err != nil {
		return fmt.Errorf("tollgate: cluster: %w", err)
	}
	a.node, a.nodeCfg, a.newNode = node, cfg, isNew
	return nil
}

// maxMaxKeys bounds max_keys, wherever it comes from.
const maxMaxKeys = 1 << 40

// Validate rejects a config that cannot work.
func (a *App) Validate() error {
	if a.MaxKeys < 0 || a.MaxKeys > maxMaxKeys {
		return fmt.Errorf("max_keys %d: must be a positive number of keys, at most %d", a.MaxKeys, maxMaxKeys)
	}
	if _, err := cluster.ParseFallbackMode(a.Fallback); err != nil {
		return fmt.Errorf("tollgate: %w", err)
	}
	if a.FallbackRatio < 0 || a.FallbackRatio > 1 {
		return fmt.Errorf("tollgate: fallback_ratio %g: must be above 0 and at most 1", a.FallbackRatio)
	}
	if a.SnapshotInterval > 0 && time.Duration(a.SnapshotInterval) < time.Second {
		return fmt.Errorf("tollgate: snapshot_interval %s: must be at least 1s (or off: negative in JSON)", time.Duration(a.SnapshotInterval))
	}
	if a.Cluster != nil && len(a.Secrets) == 0 {
		return fmt.Errorf("tollgate: cluster needs `secret`, the same on every node: nodes hash keys and authenticate each other with it")
	}
	return a.validateIdentity()
}

// Start starts the cluster node this config created (its listeners, gossip
// and join), or applies the fallback settings to the running one; then the
// background work the first time, and makes this config the one the admin
// API answers for. The node of the previous config keeps running until that
// config stops, so a failed start changes nothing.
func (a *App) Start() error {
	a.identify()
	if a.newNode {
		if err := a.state.adopt(a.node, a.nodeCfg, a.logger.Named("cluster")); err != nil {
			return fmt.Errorf("tollgate: cluster: %w", err)
		}
		a.nodeActive = true
	}
	if a.nodeCfg != nil {
		a.node.SetFallback(a.nodeCfg.Fallback, a.nodeCfg.FallbackRatio)
	}
	a.state.start(a.logger)
	a.state.current.Store(a)
	a.warnShadowedTiers()
	return nil
}

// Stop implements caddy.App: the node of a config that a newer one replaced
// leaves the cluster now. The state is released in Cleanup.
func (a *App) Stop() error {
	a.state.current.CompareAndSwap(a, nil)
	a.state.release(a.node, a.nodeActive)
	return nil
}

// registerHandler records a provisioned handler, whose zones get their
// identities once the whole config is provisioned (see identify). It
// refuses a shared zone declared with settings other than an earlier
// declaration's, naming both.
func (a *App) registerHandler(h *Handler, httpApp *caddyhttp.App) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, z := range h.Zones {
		if !z.Shared {
			continue
		}
		first, ok := a.shared[z.Name]
		if !ok {
			a.shared[z.Name] = z
			continue
		}
		if want, got := first.settings(first.DryRun || first.handler.DryRun), z.settings(z.DryRun || h.DryRun); want != got {
			return fmt.Errorf("tollgate: shared zone %q is declared with different settings: %s in %s, and %s in %s; every declaration of a shared zone must have the same settings",
				z.Name, want, a.describeHandler(first.handler), got, h.describe())
		}
	}
	for _, z := range h.Zones {
		z.handler = h
	}
	a.handlers = append(a.handlers, h)
	if httpApp != nil {
		a.httpApp = httpApp
	}
	if a.identified {
		// A handler provisioned after the config started (a route some
		// module provisions late): place it by its content.
		a.identifyHandler(h, contentPlace(h), a.nameCounts())
	}
	return nil
}

// describeHandler says where an already provisioned handler is.
func (a *App) describeHandler(h *Handler) string {
	if place, ok := handlerPlaces(a.httpApp)[h]; ok {
		return "the handler at " + place
	}
	return h.describe()
}

// identify gives every zone of this config its identity, once, when the
// config is fully provisioned: before the config starts, or on the first
// request, whichever comes first.
//
// The rule: a shared zone is known by its name, and so is a zone whose
// name no other handler of the config declares. Zones of one name declared
// in several handlers are known by the name and the place of their
// handler (see handlerPlaces): the server's listen addresses, the site's
// matchers and the handler's position in the site. Identities come from
// the config's content only, never from the order in which things are
// provisioned, so a reload, or a reordering of sites, keeps every count
// where it was.
func (a *App) identify() {
	a.idOnce.Do(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		places, others := modulePlaces(a.httpApp)
		counts := a.nameCounts()
		nested := make(map[string]int)
		for _, h := range a.handlers {
			place, ok := places[h]
			if !ok {
				place = nestedPlace(h, others, nested)
			}
			a.identifyHandler(h, place, counts)
		}
		a.identified = true
	})
}

// nameCounts returns how many handlers declare each zone name. Call with
// a.mu held.
func (a *App) nameCounts() map[string]int {
	counts := make(map[string]int)
	for _, h := range a.handlers {
		for _, z := range h.Zones {
			counts[z.Name]++
		}
	}
	return counts
}

// identifyHandler sets the identities of h's zones, h being at place.
// Call with a.mu held.
func (a *App) identifyHandler(h *Handler, place string, counts map[string]int) {
	if a.scopes == nil {
		a.scopes = make(map[[2]string]bool)
	}
	for _, z := range h.Zones {
		scope := z.Name
		if !z.Shared && counts[z.Name] > 1 {
			scope = z.Name + "@" + place
		}
		z.setScope(a.hasher, scope)
		a.zoneList = append(a.zoneList, z)
		a.scopes[[2]string{z.Name, scope}] = true
	}
}

// zonesNamed returns the zones of this config called name (every zone if
// name is empty), one per identity.
func (a *App) zonesNamed(name string) []*Zone {
	a.identify()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[uint64]bool)
	var out []*Zone
	for _, z := range a.zoneList {
		if (name == "" || z.Name == name) && !seen[z.seed] {
			seen[z.seed] = true
			out = append(out, z)
		}
	}
	return out
}

// forgetRemovedZones drops the metric series of this config's zones that
// the running config no longer has, or all of them when no config runs
// after this one (Caddy stopped, or the new config has no tollgate).
func (a *App) forgetRemovedZones() {
	cur := a.state.currentApp()
	if cur == a {
		return
	}
	a.mu.Lock()
	mine := a.scopes
	a.mu.Unlock()
	var kept map[[2]string]bool // nil: no config runs after this one
	if cur != nil {
		cur.identify()
		cur.mu.Lock()
		defer cur.mu.Unlock()
		kept = cur.scopes
	}
	for zs := range mine {
		if !kept[zs] {
			deleteDecisionSeries(zs[0], zs[1])
		}
	}
}

// Cleanup releases this config's hold on the process-wide state; the last
// config to let go of it stops it.
func (a *App) Cleanup() error {
	if a.state == nil {
		return nil
	}
	a.forgetRemovedZones()
	if a.newNode && !a.nodeActive {
		a.node.Close() // created, never started, or failed to: nothing to hand off
	}
	_, err := pool.Delete(poolKey)
	return err
}

// pool holds the state shared by every config of this process.
var pool = caddy.NewUsagePool()

const poolKey = "tollgate"

// state is what survives config reloads.
type state struct {
	engine *limiter.Engine
	stop   chan struct{}
	done   chan struct{}

	current atomic.Pointer[App] // the running config's app
	tiers   tiersHolder         // tier limits changed at run time
	ops     opsRecord           // what the admin lists show

	storage       atomic.Pointer[storageRef] // the latest config's storage
	startOnce     sync.Once
	started       atomic.Bool  // a config started: background work runs
	snapshotEvery atomic.Int64 // ns; negative: never

	mu          sync.Mutex
	pressure    *fingerprint.Pressure
	node        *cluster.Node   // the running node
	clusterCfg  *cluster.Config // its settings; nil for a single node
	replaced    *cluster.Node   // the node before it, until its config stops
	replacedCfg *cluster.Config
}

// newState creates the state; nothing runs until start.
func newState(maxKeys int) (*state, error) {
	return &state{
		engine: limiter.New(limiter.Config{MaxKeys: maxKeys}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}, nil
}

// start restores what storage keeps (the tier table, the snapshot) and
// starts the background work, the first time a config starts.
func (s *state) start(logger *zap.Logger) {
	s.startOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if s.storage.Load() != nil {
			s.restoreTiers(ctx, logger)
			s.restoreSnapshot(ctx, logger)
		}
		s.started.Store(true)
		go s.sweep()
	})
}

// pressureFor returns the IP pressure tracker for cfg: the one kept from
// the previous config when its settings are the same, so a reload does not
// forget which networks are squeezed.
func (s *state) pressureFor(cfg fingerprint.PressureConfig) (*fingerprint.Pressure, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want, err := fingerprint.NewPressure(cfg)
	if err != nil {
		return nil, err
	}
	if s.pressure != nil && s.pressure.Config() == want.Config() {
		return s.pressure, nil
	}
	s.pressure = want
	return want, nil
}

// sweep drops expired counters in the background, a shard at a time, and
// writes snapshots.
func (s *state) sweep() {
	defer close(s.done)
	t := time.NewTicker(limiter.SweepEvery)
	defer t.Stop()
	lastSnapshot := time.Now()
	for {
		select {
		case now := <-t.C:
			s.engine.Sweep(now)
			if every := time.Duration(s.snapshotEvery.Load()); every > 0 && now.Sub(lastSnapshot) >= every {
				s.writeSnapshot()
				lastSnapshot = now
			}
		case <-s.stop:
			return
		}
	}
}

// currentApp returns the app of the running config, if one has started.
func (s *state) currentApp() *App { return s.current.Load() }

// Destruct stops the state's background work and leaves the cluster
// gracefully, handing this node's counters to the others.
// A state that never started (`caddy validate`) writes nothing.
func (s *state) Destruct() error {
	close(s.stop)
	if !s.started.Load() {
		s.mu.Lock()
		s.retire()
		s.mu.Unlock()
		return nil
	}
	<-s.done
	key := s.snapshotKey() // under the node's name, known until it retires
	s.mu.Lock()
	if s.replaced != nil {
		s.replaced.Leave(cluster.DefaultLeaveTimeout)
		s.replaced, s.replacedCfg = nil, nil
	}
	s.retire()
	s.mu.Unlock()
	if s.snapshotEvery.Load() >= 0 {
		s.writeSnapshotAt(key) // after the hand-off: what this node still holds
	}
	return nil
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ caddy.Destructor   = (*state)(nil)
)
