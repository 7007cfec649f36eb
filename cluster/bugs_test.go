package cluster

import (
	"testing"
	"time"
)

// A denial remembered in the blocked cache was decided under the tier
// limits of the time: a change of a shared value (new tier limits,
// published on any node) voids it everywhere.
func TestSharedValueChangeClearsTheBlockedCache(t *testing.T) {
	nodes := startNodes(t, 3)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	for range 3 {
		takeVia(nodes[0], key, limitOf(2))
	}
	eventually(t, 2*time.Second, "the denial cached", func() bool {
		_, src := takeVia(nodes[0], key, limitOf(2))
		return src == SourceBlockedCache
	})
	nodes[1].Publish("tiers", []byte(`{"pro": 100}`))
	eventually(t, 2*time.Second, "the owner asked again once the tiers changed", func() bool {
		ok, src := takeVia(nodes[0], key, limitOf(100))
		return ok && src == SourcePeer
	})
}
