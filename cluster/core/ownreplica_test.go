package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner's successor dies and comes back: meanwhile the owner replicated
// the key to the node after it, which keeps that replica once the owner
// replicates to the successor's next run again. That node alone takes the
// owner for dead (a split that heals) and sends the replica on, as the
// owner run's counter, to the key's owner without it, which still sees the
// owner and sends it on there (seed 195 of the simulator: the cluster held
// 11, 6 were admitted). It arrives at the very run it names: a counter of
// this run, which never sent the key's counter away, holds nothing its own
// counter does not. It adds nothing.
func TestACounterOfTheReceiversOwnRunSentOnAddsNothing(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 3)
	h.advance(20 * time.Millisecond) // replicated to n1

	// n1 dies: n0 replicates the key to n2.
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	for range 2 {
		load.spend("n0")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	if _, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner.Name != "n0" {
		t.Fatalf("n2 keeps no replica of the key")
	}

	// n1's next run joins; n0 replicates to it, n2 keeps what it had.
	h.start("n1", true)
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	h.cores["n1"].Joined(h.now)
	h.setMembership("n0", nil)
	h.setMembership("n2", nil)
	h.advance(time.Second)
	load.spend("n0")
	load.resume()
	h.advance(50 * time.Millisecond)

	// n2 alone takes n0 for dead: it sends its replica on to n1, which
	// sends it on to n0.
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second)
	load.resume()

	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}
}

// A node keeps the replica of a dead run, brought up to date by the copy
// of its counter that the run's next run read back from its snapshot and
// sent here. An older replica of the same run, sent on by another node
// that took the run for dead, arrives as the run's counter: both are
// copies of one counter, and the newer goes on. Taken for the run's own
// hand-off, the older dropped the newer copy here, and what the run
// counted after that replica was lost (seed 475 of the simulator: the
// cluster held 11, 13 were admitted).
func TestAnOlderCopyOfARunsCounterDoesNotDropTheNewerReplica(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 3)
	n0 := h.cores["n0"]
	older := n0.engine.StatesOf(h.now, []limiter.Key{k})
	for range 2 {
		load.spend("n0")
	}
	load.resume()
	newer := n0.engine.ExtractKeys(h.now, []limiter.Key{k}) // counted by a run that died since
	if got := windowCount(newer); load.admitted != 5 || got != 5 {
		t.Fatalf("admitted %d, the counter holds %d; want 5 and 5", load.admitted, got)
	}
	dead := Peer{Name: "n1", Inc: h.incs["n1"] + 7}
	n0.replicas.put(h.now, n0.mono(h.now), dead, newer, nil, nil, n0.Ring(), "n0")
	n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeAdd, CountersOf: dead, States: older}, true)
	h.pump()
	if got := h.count("n0", k); got != 5 {
		t.Errorf("n0 counts %d; the run counted 5", got)
	}
}
