package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner is declared dead while it still counts, learns it, and
// joins again (the same run, or, crashed once its counter was
// acknowledged, a new one); it is declared dead again. Its successor, which
// took the key over each time, restarted from its snapshot after each
// takeover: each evicted counter (ModeEvicted, holding what the owner
// admitted beyond its replica) is meant for a different earlier run of
// the successor (WasTo), and reaches its next run, which restored the
// key from a snapshot naming the runs whose counts it holds
// (placeEvicted, earlier). Each is weighed once where the key is
// counted: the cluster holds what was admitted, and the owner admits up
// to the limit. (Five nodes: the second takeover has a majority.) The
// opposite order cannot happen: the owner joins again only once its
// evicted counter is acknowledged (tickGate), and one from a run that
// crashed before that is refused (its sender's run is gone) and lost with
// it, as in any crash.
func TestEvictedCountersOfTwoDeathsOfOneNodeForTwoRunsOfTheSuccessorCountOnce(t *testing.T) {
	for _, newRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("rejoins as a new process %v", newRun), func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
			k, load := h.n0DiesTwiceAndN1RestartsAfterEachTakeover(newRun, 13, func(_ *handLoad, snapshot Kept, _ bool) {
				h.down["n1"] = true
				h.n1RestartsFrom(snapshot)
			})
			h.holdsAdmitted(k, load.admitted, "")
			load.spendsToTheLimit(t, "n0", "n1", "n2")
		})
	}
}

// n0DiesTwiceAndN1RestartsAfterEachTakeover plays, in a cluster of n0–n4,
// on a key of n0's with successor n1 and 7 spent: n0 admits two more,
// never replicated, and stops answering; the others declare it dead and
// n1 takes the key over and admits one; n1 restarts from its snapshot
// (restart, given the key's load, the snapshot it wrote and whether this
// is the second time: it crashes and starts again, see n1RestartsFrom).
// n0 learns it was declared dead, sends its counter on, and joins again
// (the same run, or, newRun, a new one once its counter was
// acknowledged); it counts what was admitted, admits four more (one never
// replicated) and stops answering again; n1 takes the key over again
// (n1AtSecond: what it must count then) and restarts again; n0 learns it
// and joins again. Each of n0's evicted counters must go to the run of n1
// after the one it is meant for.
func (h *handNet) n0DiesTwiceAndN1RestartsAfterEachTakeover(newRun bool, n1AtSecond int64, restart func(load *handLoad, snapshot Kept, second bool)) (limiter.Key, *handLoad) {
	t := h.t
	t.Helper()
	others := []string{"n1", "n2", "n3", "n4"}
	k, load := h.spentKey("n0", "n1", 7)
	h.advance(20 * time.Millisecond) // replicated to n1
	n0 := h.cores["n0"]
	// The evicted counters applied: to which run of n1, meant for which.
	var evicted [][2]uint64
	h.drops = func(from string, o Outgoing) bool {
		if tr, ok := o.Msg.(Transfer); ok && from == "n0" && tr.Mode == ModeEvicted && tr.WasTo.Name != "" && !h.lost(from, o.To.Name) {
			evicted = append(evicted, [2]uint64{tr.WasTo.Inc, tr.To})
		}
		return false
	}
	// Two more admitted at n0, never replicated: it stops answering.
	load.spend("n0")
	load.spend("n0")
	h.down["n0"] = true
	h.declareDead("n0")
	load.resume()
	load.spend("n1")
	if got := h.count("n1", k); got != 8 || load.admitted != 10 {
		t.Fatalf("n1 counts %d after taking over, %d admitted; want 8 and 10", got, load.admitted)
	}
	keep := func() Kept { return h.cores["n1"].Keep(h.now, h.cores["n1"].engine.StatesOf(h.now, []limiter.Key{k})) }
	restart(load, keep(), false)

	// n0 learns it was declared dead, sends its counter on, and joins again.
	h.learnsItWasDeclaredDead("n0")
	if newRun {
		// It learns of n1's new run, stops once its counter is
		// acknowledged, and starts again.
		h.setMembership("n0", nil)
		for range 300 {
			h.advance(10 * time.Millisecond)
			if n0.out.pendingFor("", purposeHeld) == 0 {
				break
			}
		}
		if n0.out.pendingFor("", purposeHeld) > 0 {
			t.Fatalf("n0's counter was not acknowledged")
		}
		h.down["n0"] = true
		n0 = h.start("n0", true)
		n0.Joined(h.now)
		for _, name := range others {
			h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n0"), Joining: []Member{h.member("n0")}})
			h.pump()
		}
	}
	h.joinsAgainAndTakesItsKeysBack("n0")
	h.advance(time.Second)
	if !n0.Member() || h.count("n0", k) != int64(load.admitted) {
		t.Fatalf("n0 joined again: member %v, counts %d of %d admitted", n0.Member(), h.count("n0", k), load.admitted)
	}
	for range 3 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	load.spend("n0")
	h.down["n0"] = true
	h.declareDead("n0")
	load.resume()
	if got := h.count("n1", k); got != n1AtSecond || int64(load.admitted) != n1AtSecond+1 {
		t.Fatalf("n1 counts %d after the second takeover, %d admitted; want %d and %d", got, load.admitted, n1AtSecond, n1AtSecond+1)
	}
	restart(load, keep(), true)
	h.learnsItWasDeclaredDead("n0")
	h.advance(100 * time.Millisecond)
	h.joinsAgainAndTakesItsKeysBack("n0")
	h.advance(2 * time.Second)
	load.resume()
	if len(evicted) != 2 || evicted[0] != [2]uint64{1, 2} || evicted[1] != [2]uint64{2, 3} {
		t.Fatalf("evicted counters sent again, (meant for, to) runs of n1: %v; want [[1 2] [2 3]]", evicted)
	}
	return k, load
}

// n1RestartsFrom starts a new run of n1 (its last run down) from
// snapshot, which joins: n2–n4 hear of it as joining, then as a member,
// n0 dead. It must be a member with its hand-off done a second later.
func (h *handNet) n1RestartsFrom(snapshot Kept) *Core {
	h.t.Helper()
	n1 := h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	dead := []Peer{h.cores["n0"].self}
	for _, name := range []string{"n2", "n3", "n4"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n0", "n1"), Joining: []Member{h.member("n1")}, Dead: dead})
		h.pump()
	}
	h.setMembership("n1", []string{"n0"})
	others := []string{"n1", "n2", "n3", "n4"}
	h.advance(100*time.Millisecond, others...)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(time.Second, others...)
	if !n1.Member() || n1.HandoffUnderway() {
		h.t.Fatalf("the new run of n1: member %v, hand-off under way %v", n1.Member(), n1.HandoffUnderway())
	}
	return n1
}

// joinsAgainAndTakesItsKeysBack has every node list every other as a
// member, and lets time pass until name, declared dead, is a member
// again and its hand-off is done (3s at the most).
func (h *handNet) joinsAgainAndTakesItsKeysBack(name string) {
	for _, x := range h.names {
		h.setMembership(x, nil)
	}
	c := h.cores[name]
	for range 300 {
		h.advance(10 * time.Millisecond)
		if c.Member() && !c.HandoffUnderway() {
			break
		}
	}
}
