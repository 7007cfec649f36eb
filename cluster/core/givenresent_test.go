package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// The old owner of a key hands its counter to a joiner, whose successor
// for the key it is, and keeps it until the joiner replicates it. The
// counter holds a count sent again in place of a transfer another run
// (n1) applied: the record of it goes with the counter to the joiner,
// and is kept with the counter the giver keeps. The joiner is cut off
// before the key settles there and taken over; the kept counter comes
// back to the giver naming the count, so that when n1's counter of the
// key comes, naming the transfer, the count is not added again. Kept
// without the record, the count was held twice.
func TestCountsKeptInPlaceOfATransferComeBackWithACounterTheGiverKept(t *testing.T) {
	h, k, load := spentBeforeAJoin(t)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	// n0 sent n1 (counting the key by a ring since left) one count; n1
	// applied it, the acknowledgement was lost, and n0 counted it in its
	// own counter in place of the transfer.
	one := n0.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	const seq = 9999
	rec := Resent{Marks: []Replaced{{From: n0.self, Seq: seq, To: n1.self}}, State: one}
	n0.engine.Merge(h.now, []limiter.State{one})
	load.admitted++
	n0.keepResent(h.now, []Resent{rec})
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d of the key; want 6", got)
	}

	h.joinWithoutSettling(k)

	h.cut["n2"] = true
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	h.advance(2*time.Second, "n0", "n1")
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 took the key over from n2 counting %d; want the 6 n2 held for it", got)
	}

	// n1's counter of the key comes, naming the transfer it applied.
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1000, To: n0.self.Inc, Mode: ModeAdd, Own: true, States: []limiter.State{one}, Applied: []Applied{{From: n0.self, Seq: seq}}}, true)
	h.pump()
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d of the key after n1's counter came; want 6: the count n1 applied is held once", got)
	}
	load.spendsToTheLimit(t, "n0", "n1")
}

// A dead run's counter comes to a node whose earlier run restored the
// key's counter (a snapshot) and sent it to the key's owner as a copy:
// the dead run's counter goes there as a copy too, and the record of the
// counts sent again that it holds goes with it. Kept here, where no
// counter of the key is, a later hand-off of this node's counter of the
// key would carry it, and its receiver would take out counts that counter
// never held.
func TestCountsKeptInPlaceOfATransferGoWithAnEvictedCounterSentOnAsACopy(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n1", "n3", "n2")
	load := newHandLoad(h, k, 30)
	load.spend("n1")
	h.advance(20 * time.Millisecond)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	if n0.self.Inc == 0 {
		t.Skip("n0's run has no earlier run")
	}
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	rec := Resent{Marks: []Replaced{{From: n2.self, Seq: 9999, To: n1.self}}, State: one}
	n0.replicas.noteRestored(n0.mono(h.now), Kept{States: []limiter.State{one}})
	n0.Outbox()
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n0.self.Inc, Mode: ModeEvicted, Evicted: n2.self, WasTo: Peer{Name: "n0", Inc: n0.self.Inc - 1}, States: []limiter.State{one}, Resent: []Resent{rec}}, true)
	var sent Transfer
	for _, o := range n0.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && tr.Mode == ModeCopy {
			sent = tr
		}
	}
	if len(sent.States) != 1 || sent.States[0].Key != k {
		t.Fatalf("the counter did not go on as a copy: %+v", sent)
	}
	if len(sent.Resent) != 1 || sent.Resent[0].State.Key != k {
		t.Fatalf("the copy went without the record: %+v", sent)
	}
	if held := n0.replicas.takeResentHeld([]limiter.Key{k}); len(held) != 0 {
		t.Fatalf("n0 keeps the record of counts its counters do not hold: %+v", held)
	}
}

// A counter this run handed to a key's new owner and keeps, as that
// owner's successor for the key, until the owner replicates it, is
// dropped once the ring makes another node that successor, or moves the
// key on from the owner (which hands its counter on): kept, a later
// takeover of the owner here would count it as this run's counter while
// the key's counter is elsewhere. A ring without the owner (taken for
// dead) keeps it: the takeover counts it.
func TestACounterKeptForItsReceiverIsDroppedWhenTheRingMovesTheKeyOn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	three := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2")})
	four := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2"), h.member("n3")})
	without := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n3")})
	names := func(r *Ring, k limiter.Key) (string, string) {
		first, second := r.top2(k.Route())
		return r.member(first).Name, r.member(second).Name
	}
	var notSuccessor, movedOn limiter.Key
	for i := range 10000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		if o, s := names(three, k); o != "n2" || s != "n0" {
			continue
		}
		switch o, s := names(four, k); {
		case o == "n2" && s == "n3" && notSuccessor == 0:
			notSuccessor = k
		case o == "n3" && movedOn == 0:
			movedOn = k
		}
	}
	if notSuccessor == 0 || movedOn == 0 {
		t.Fatal("no keys of the shapes wanted")
	}
	to := h.member("n2").Peer()
	keep := func() *replicaStore {
		r := newReplicaStore(100)
		var given []givenCounter
		for _, k := range []limiter.Key{notSuccessor, movedOn} {
			given = append(given, givenCounter{to: to, state: limiter.State{Key: k, Kind: 1, Expires: h.now.Add(time.Hour).UnixNano(), Cur: 3}})
		}
		r.keepGiven(0, given)
		return r
	}
	r := keep()
	r.supersede(three, "n0")
	r.supersede(without, "n0")
	for _, k := range []limiter.Key{notSuccessor, movedOn} {
		if _, ok := r.givenTo(k, to); !ok {
			t.Fatalf("the counter of %v kept for n2 was dropped while n0 succeeds n2 in it, or n2 is taken for dead", k)
		}
	}
	r = keep()
	r.supersede(four, "n0")
	for _, k := range []limiter.Key{notSuccessor, movedOn} {
		if _, ok := r.givenTo(k, to); ok {
			t.Fatalf("the counter of %v kept for n2 stays though n0 no longer succeeds n2 in it", k)
		}
	}
}
