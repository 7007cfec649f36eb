package caddymodule

import (
	"testing"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
)

// Tables from other nodes are ordered by the shared value's version, the
// one every node agrees on, whatever the clock of the node that made them.
func TestTierTablesFollowTheSharedVersion(t *testing.T) {
	var s state
	arrived := s.sharedArrived(zap.NewNop())
	arrived(tiersSharedName, cluster.SharedValue{Value: []byte(`{"api": {"pro": 5}}`), Version: 100, Origin: "a"})
	if n, ok := s.tiers.load().get("api", "pro"); !ok || n != 5 {
		t.Fatalf("first table: %d %v", n, ok)
	}
	// A node whose clock is behind made the next change: the shared layer
	// still gave it a later version, and that is what orders it.
	next := (&tierTable{Zones: map[string]map[string]int64{"api": {"pro": 9}}, Version: 101, Origin: "b"}).sharedValue()
	arrived(tiersSharedName, next)
	if n, _ := s.tiers.load().get("api", "pro"); n != 9 {
		t.Fatalf("a newer shared version was not put in effect: pro is %d", n)
	}
	// An older one arriving late changes nothing.
	arrived(tiersSharedName, cluster.SharedValue{Value: []byte(`{"api": {"pro": 1}}`), Version: 99, Origin: "c"})
	if n, _ := s.tiers.load().get("api", "pro"); n != 9 {
		t.Fatalf("an older shared version replaced a newer one: pro is %d", n)
	}
}
