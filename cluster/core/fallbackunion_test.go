package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner, n0, counts it in a counter that another run's counter,
// passed on naming its run, joined (17: a record says the counter is that
// one joined, see unionRecord). Cut off with n4, without a majority, it
// takes n4's own counter of the key handed over (2, of n4's second
// counter of it: it names its generation): it waits with n0's fallback
// counts, and the records of the runs' counters n0's counter holds go
// with them (fallback.keepHeld). Once n0 has a majority again the
// fallback counts join its engine, weighed against what it holds of the
// runs they name. The union record stayed: the fallback counts, naming
// the run whose counter joined n0's, were taken for a counter that holds
// all n0's counter was made of, and added nothing (17 held of 19, and the
// owner admitted 13 more where 11 remained).
func TestFallbackCountsKeepingTheRecordsOfAJoinedCounterAreAddedWhenTheyJoinIt(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, _ := h.spentKey("n0", "n1", 1)
	base := h.cores["n0"].engine.ExtractKeys(h.now, []limiter.Key{k})[0]
	n0, n2, n4 := h.cores["n0"], h.cores["n2"], h.cores["n4"]
	at := func(n uint32) limiter.State { s := base; s.Cur = n; return s }
	dead, other := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}
	if a := n0.handleTransfer(h.now, n2.self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeAdd, CountersOf: other, Holds: []Held{{Run: dead, Gen: 1, State: at(15)}}, States: []limiter.State{at(17)}}, false); a.Refused {
		t.Fatal("n0 refused the counter passed on")
	}
	h.pump()
	if got := h.count("n0", k); got != 17 {
		t.Fatalf("n0 counts %d; want 17", got)
	}

	h.cut["n0"], h.cut["n4"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}
	hand := Transfer{Seq: 101, To: n0.self.Inc, Mode: ModeAdd, Own: true, Holds: []Held{{Run: n4.Self(), Gen: 1, State: at(2)}}, States: []limiter.State{at(2)}}
	if a, _ := n0.Handle(h.now, n4.Self(), hand).(Ack); a.Refused {
		t.Fatal("n0 refused n4's own counter")
	}
	h.pump()
	h.cut["n0"], h.cut["n4"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	var held int64
	for _, c := range h.counts(k) {
		held += c
	}
	if held != 19 {
		t.Errorf("the cluster counts %d of the key (%v); want 19", held, h.counts(k))
	}
	// The owner admits up to the limit (30), and no further.
	load := newHandLoad(h, k, 30)
	for i := range 12 {
		tk := load.spend("n0")
		h.advance(20 * time.Millisecond)
		load.resume()
		if want := i < 11; tk.d.Allowed != want {
			t.Fatalf("request %d of 12 beyond the 19 held: allowed %v; want %v (%v)", i+1, tk.d.Allowed, want, h.counts(k))
		}
	}
}
