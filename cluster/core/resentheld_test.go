package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// resentToOwner has n0 send the owner of k (n1) one count it admitted in
// fallback; n1 applies it, its acknowledgement is lost, and n0 gives the
// transfer up. It returns the count and the record a counter holding it
// in place of the transfer carries (see Transfer.Resent).
func (h *handNet) resentToOwner(k limiter.Key, load *handLoad) (limiter.State, Resent) {
	h.t.Helper()
	n0, n1 := h.cores["n0"], h.cores["n1"]
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	n0.out.settle(sent.Seq) // given up on
	load.admitted++
	return one, Resent{Marks: []Replaced{{From: n0.self, Seq: sent.Seq, To: n1.self}}, State: one}
}

// resentToAnOwner starts four nodes, spends 5 of a key n1 owns (n3 its
// successor) and has n0 send n1 one count in a transfer n1 applies and
// n0 gives up on (see resentToOwner).
func resentToAnOwner(t *testing.T) (*handNet, limiter.Key, *handLoad, limiter.State, Resent) {
	t.Helper()
	h, k, load := n1CountsFiveOfFour(t)
	one, rec := h.resentToOwner(k, load)
	return h, k, load, one, rec
}

// n1CountsFiveOfFour starts four nodes and has n1, the owner of a key
// (n3 its successor, then n2), count 5 of it, replicated.
func n1CountsFiveOfFour(t *testing.T) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n1", "n3", "n2")
	load := h.spent(k, "n1", 5)
	h.advance(20 * time.Millisecond)
	return h, k, load
}

// n2HandsOverItsCounterHolding has n2 count one in its counter of k, as
// counts sent again in place of the transfer rec names, and hand the
// counter over to the key's owner.
func (h *handNet) n2HandsOverItsCounterHolding(k limiter.Key, one limiter.State, rec Resent) {
	n2 := h.cores["n2"]
	holdInItsCounter(h, n2, one, rec)
	n2.pushKeys(h.now, []limiter.Key{k})
	h.pump()
}

// holdInItsCounter has c count one in its counter of its key, as counts
// sent again in place of the transfer rec names.
func holdInItsCounter(h *handNet, c *Core, one limiter.State, rec Resent) {
	c.engine.Merge(h.now, []limiter.State{one})
	c.replicas.holdResent(c.mono(h.now), []Resent{rec})
}

// A counter holding counts sent again in place of a transfer its owner
// applied (its acknowledgement lost) comes to a node that is not the key's
// owner and knows nothing of the transfer: it passes the counter on with
// the record, and the owner, which applied the transfer, takes the counts
// out of it. Passed on without the record, the counts were added twice.
func TestCountsKeptInPlaceOfATransferGoWithTheCounterPassedOn(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n0, n2 := h.cores["n0"], h.cores["n2"]

	// n0's counter of the key, which holds the count in place of the
	// transfer, reaches n2 (handed to it by a ring n2 no longer follows).
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeAdd, Own: true, States: []limiter.State{one}, Resent: []Resent{rec}}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// The owner is declared dead and its successor counts the key from the
// owner's replica, which holds the count; the counter holding the count
// in place of the transfer then comes to the successor, which knows by
// the replicas that the owner applied the transfer, and takes the count
// out of it (seed 1795816501511161683 of the simulator: the node the
// counter came through knew, by the owner's counters that came there,
// that the owner applied it).
func TestCountsKeptInPlaceOfATransferComeOutWhereTheOwnerIsKnownToHoldThem(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	h.advance(50 * time.Millisecond) // n1 replicates to n3, naming the transfer
	n0, n3 := h.cores["n0"], h.cores["n3"]

	h.down["n1"] = true
	for _, name := range []string{"n0", "n2", "n3"} {
		h.setMembership(name, []string{"n1"})
	}
	h.advance(2 * time.Second)
	if got := h.count("n3", k); got != 6 {
		t.Fatalf("n3 counts %d of the key; want the 6 of n1's replica", got)
	}
	n3.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n3.self.Inc, Mode: ModeAdd, Own: true, States: []limiter.State{one}, Resent: []Resent{rec}}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n1")
}

// A node holding such counts in its counter of a key is declared dead:
// its counter goes out as a dead node's with the record, and the owner
// that applied the transfer takes the counts out of it.
func TestCountsKeptInPlaceOfATransferGoWithAnEvictedCounter(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]

	// n2 counted the key for a while (by a ring the others no longer
	// follow) in a counter that holds the count in place of the transfer,
	// and is declared dead: its counters go out as a dead node's.
	holdInItsCounter(h, n2, one, rec)
	n2.viewMu.Lock()
	n2.sendEvicted(h.now, n2.engine.ExtractKeys(h.now, []limiter.Key{k}), nil)
	n2.viewMu.Unlock()
	var sent Transfer
	for _, o := range n2.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && tr.Mode == ModeEvicted {
			sent = tr
		}
	}
	if len(sent.Resent) != 1 || sent.Resent[0].State.Key != k {
		t.Fatalf("the dead node's counter went without the record: %+v", sent)
	}
	sent.To = n1.self.Inc
	n1.handleTransfer(h.now, n2.self, sent, true)
	h.pump()
	h.holdsAdmitted(k, load.admitted, "")
}

// A counter holding counts sent again in place of a transfer its key's
// owner applied comes to a node the key is moving to (it joins), before
// the owner's counter: it waits there with the record until the key
// settles, and the counts count once whichever of the two comes first.
func TestCountsKeptInPlaceOfATransferWaitWithTheirRecordForTheKeyToSettle(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	h.names = append(h.names, "n3")
	h.start("n3", true)
	before := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2")})
	after := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2"), h.member("n3")})
	var k limiter.Key
	for i := range 10000 {
		x := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := before.Owner(x.Route())
		j, _ := after.Owner(x.Route())
		if o.Name == "n1" && j.Name == "n3" {
			k = x
			break
		}
	}
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond)
	one, rec := h.resentToOwner(k, load)
	n0, n3 := h.cores["n0"], h.cores["n3"]

	// n3 joins; what it asks of n1 is lost for now, so the key waits.
	h.oneway = map[[2]string]bool{{"n3", "n1"}: true}
	n3.Joined(h.now)
	h.list("n3", []Member{h.member("n0"), h.member("n1"), h.member("n2")}, nil)
	h.advance(10*time.Millisecond, "n3")
	if !n3.Member() {
		t.Fatal("n3 did not join")
	}
	n3.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n3.self.Inc, Mode: ModeAdd, Own: true, States: []limiter.State{one}, Resent: []Resent{rec}}, true)
	h.pump()
	if h.count("n3", k) != 0 {
		t.Fatal("the key settled at n3 before n1's counter came")
	}

	delete(h.oneway, [2]string{"n3", "n1"})
	for _, name := range h.names {
		var others []Member
		for _, x := range h.names {
			if x != name {
				others = append(others, h.member(x))
			}
		}
		h.list(name, others, nil)
	}
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// A node whose counter of a key holds such counts gives it in answer to a
// pull of the key: the record goes with it, and the owner that applied
// the transfer takes the counts out.
func TestCountsKeptInPlaceOfATransferGoWithAPulledCounter(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]

	// n2 counted the key for a while (by a ring the others no longer
	// follow) in a counter that holds the count in place of the transfer.
	holdInItsCounter(h, n2, one, rec)
	reply := n2.handlePull(h.now, n1.self, Pull{To: n2.self.Inc, Keys: []limiter.Key{k}})
	if len(reply.Given) != 1 || len(reply.Given[0].Resent) != 1 {
		t.Fatalf("the counter given went without the record: %+v", reply)
	}
	for _, tr := range reply.Given {
		n1.handleTransfer(h.now, n2.self, tr, true)
	}
	h.pump()
	h.holdsAdmitted(k, load.admitted, "")
}
