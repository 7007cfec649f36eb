package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner stands still for longer than failure detection: the others
// declare it dead, and its successor starts its key from the replica,
// which holds every unit the owner granted. Running again, before it hears
// that, the owner gives back a unit it granted (a request whose other zone
// was denied). Taken off its own counter, the unit is lost where that
// counter meets the replica: the two are copies of one counter, and the
// larger stands. The units wait until the owner knows where its keys are
// counted, and come off the counter there.
func TestAUnitGivenBackByAnOwnerThatStoodStillComesOffWhereItsKeyIsCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 10) // limit 30
	h.advance(20 * time.Millisecond)      // replicated to n1

	h.down["n0"] = true
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second)
	if h.cores["n1"].HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("n1 did not take the key over from its replica: hand-off under way %v, count %d", h.cores["n1"].HandoffUnderway(), h.count("n1", k))
	}

	// n0 runs again and gives a unit back before it hears it was declared
	// dead.
	h.down["n0"] = false
	h.cores["n0"].refund(h.now, []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: load.quota, Window: time.Hour}}})
	for range 100 {
		h.advance(10 * time.Millisecond)
	}
	if got := h.count("n0", k) + h.count("n1", k) + h.count("n2", k); got != 9 {
		t.Errorf("the cluster counts %d (n0 %d, n1 %d, n2 %d); 9 were admitted", got, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	}
}
