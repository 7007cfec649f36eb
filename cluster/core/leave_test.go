package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node leaves, and the key it owned, never spent, moves to the next
// node in its order, which pulls it from the leaver; a third node has not
// heard of the leaving yet. The leaver's ring names the puller the key's
// owner, as the puller's does: holding nothing of the key, it had nothing,
// and says so. Answering "moved" to the node after the puller in its order
// (as to a node guessing from a ring it does not share) sent the pull
// around between it and the third node, which still takes the leaver for
// the owner, while requests for the key waited and were decided by
// fallback in a change that was graceful (seed 9954 of the simulator).
func TestAPullFromANodeLeavingAnswersNothingForAKeyItHeldNothingOf(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	var k limiter.Key
	var not []limiter.Key
	for {
		k = h.keyOwnedBy("n0", "n1", not...)
		without := NewRing(h.hash, []Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
		if o, _ := without.OwnerWithout(k.Route(), "n1"); o.Name == "n2" {
			break
		}
		not = append(not, k)
	}
	member := func(name string) Member { return Member{Name: name, Inc: h.incs[name], PeerAddr: name} }
	h.cores["n0"].Leave(h.now)
	leaving := []Member{member("n0")}
	h.cores["n1"].SetMembership(h.now, Membership{Members: []Member{member("n2"), member("n3")}, Leaving: leaving})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{member("n1"), member("n2")}, Leaving: leaving})
	h.pump()

	tk := h.take("n1", k, 10)
	h.pump() // the pull goes out while the request waits
	h.finish(tk)
	if !tk.d.Allowed || tk.d.Source != SourceOwner {
		t.Errorf("a request for the key through its new owner: allowed %v by %v; want allowed by its owner", tk.d.Allowed, tk.d.Source)
	}
	h.advance(100 * time.Millisecond)
	if got := h.count("n1", k); got != 1 {
		t.Errorf("n1 counts %d of the key; 1 was admitted", got)
	}
}
