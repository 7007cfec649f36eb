package core

import (
	"slices"
	"testing"
	"time"
)

// A give-back the key's owner n0 applied (its answer lost, its replicas
// to its successor n1 lost) is given back again, in place of it, to n1,
// which took the key over from n0's stale replica and applies it: the
// units come off its counter, and n1 records them as given back in n0's
// place. n1 then leaves gracefully and hands the key's counter to n3.
// When n0, declared dead, comes back and its counters come to where the
// key is counted, they lack the units as the counter there does: the
// units must be put back once, wherever the counter went, and the key
// count what was admitted: the record of them goes with the counter.
func TestUnitsGivenBackAgainArePutBackWhereTheKeysCounterWent(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	h.advance(100 * time.Millisecond) // replicated to n1
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica
	}
	const refund = 77
	at := h.now.UnixNano()
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
	h.pump()
	load.admitted--
	h.advance(100 * time.Millisecond)

	// n0 stops answering; n1 takes the key over from its stale replica.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	for _, x := range []string{"n1", "n2", "n3"} {
		h.setMembership(x, []string{"n0"})
	}
	h.advance(2*time.Second, "n1", "n2", "n3")
	if got := h.count("n1", k); got != 5 {
		t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
	}
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}, true)
	h.pump()
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200 * time.Millisecond)

	// n1 leaves gracefully: the key's counter goes to n3.
	n1.Leave(h.now)
	leaving := []Member{h.member("n1")}
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}, Leaving: leaving})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}, Leaving: leaving})
	h.pump()
	for range 100 {
		h.advance(50*time.Millisecond, "n1", "n2", "n3")
		if n1.Drained() {
			break
		}
	}
	if !n1.Drained() {
		t.Fatal("n1 did not hand everything over")
	}
	h.down["n1"] = true
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}})
	h.advance(time.Second, "n2", "n3")
	if got := h.count("n2", k) + h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n2 and n3 count %d after n1 left; %d were admitted", got, load.admitted)
	}

	// n0 comes back, learns it was declared dead; its counters go to
	// where the key is counted, and it joins again.
	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	for _, name := range []string{"n0", "n2", "n3"} {
		h.setMembership(name, []string{"n1"})
	}
	h.advance(3 * time.Second)
	total := h.count("n0", k) + h.count("n2", k) + h.count("n3", k)
	if total != int64(load.admitted) {
		t.Fatalf("the cluster counts %d (n0 %d, n2 %d, n3 %d); %d were admitted (n2's unit was given back once)", total, h.count("n0", k), h.count("n2", k), h.count("n3", k), load.admitted)
	}

	// The other side: the key is spent up to its limit, and no request
	// under it is refused.
	for i := 0; int64(load.admitted) < load.quota; i++ {
		at := []string{"n0", "n2", "n3"}[i%3]
		if tk := load.spend(at); !tk.done || !tk.d.Allowed {
			t.Fatalf("request at %s refused with %d of %d admitted: %+v", at, load.admitted, load.quota, tk.d)
		}
	}
	if tk := load.spend("n2"); tk.done && tk.d.Allowed {
		t.Fatalf("request past the limit admitted: %d of %d", load.admitted, load.quota)
	}
}
