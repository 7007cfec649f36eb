package core

import (
	"slices"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// A node sends a key's counter to a node and, before that node
// acknowledges it, a third node that owns the key now pulls it. The
// counter is in neither: the receiver has nothing to give until the
// transfer arrives, and it may never apply it. The answer says the counter
// is on its way and names nobody, so the asker neither counts the key from
// what it holds nor asks the receiver for it; asked again once the
// receiver acknowledged it, it names the receiver (seed
// 1795781828627746457 of the simulator: a leaver cut off with a key's
// counter sent it to the node it took for the owner; the owner, told
// "moved to" that node, found nothing there yet, counted the key from its
// fallback counts, and admitted 55 of a bound of 54).
func TestAPullOfAKeyWhoseCounterIsOnItsWayElsewhereIsAskedAgain(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, _ := h.spentKey("n2", "n0", 6)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	states := n2.engine.ExtractKeys(h.now, []limiter.Key{k})
	n2.sendTransfer(h.now, n0.self, Transfer{Mode: ModeAdd, Own: true, States: states}, purposeHandoff)
	var sent []Outgoing
	for _, o := range n2.Outbox() {
		if _, ok := o.Msg.(Transfer); ok && o.To.Name == "n0" {
			sent = append(sent, o)
		}
	}
	if len(sent) != 1 {
		t.Fatalf("n2 sent %d transfers to n0, want the counter's", len(sent))
	}

	reply := n2.handlePull(h.now, n1.self, Pull{To: n2.self.Inc, Keys: []limiter.Key{k}})
	if !slices.Contains(reply.Sending, k) || len(reply.Moved) > 0 || len(reply.Given) > 0 {
		t.Fatalf("asked while the counter is on its way to n0: sending %v, moved %v, given %d transfers; want the key sending, nothing else", reply.Sending, reply.Moved, len(reply.Given))
	}

	n2.Answered(h.now, sent[0].ID, n0.Handle(h.now, n2.Self(), sent[0].Msg))
	reply = n2.handlePull(h.now, n1.self, Pull{To: n2.self.Inc, Keys: []limiter.Key{k}})
	if slices.Contains(reply.Sending, k) || !slices.Contains(reply.Moved, KeyOwner{Key: k, Owner: "n0"}) {
		t.Errorf("asked once n0 acknowledged the counter: sending %v, moved %v; want it named at n0", reply.Sending, reply.Moved)
	}
}
