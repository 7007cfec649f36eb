package core

import (
	"testing"
	"time"
)

// A dead owner (n0) applied a transfer of n2's (2 counts) after it last
// replicated to its successor n1, whose earlier run took the key over
// from the replica, counted on and crashed; the later run restored the
// counter (its snapshot names the dead owner's counts it holds) and
// handed the key to a node that joined (n3). n2, its transfer
// unacknowledged, sends the 2 again in place of it to n1, which passes
// them on to n3. Then n0's counter, saying it applied the transfer, comes
// to the earlier run of n1, and the later run gets it. The 2 are in the
// count at n3 once: the counter adds nothing, whichever comes first.
func TestAnEvictedCounterForAnEarlierRunIsWeighedOnceAgainstCountsSentAgain(t *testing.T) {
	for _, counterFirst := range []bool{false, true} {
		name := "counts sent again first"
		if counterFirst {
			name = "counter first"
		}
		t.Run(name, func(t *testing.T) {
			h, k := joinerN3Waits(t)
			load := h.spent(k, "n0", 7)
			evicted := h.n0AppliesATransferUnreplicated(k, "n2")
			_, earlier := h.n1TakesN0sKeyOverAndRestarts(k, load)
			load.admitted += 2 // n2's transfer, in n0's counter alone
			h.n3JoinsAndTakesTheKey(k, 8)

			resend := func() {
				h.sentAgainTo("n1", "n2", k)
				h.advance(100 * time.Millisecond)
			}
			counter := func() {
				h.n0sCounterComesTo("n1", "n2", evicted, earlier)
				h.advance(100 * time.Millisecond)
			}
			if counterFirst {
				counter()
				resend()
			} else {
				resend()
				counter()
			}
			h.advance(time.Second)
			h.holdsAdmitted(k, load.admitted, "n0")
			load.spendsToTheLimit(t, "n3", "n1", "n2")
		})
	}
}
