package caddymodule

import (
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

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
	decider    decider         // decides on the request path: node, or its engine for a single node
	newNode    bool            // node was created for this config; Start starts it
	nodeActive bool            // Start made node the running one
	// fallbackMode is Fallback as Validate read it.
	fallbackMode cluster.FallbackMode
	logger       *zap.Logger

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
	return caddy.ModuleInfo{ID: "tollgate", New: func() caddy.Module { return new(App) }}
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
	if err := a.provisionReputation(); err != nil {
		return err
	}
	// What storage keeps (the tier table, the snapshot) is restored when
	// the app first starts.
	a.state.storage.Store(&storageRef{ctx.Storage()})
	a.node.OnShared(a.state.sharedArrived(a.logger))
	a.state.snapshotEvery.Store(int64(a.snapshotInterval()))
	return nil
}

// maxMaxKeys bounds max_keys, wherever it comes from.
const maxMaxKeys = 1 << 40

// Validate rejects a config that cannot work. It also settles the
// fallback mode, which Start gives the node.
func (a *App) Validate() error {
	if err := maxKeysBounds.checkSet(int64(a.MaxKeys)); err != nil {
		return fmt.Errorf("tollgate: max_keys %d: %w", a.MaxKeys, err)
	}
	mode, err := cluster.ParseFallbackMode(a.Fallback)
	if err != nil {
		return settingError{"fallback", fmt.Errorf("tollgate: %w", err)}
	}
	a.fallbackMode = mode
	if a.FallbackRatio != 0 {
		if err := checkAboveZero(a.FallbackRatio, 1); err != nil {
			return fmt.Errorf("tollgate: fallback_ratio %g: %w", a.FallbackRatio, err)
		}
	}
	if a.SnapshotInterval > 0 {
		if err := checkSnapshotInterval(time.Duration(a.SnapshotInterval)); err != nil {
			return fmt.Errorf("tollgate: snapshot_interval %s: %w (or off: negative in JSON)", time.Duration(a.SnapshotInterval), err)
		}
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
		a.node.SetFallback(a.fallbackMode, a.nodeCfg.FallbackRatio)
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

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
