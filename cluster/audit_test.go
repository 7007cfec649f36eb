package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Issue 16, audit item 1, on real nodes: a newcomer that cannot pull the
// keys moving to it (their old owner's links are cut for a moment, as a
// short stop would) never has a request for a key under its limit denied:
// it answers "not yet mine" and the caller decides by fallback, never
// "moved to nobody", which callers took for a denial. (That the moved
// keys' counts are whole once the old owner is back is the simulator's
// conservation check; here the freeze may outlast failure detection.)
func TestNewOwnerThatCannotPullDeniesNobody(t *testing.T) {
	f := newFaultNet(16)
	start := func(name string, join ...string) *Node {
		cfg := faultConfig(f, name, "127.0.0.1:0", "127.0.0.1:0")
		cfg.Join = join
		n, err := Start(cfg, limiter.New(limiter.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	n0 := start("n0")
	n1 := start("n1", n0.GossipAddr())
	waitConverged(t, []*Node{n0, n1}, 2)
	// Keys n0 owns now, with some spent through n1.
	var keys []limiter.Key
	for i := 0; len(keys) < 200; i++ {
		k := limiter.ZoneKey(uint64(i+1)*0x9E3779B97F4A7C15, 9)
		if n0.Owner(k).Name == "n0" {
			keys = append(keys, k)
		}
	}
	lim := limitOf(100)
	spent := map[limiter.Key]int{}
	for _, k := range keys[:100] {
		if ok, _ := takeVia(n1, k, lim); ok {
			spent[k]++
		}
	}
	// n0's links go quiet as n2 joins: n2 cannot pull what moves to it.
	f.set(func() { f.frozen["n0"] = true })
	start("n2", n1.GossipAddr())
	var moved []limiter.Key
	eventually(t, 10*time.Second, "n2 in n1's ring", func() bool { return n1.Ring().Has("n2") })
	for _, k := range keys {
		if n1.Owner(k).Name == "n2" {
			moved = append(moved, k)
		}
	}
	if len(moved) < 10 {
		t.Fatalf("only %d keys moved to n2", len(moved))
	}
	denied := 0
	for _, k := range moved {
		ok, src := takeVia(n1, k, lim)
		if !ok {
			denied++
			t.Logf("key %x denied by %v", k, src)
		} else {
			spent[k]++
		}
	}
	f.set(func() { f.frozen["n0"] = false })
	if denied > 0 {
		t.Errorf("%d of %d requests for moved keys under their limit denied while the new owner could not pull them", denied, len(moved))
	}
}
