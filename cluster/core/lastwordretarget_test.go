package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n1 hands its counter of a key over to the key's owner n2: 8, its last
// word (it had admitted 9 and given one back). n2 crashes before it gets
// it, and is declared dead: n1 gives the transfer up and sends the counter
// on to the key's owner now, n0 (retarget). An older copy of n1's counter
// (9, taken before the give-back, passed on by n3) reaches n0 too. The
// counter n1 sends on is still its last word on it, but goes as a plain
// copy of n1's counter (CountersOf n1, Last false: retarget turns Own into
// CountersOf and carries only pt.t.Last): at n0 the larger of the two
// copies stands, 9, and the unit n1 gave back counts again. Passed on by
// any other node it goes as n1's last word
// (TestAHandedOverCounterPassedOnLowersTheOlderCopyWhereTheKeyIsCounted),
// and n0 counts 8.
func TestAHandedOverCounterSentOnByItsRunLowersTheOlderCopyWhereTheKeyIsCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n2", "n0", "n1")
	older, handed := loweredCounter(h.now, k, 9)
	n0, n1, n2, n3 := h.cores["n0"], h.cores["n1"], h.cores["n2"], h.cores["n3"]
	h.down["n2"] = true
	n1.sendTransfer(h.now, n2.self, Transfer{Mode: ModeAdd, Own: true, States: []limiter.State{handed}}, purposeHandoff)
	h.pump()
	h.advance(20*time.Millisecond, "n0", "n1", "n3")

	// n2 is declared dead: n0 owns the key now.
	for _, name := range []string{"n0", "n1", "n3"} {
		h.setMembership(name, []string{"n2"})
	}
	h.advance(time.Second, "n0", "n1", "n3")
	if o, _ := n0.Ring().Owner(k.Route()); o.Name != "n0" {
		t.Fatalf("the key's owner is %s, not n0", o.Name)
	}
	copyOf := Transfer{Seq: 1000, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: []limiter.State{older}}
	n0.handleTransfer(h.now, n3.self, copyOf, false)
	h.pump()
	h.advance(2*time.Second, "n0", "n1", "n3")
	n1.out.mu.Lock()
	left := len(n1.out.transfers)
	n1.out.mu.Unlock()
	if left > 0 {
		t.Fatalf("n1 still has %d transfers unsettled: its hand-over to n2 was not sent on", left)
	}
	if got := h.count("n0", k) + h.count("n1", k) + h.count("n3", k); got != 8 {
		t.Errorf("the cluster counts %d of the key (n0 %d); n1's counter, handed over, holds 8", got, h.count("n0", k))
	}
}
