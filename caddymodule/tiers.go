package caddymodule

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

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

func decodeTierTable(b []byte) (*tierTable, error) {
	t := new(tierTable)
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("decoding tier table: %w", err)
	}
	return t, nil
}

// The cluster shares the zones alone: the version and origin that order
// tables are the shared value's, so every node orders them the same way.

// sharedValue returns t as the cluster shares it.
func (t *tierTable) sharedValue() cluster.SharedValue {
	raw, _ := json.Marshal(t.Zones)
	return cluster.SharedValue{Value: raw, Version: t.Version, Origin: t.Origin}
}

// tierTableOf returns the table a shared value carries.
func tierTableOf(v cluster.SharedValue) (*tierTable, error) {
	t := &tierTable{Version: v.Version, Origin: v.Origin}
	if err := json.Unmarshal(v.Value, &t.Zones); err != nil {
		return nil, fmt.Errorf("decoding tier table: %w", err)
	}
	return t, nil
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
	for {
		cur := h.p.Load()
		if cur != nil && (cur.Version > t.Version || cur.Version == t.Version && cur.Origin >= t.Origin) {
			return false
		}
		if h.p.CompareAndSwap(cur, t) {
			return true
		}
	}
}
