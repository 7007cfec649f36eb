package core

import (
	"testing"
	"time"
)

// An owner stands still (stopped, or not scheduled) for longer than a
// call timeout and shorter than failure detection: the others' calls to
// it fail, and they admit its key in fallback, each within its share.
// When it runs again, the requests that waited for it come first, before
// the others' fallback counts reach it (each after that node's next ping
// of it). Decided from its own count, they made 110 of 100 with three
// real processes. An owner that stood still asks the others first, and
// decides with what they admitted: the window admits exactly the limit,
// no more, and no less.
func TestAnOwnerThatStoodStillDecidesWithWhatOthersAdmittedMeanwhile(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 10) // limit 30
	load.spend("n1")
	load.spend("n2") // the owner tells them what remains: their shares

	h.down["n0"] = true
	h.advance(300 * time.Millisecond) // past the call timeout, within the lease
	for range 15 {
		load.spend("n1")
		load.spend("n2")
	}
	load.resume()
	if load.by[SourceFallback] == 0 {
		t.Fatalf("admitted %v while the owner stood still; want some by fallback", load.by)
	}
	fallback := load.by[SourceFallback]

	// The owner runs again: requests reach it before it ticks.
	h.down["n0"] = false
	for range 30 {
		load.spend("n0")
	}
	h.advance(200 * time.Millisecond)
	load.resume()
	h.advance(time.Second)
	for range 10 {
		load.spend("n0")
		load.spend("n1")
	}
	load.resume()
	if load.admitted != 30 {
		t.Errorf("the window admitted %d of a limit of 30 (%v; %d by fallback while the owner stood still); want exactly 30", load.admitted, load.by, fallback)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the owner counts %d; %d were admitted", got, load.admitted)
	}
}
