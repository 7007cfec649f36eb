package core

import (
	"testing"
	"time"
)

// A key's owner leaves on its side of a split, where the ring, lacking
// the far side, gives the key to the other node there: the leaver hands
// its counter to that node. Once the split heals, the ring without the
// leaver gives the key to a node of the far side, whose hand-off waits for
// the leaver alone (the stable ring names it the key's owner). The leaver
// holds nothing more of the key, but it did not hand it to the asker: its
// pull and seal answers must say where it went, and the new owner must
// wait for the counter there before it counts the key (seed
// 1795778134734375171 of the simulator: the new owner counted the key from
// nothing while the counter, 30 of a limit of 25, was on its way; 31
// admitted).
func TestAKeyHandedElsewhereByALeaverIsPulledFromThereBeforeItCounts(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	// n2 keeps the key's replica, and owns it once n0 is gone.
	k := h.keyOwnedBy("n0", "n2")
	if o, _ := NewRing(h.hash, []Member{h.member("n1"), h.member("n2"), h.member("n3")}).Owner(k.Route()); o.Name != "n2" {
		t.Fatalf("without n0 the key goes to %s", o.Name)
	}
	load := newHandLoad(h, k, 10)
	for range 10 {
		load.spend("n0")
	}
	h.advance(50 * time.Millisecond)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	// n2 and n3 on the far side of a split; n0 leaves on its side, whose
	// ring gives the key to n1.
	h.cut["n2"], h.cut["n3"] = true, true
	h.advance(time.Second)
	dead := []Peer{h.member("n2").Peer(), h.member("n3").Peer()}
	leaving := []Member{h.member("n0")}
	n0.Leave(h.now)
	n0.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Dead: dead})
	n1.SetMembership(h.now, Membership{Leaving: leaving, Dead: dead})
	h.pump()
	h.advance(200 * time.Millisecond)
	if got := h.count("n0", k); got != 0 {
		t.Fatalf("the leaver still counts %d of the key", got)
	}

	// The split heals. n0, n2 and n3 learn first that n0 is leaving: the
	// key is n2's now.
	h.cut["n2"], h.cut["n3"] = false, false
	for _, name := range []string{"n2", "n3"} {
		var others []Member
		for _, x := range []string{"n1", "n2", "n3"} {
			if x != name {
				others = append(others, h.member(x))
			}
		}
		h.cores[name].SetMembership(h.now, Membership{Members: others, Leaving: leaving})
	}
	n0.SetMembership(h.now, Membership{Members: []Member{h.member("n1"), h.member("n2"), h.member("n3")}})
	h.pump()
	h.advance(100*time.Millisecond, "n0", "n2", "n3")
	tk := h.take("n2", k, 10)
	if tk.done && tk.d.Allowed && tk.d.Source == SourceOwner {
		t.Errorf("n2 admitted the key as its owner with %d counted; %d were admitted, their counter is with n1", h.count("n2", k)-1, load.admitted)
	}

	// n1 learns it too, and the counter goes to n2.
	n1.SetMembership(h.now, Membership{Members: []Member{h.member("n2"), h.member("n3")}, Leaving: leaving})
	h.pump()
	h.advance(2 * time.Second)
	if !tk.done {
		h.finish(tk)
	}
	load.count(tk)
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 counts %d of the key; %d were admitted", got, load.admitted)
	}
}
