package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
)

// tierTable is the tier limits changed at run time through the admin API:
// zone name → tier → limit. It wins over the Caddyfile's tier settings
// until it is cleared. Immutable once built; replaced whole.
type tierTable struct {
	Zones   map[string]map[string]int64 `json:"zones"`
	Version int64                       `json:"version"` // Unix ns of the change
	Origin  string                      `json:"origin"`  // the node it was made on
}

func (t *tierTable) get(zone, tier string) (int64, bool) {
	if t == nil {
		return 0, false
	}
	n, ok := t.Zones[zone][tier]
	return n, ok
}

// zone returns the overrides of one zone (nil when there are none).
func (t *tierTable) zone(name string) map[string]int64 {
	if t == nil {
		return nil
	}
	return t.Zones[name]
}

// tiersSharedName is the name of the tier table among the cluster's shared
// values, and tiersStorageKey where each node keeps it.
const (
	tiersSharedName = "tiers"
	tiersStorageKey = "tollgate/tiers.json"
)

// decodeTierTable reads a tier table as storage keeps it, and vets it.
func decodeTierTable(b []byte) (*tierTable, error) {
	t := new(tierTable)
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("decoding tier table: %w", err)
	}
	return t, checkTierTable(t)
}

// The cluster shares the zones alone: the version and origin that order
// tables are the shared value's, so every node orders them the same way.

// sharedValue returns t as the cluster shares it.
func (t *tierTable) sharedValue() cluster.SharedValue {
	raw, _ := json.Marshal(t.Zones)
	return cluster.SharedValue{Value: raw, Version: t.Version, Origin: t.Origin}
}

// tierTableOf returns the table a shared value carries, vetted.
func tierTableOf(v cluster.SharedValue) (*tierTable, error) {
	t := &tierTable{Version: v.Version, Origin: v.Origin}
	if err := json.Unmarshal(v.Value, &t.Zones); err != nil {
		return nil, fmt.Errorf("decoding tier table: %w", err)
	}
	return t, checkTierTable(t)
}

// tiersHolder is the tier table in effect on this node, kept across
// reloads.
type tiersHolder struct {
	p atomic.Pointer[tierTable]
	// mu serialises changes made through the admin API, so a conditional
	// change checks the version and replaces the table in one step.
	mu sync.Mutex
}

func (h *tiersHolder) load() *tierTable { return h.p.Load() }

// version returns the version of the table in effect, 0 if there is none.
func (h *tiersHolder) version() int64 {
	if t := h.load(); t != nil {
		return t.Version
	}
	return 0
}

// store replaces the table if t is newer, and reports whether it did.
func (h *tiersHolder) store(t *tierTable) bool {
	return storeNewer(&h.p, t, func(t *tierTable) (int64, string) { return t.Version, t.Origin })
}

// storeNewer replaces what p holds with t if t is newer: a later version,
// or the same version made on a node whose name sorts after (every node
// picks the same of two tables changed at once). It reports whether it did.
func storeNewer[T any](p *atomic.Pointer[T], t *T, stamp func(*T) (version int64, origin string)) bool {
	version, origin := stamp(t)
	for {
		cur := p.Load()
		if cur != nil {
			if v, o := stamp(cur); v > version || v == version && o >= origin {
				return false
			}
		}
		if p.CompareAndSwap(cur, t) {
			return true
		}
	}
}

// restoreTiers installs the tier table kept in storage.
func (s *state) restoreTiers(ctx context.Context, logger *zap.Logger) {
	b, ok := s.loadStored(ctx, logger, tiersStorageKey, "the tier table")
	if !ok {
		return
	}
	t, err := decodeTierTable(b)
	if err != nil {
		logger.Error("reading the tier table; starting without it", zap.Error(err))
		return
	}
	s.tiers.store(t)
	s.restoreShared(tiersSharedName, t.sharedValue())
}

// saveTiers keeps the tier table in storage.
func (s *state) saveTiers(t *tierTable) error { return s.storeJSON(tiersStorageKey, t) }

// loadStored reads what storage keeps under key; ok is false, and a failure
// to read it logged (what names it), when there is nothing to restore.
func (s *state) loadStored(ctx context.Context, logger *zap.Logger, key, what string) (b []byte, ok bool) {
	b, err := s.storage.Load().Load(ctx, key)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logger.Error("reading "+what, zap.Error(err))
		}
		return nil, false
	}
	return b, true
}

// storeJSON keeps v, as JSON, in storage under key (nowhere before the
// storage is known).
func (s *state) storeJSON(key string, v any) error {
	ref := s.storage.Load()
	if ref == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ref.Store(ctx, key, b)
}

// restoreShared gives the node a shared value read back from storage.
func (s *state) restoreShared(name string, v cluster.SharedValue) {
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	node.Restore(name, v)
}

// checkSharedValue vets a shared value from another node before the node
// keeps it: a tier table must decode and name only limits of at least 1; a
// decision table must pass the checks the admin API makes.
func checkSharedValue(name string, value []byte) error {
	var err error
	switch name {
	case tiersSharedName:
		_, err = tierTableOf(cluster.SharedValue{Value: value})
	case decisionsSharedName:
		_, err = decisionTableOf(cluster.SharedValue{Value: value})
	}
	return err
}

// checkTierTable refuses a tier table with a limit below 1, which no
// engine can count with (a token bucket divides by it).
func checkTierTable(t *tierTable) error {
	for zone, tiers := range t.Zones {
		for tier, limit := range tiers {
			if limit < 1 {
				return fmt.Errorf("tier table: zone %q tier %q: limit %d; must be at least 1", zone, tier, limit)
			}
		}
	}
	return nil
}

// sharedArrived returns the handler of shared values from other nodes: a
// newer tier table or decision table is put in effect and kept in storage.
func (s *state) sharedArrived(logger *zap.Logger) func(string, cluster.SharedValue) {
	return func(name string, v cluster.SharedValue) {
		if name == decisionsSharedName {
			s.decisionsArrived(logger, v)
			return
		}
		if name != tiersSharedName {
			return
		}
		t, err := tierTableOf(v)
		if err != nil {
			logger.Error("a tier table from another node", zap.Error(err))
			return
		}
		if s.tiers.store(t) {
			logger.Info("tier limits changed on another node", zap.String("origin", t.Origin))
			if err := s.saveTiers(t); err != nil {
				logger.Error("keeping the tier table", zap.Error(err))
			}
		}
	}
}
