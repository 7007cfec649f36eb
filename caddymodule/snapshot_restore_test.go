package caddymodule

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// A snapshot holding more states than max_keys allows restores what fits,
// instead of nothing.
func TestOversizedSnapshotRestoresWhatFits(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir()) // Caddy's instance ID lives there
	s, _ := newState(10)
	s.node = cluster.Standalone(s.engine)
	s.storage.Store(&storageRef{&certmagic.FileStorage{Path: t.TempDir()}})
	now := time.Now()
	var states []limiter.State
	for i := range 25 {
		states = append(states, limiter.State{Key: limiter.Key(i + 1), Stamp: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Cur: 3})
	}
	b := limiter.AppendStates([]byte(snapshotMagic), states)
	if err := s.storage.Load().Store(context.Background(), s.snapshotKey(), b); err != nil {
		t.Fatal(err)
	}
	s.restoreSnapshot(context.Background(), zap.NewNop())
	// The engine's bound is kept per shard, so what fits can be a little
	// less than max_keys; but never nothing, and never more.
	if k := s.engine.Stats().Keys; k < 5 || k > 10 {
		t.Errorf("%d keys restored from a snapshot of 25 with max_keys 10; want what fits, 5 to 10", k)
	}
}
