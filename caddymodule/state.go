package caddymodule

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// pool holds the state shared by every config of this process.
var pool = caddy.NewUsagePool()

const poolKey = "tollgate"

// state is what survives config reloads.
type state struct {
	engine *limiter.Engine
	stop   chan struct{}
	done   chan struct{}

	current   atomic.Pointer[App] // the running config's app
	tiers     tiersHolder         // tier limits changed at run time
	decisions decisionsHolder     // operators' blocks and allows
	lists     listRecords         // what the admin lists show
	crawlers  *crawlerVerifier    // verdicts on clients claiming a search engine's crawler
	history   *history            // this node's counts of the last hour, for the status page

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
		engine:   limiter.New(limiter.Config{MaxKeys: maxKeys}),
		crawlers: newCrawlerVerifier(net.DefaultResolver),
		history:  new(history),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
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
			s.restoreDecisions(ctx, logger)
			s.restoreSnapshot(ctx, logger)
		}
		s.started.Store(true)
		s.history.sample(time.Now()) // counting starts here, not when the background work gets its first turn
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

// sweep drops expired counters in the background, a shard at a time,
// writes snapshots and samples the history.
func (s *state) sweep() {
	defer close(s.done)
	t := time.NewTicker(limiter.SweepEvery)
	defer t.Stop()
	hist := time.NewTicker(adminapi.HistoryStep)
	defer hist.Stop()
	lastSnapshot := time.Now()
	for {
		select {
		case now := <-hist.C:
			s.history.sample(now)
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
	node := s.node // the run the snapshot names
	if s.replaced != nil {
		s.replaced.Leave(cluster.DefaultLeaveTimeout)
		s.replaced, s.replacedCfg = nil, nil
	}
	s.retire()
	s.mu.Unlock()
	if s.snapshotEvery.Load() >= 0 {
		s.writeSnapshotAt(key, node) // after the hand-off: what this node still holds
	}
	return nil
}

// logger returns the running config's logger, or a no-op one.
func (s *state) logger() *zap.Logger {
	if a := s.currentApp(); a != nil {
		return a.logger
	}
	return zap.NewNop()
}

// Interface guards
var (
	_ caddy.Destructor = (*state)(nil)
)
