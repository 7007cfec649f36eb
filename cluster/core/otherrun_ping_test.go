package core

import (
	"testing"
	"time"
)

// An owner crashes and a node admits its key in fallback. The owner starts
// again at the same address before the node hears of the new run: the new
// run answers the node's ping of the old one. That is no answer of the
// old run: the node neither calls the old run again (its calls would reach
// the new run) nor sends it the fallback counts, which the new run refuses
// as meant for another run and which wait then for as long as the old run
// may apply them (a node leaving meanwhile took them with it: seed
// 1795816501511163588). They go to the new run once the node lists it.
func TestAnAnswerOfAnotherRunIsNotThePingedRunsAnswer(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	_, load := h.spentKey("n0", "n1", 5)
	old := h.cores["n0"].Self()

	h.down["n0"] = true
	h.advance(300 * time.Millisecond) // calls to n0 fail
	load.spend("n2")
	load.resume()
	if load.by[SourceFallback] != 1 {
		t.Fatalf("admitted %v while the owner was down; want one by fallback", load.by)
	}

	h.start("n0", true) // a new run, not yet listed by n2
	h.advance(500*time.Millisecond, "n2")
	if h.cores["n2"].Reachable("n0") {
		t.Errorf("n2 calls n0's old run again after its new run answered a ping")
	}
	if n := h.pendingTo("n2", old); n != 0 {
		t.Errorf("n2 sent %d transfers to n0's old run after its new run answered a ping; want none", n)
	}
}
