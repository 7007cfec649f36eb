package caddymodule

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/limiter"
)

// Snapshots: each node writes what it holds (counters, reputations, grants,
// leases: keyed hashes and numbers, nothing else) to Caddy's storage every
// snapshot interval and when it stops, and reads it back when it starts, so
// a restart does not hand an abuser a clean slate. In a cluster, a
// restarted node keeps what it reads back until it has joined, then sends
// the counters of keys it owns or keeps replicas of to their owners, which
// keep the newer of theirs and the snapshot's, never the sum (the others
// handed the keys over, or counted them from replicas, meanwhile).

const defaultSnapshotInterval = time.Minute

// snapshotMagic starts a snapshot, with the format's version.
const snapshotMagic = "TGSN1"

// storageRef holds Caddy's storage, which may change with the config.
type storageRef struct{ certmagic.Storage }

// snapshotKey is where this node's snapshot lives in storage: under the
// node's name in a cluster, under Caddy's instance ID for a single node, so
// that instances sharing one storage never read each other's.
func (s *state) snapshotKey() string {
	s.mu.Lock()
	clustered, node := s.clusterCfg != nil, s.node
	s.mu.Unlock()
	if clustered && node != nil {
		return snapshotPrefix + strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(node.Name())
	}
	// Read afresh each time, not kept: other apps starting beside this one
	// (the TLS storage cleaner) may create Caddy's instance ID file at the
	// same moment, and only the ID that landed on disk names the snapshot
	// the next start reads.
	id, err := caddy.InstanceID()
	if err != nil {
		return legacySnapshotKey
	}
	return snapshotPrefix + id.String()
}

// snapshotPrefix starts every snapshot's storage key; legacySnapshotKey is
// where a single node kept it before snapshots were keyed by instance.
const (
	snapshotPrefix    = "tollgate/snapshots/"
	legacySnapshotKey = snapshotPrefix + "local"
)

// writeSnapshot writes the engine's live state to storage.
func (s *state) writeSnapshot() { s.writeSnapshotAt(s.snapshotKey()) }

// writeSnapshotAt writes the engine's live state to storage under key.
func (s *state) writeSnapshotAt(key string) {
	ref := s.storage.Load()
	if ref == nil {
		return
	}
	var states []limiter.State
	s.engine.Range(time.Now(), func(st limiter.State) bool {
		states = append(states, st)
		return true
	})
	b := limiter.AppendStates([]byte(snapshotMagic), states)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ref.Store(ctx, key, b); err != nil {
		s.logger().Error("writing snapshot", zap.Error(err))
	}
}

// restoreSnapshot merges what the last snapshot holds into the engine.
func (s *state) restoreSnapshot(ctx context.Context, logger *zap.Logger) {
	ref := s.storage.Load()
	if ref == nil {
		return
	}
	key := s.snapshotKey()
	s.mu.Lock()
	single := s.clusterCfg == nil
	s.mu.Unlock()
	b, err := ref.Load(ctx, key)
	if errors.Is(err, fs.ErrNotExist) && single && key != legacySnapshotKey {
		key = legacySnapshotKey // a single node's snapshot from before it was keyed by instance
		b, err = ref.Load(ctx, key)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil || !strings.HasPrefix(string(b), snapshotMagic) {
		logger.Error("reading snapshot; starting without it", zap.String("storage_key", key), zap.Error(err))
		return
	}
	raw := b[len(snapshotMagic):]
	if len(raw) < 4 {
		logger.Error("reading snapshot; starting without it", zap.String("storage_key", key), zap.Error(limiter.ErrTruncated))
		return
	}
	// The count is bounded by the input's size, so is what decoding takes.
	states, _, err := limiter.DecodeStates(raw, int(binary.LittleEndian.Uint32(raw)))
	if err != nil {
		logger.Error("reading snapshot; starting without it", zap.String("storage_key", key), zap.Error(err))
		return
	}
	es := s.engine.Stats()
	kept := s.fitSnapshot(states, es.MaxKeys-es.Keys)
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	if node != nil {
		// In a cluster, the snapshot may be an older copy of counts its
		// owners hold and added to since: the newer wins, at their owners,
		// once this node has joined.
		node.RestoreCounters(kept)
	} else {
		s.engine.Merge(time.Now(), kept)
	}
	if len(kept) < len(states) {
		logger.Warn("the snapshot holds more than max_keys allows; restored what fits, the keys this node owns first",
			zap.Int("states", len(states)), zap.Int("restored", len(kept)), zap.Int("max_keys", es.MaxKeys))
	}
	logger.Info("restored counters, reputations, grants and leases from the snapshot", zap.Int("states", len(kept)), zap.String("storage_key", key))
}

// fitSnapshot returns at most room of states: those of keys this node owns
// first, then the others, each group the latest-expiring first.
func (s *state) fitSnapshot(states []limiter.State, room int) []limiter.State {
	if len(states) <= room {
		return states
	}
	room = max(room, 0)
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	owned := func(k limiter.Key) bool { return node == nil || node.Owner(k).Name == node.Name() }
	slices.SortStableFunc(states, func(a, b limiter.State) int {
		if oa, ob := owned(a.Key), owned(b.Key); oa != ob {
			if oa {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.Expires, a.Expires)
	})
	return states[:room]
}

// snapshotInterval is the configured interval, or the default.
func (a *App) snapshotInterval() time.Duration {
	if a.SnapshotInterval == 0 {
		return defaultSnapshotInterval
	}
	return time.Duration(a.SnapshotInterval)
}
