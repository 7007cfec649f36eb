package core

import (
	"slices"
	"testing"
	"time"
)

// A give-back to the key's owner is lost on the way (the owner never
// applies it), and its sender, taking the owner for dead, gives the units
// back again, naming it, to a node it takes for the key's owner. That node
// was declared dead meanwhile: it counts nothing, in no ring, and holds a
// unit of the key it admitted in fallback. The units name a give-back the
// owner may have applied, so they do not come off the fallback count; nor
// may they come off the node's engine, which holds nothing of the key:
// they came off nothing and were lost, while the owner, which never
// applied the give-back they replace, kept them counted. They wait until
// a ring names the key's owner, and go there naming the give-back: the
// owner applies them if it never applied the give-back, and skips them if
// it did.
func TestAGiveBackSentAgainToANodeDeclaredDeadWithAFallbackCountComesOffWhereTheKeyIsCounted(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(map[bool]string{false: "lost", true: "applied"}[applied], func(t *testing.T) {
			giveBackSentAgainToANodeDeclaredDead(t, applied)
		})
	}
}

func giveBackSentAgainToANodeDeclaredDead(t *testing.T, applied bool) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	// n2 spends a unit through n0 and gives it back: n0 never gets the
	// give-back, or applies it and its acknowledgement is lost.
	var tk *handTake
	var was uint64
	if applied {
		tk, was = h.giveBackAppliedUnacknowledged(k, load)
	} else {
		tk, was = load.spend("n2"), 77
		if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
			t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
		}
	}
	load.admitted-- // given back

	// n1 is cut off alone and takes n0 for dead: it finds no majority,
	// and admits a unit of the key in fallback.
	h.cut["n1"] = true
	h.list("n1", []Member{h.member("n2")}, []Peer{n0.self})
	h.advance(time.Second)
	if tk := load.spend("n1"); !tk.done || !tk.d.Allowed || tk.d.Source != SourceFallback {
		t.Fatalf("n1's request: %+v; want admitted by fallback", tk.d)
	}
	load.resume()

	// The others declare n1 dead; it learns so: in no ring, knowing no
	// member.
	h.declareDead("n1")
	h.cut["n1"] = false
	h.learnsItWasDeclaredDeadKnowingNoMember("n1", k)
	if !n1.fallback.engine.Has(h.now, k) {
		t.Fatal("n1 holds no fallback count of the key")
	}

	// n2 gives the unit back again to n1, in place of the lost give-back.
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano(), Was: was, WasTo: n0.self}, true)
	h.pump()

	// n1 joins again.
	h.joinsAgain("n1", 3*time.Second)
	h.heldBy(k, load.admitted, h.names...)
	// n0's acknowledgements reach n2 again: the cluster has healed.
	delete(h.unacked, [2]string{"n2", "n0"})
	h.advance(time.Second)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
