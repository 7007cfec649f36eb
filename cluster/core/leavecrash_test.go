package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n1 has admitted 20 of it, replicated to its successor n2.
// It starts to leave and crashes at once: nothing it hands over arrives.
// The others hear of it as leaving, then as dead. Its counter is lost with
// it but for its replica, which holds all 20 (its last change was 50 ms
// before the crash): the key's new owner must count the key from that
// replica. The successor dropped the replica as soon as it heard of the
// leave (a replica of a run that left gracefully is stale: its counters
// were handed over), before the counters were, and the new owner counts
// the key from nothing: 20 more than the limit are admitted.
func TestAnOwnerThatCrashesWhileLeavingLeavesItsReplica(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2")
	_, load := h.twentySpentThroughN1()

	// n1 starts to leave and crashes: what it sends is lost.
	h.down["n1"] = true
	h.cores["n1"].Leave(h.now)
	h.pump()
	h.othersSeeLeaveThenDeath("n1")
	load.staysWithinTheLimit(t, quota, "n2", "n0")
}

// A node joins and borrows one of its new keys from the key's owner n0,
// which has not heard of it yet: the borrower counts the key and
// replicates it to n0, its successor for it, which also keeps the record
// of the counter it gave. The borrower starts to leave and crashes at
// once: nothing it hands over arrives. n0 hears of it as leaving, then as
// dead; its ring never changes. The replica and the record are the
// borrower's count of the key: the loan ends, and n0 counts the key from
// them. n0 dropped both as soon as it heard of the leave (taking a
// leaving run for one that left, whose counters were handed over), and
// counted the key again from nothing: 20 more than the limit admitted.
func TestABorrowerThatCrashesWhileLeavingLeavesItsReplicaAtTheLender(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	// A key of n0 that n2 owns once it joins, with n0 its successor then
	// (the owner without n2).
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2").Name == "n2"
	})
	load := newHandLoad(h, k, quota)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)

	// n2 joins; n1 hears of it, n0 not. A request through n2 pulls the
	// key from n0, which lends it.
	n2 := h.cores["n2"]
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	for range 15 {
		load.spend("n2")
		h.advance(10 * time.Millisecond)
		load.resume()
	}
	h.advance(50 * time.Millisecond)
	if got := h.count("n2", k); got != 20 {
		t.Fatalf("n2 counts %d of the key; want 20", got)
	}
	if st, owner, ok := h.cores["n0"].replicas.get(k); !ok || owner.Name != "n2" || windowCount([]limiter.State{st}) != 20 {
		t.Fatalf("n0's replica of the key: %v of %v (%v); want 20 of n2", st, owner, ok)
	}

	// n2 starts to leave and crashes: what it sends is lost. n0 hears of
	// it as leaving (its ring stays as it was), then as dead.
	h.down["n2"] = true
	n2.Leave(h.now)
	h.pump()
	h.othersSeeLeaveThenDeath("n2")
	load.staysWithinTheLimit(t, quota, "n0", "n1")
}

// A key's owner n1 admitted 20, replicated to its successor n2, then gave
// a unit back, and the replica that said so was lost: n2's replica holds
// 20, n1's counter 19. n1 leaves gracefully and hands its counter over to
// n2, the key's next owner. The others hear of it as leaving, then as
// gone, or (memberlist may report a node that left as one that failed) as
// dead. The replica, kept while n1 was leaving, is stale: the counter
// handed over is n1's last word on the key, and the replica adds nothing
// beside it, whether it is dropped or placed as a dead run's. Counted
// beside it, or standing as the larger, the unit given back is refused
// again: a request under the limit denied.
func TestALeaverThatCompletesItsLeaveHasNoStaleReplicaCounted(t *testing.T) {
	for _, name := range []string{"listed gone", "reported dead", "restarted at once"} {
		t.Run(name, func(t *testing.T) {
			const quota = 30
			h := newHandNet(t, "n0", "n1", "n2")
			k := h.keyOrdered("n1", "n2", "n0")
			load := newHandLoad(h, k, quota)
			for range 20 {
				load.spend("n1")
			}
			load.resume()
			h.advance(50 * time.Millisecond)
			h.drops = func(from string, o Outgoing) bool {
				tr, ok := o.Msg.(Transfer)
				return ok && from == "n1" && tr.Mode == ModeReplica
			}
			n1 := h.cores["n1"]
			n1.refund(h.now, load.unitOf(k))
			h.advance(50 * time.Millisecond)
			if got := h.count("n1", k); got != 19 {
				t.Fatalf("n1 counts %d after a unit given back; want 19", got)
			}
			if st, _, ok := h.cores["n2"].replicas.get(k); !ok || windowCount([]limiter.State{st}) != 20 {
				t.Fatalf("n2's replica of the key: %v %v; want 20", st, ok)
			}

			// The others hear of the leave before n1's counter comes: n2
			// keeps the replica while n1 is leaving; the counter handed
			// over replaces it.
			h.othersSeeLeaving("n1")
			h.pump()
			if _, _, ok := h.cores["n2"].replicas.get(k); !ok {
				t.Fatal("n2 dropped its replica of the key as it heard n1 is leaving")
			}
			n1.Leave(h.now)
			h.pump()
			h.advance(200 * time.Millisecond)
			if !n1.Drained() {
				t.Fatal("n1 did not hand its counter over")
			}
			h.down["n1"] = true
			if name == "restarted at once" {
				// A rolling restart: a new run of n1 joins in place of
				// the run that left, which is never listed gone or dead.
				// Its leave is known complete at n2, where it sealed.
				if left := h.member("n1").Peer(); !h.cores["n2"].leaveSealed(left) {
					t.Fatalf("n2 does not know %v's leave complete", left)
				}
				n1 := h.start("n1", true)
				for _, other := range []string{"n0", "n2"} {
					h.cores[other].SetMembership(h.now, Membership{Members: h.othersThan(other, "n1"), Joining: []Member{h.member("n1")}})
					h.pump()
				}
				n1.Joined(h.now)
				h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
				h.advance(100 * time.Millisecond)
				for _, other := range []string{"n0", "n2"} {
					h.setMembership(other, nil)
				}
			} else {
				var gone []Peer
				if name == "reported dead" {
					gone = []Peer{h.member("n1").Peer()}
				}
				h.list("n0", h.othersThan("n0", "n1"), gone)
				h.list("n2", h.othersThan("n2", "n1"), gone)
			}
			h.advance(h.cfg.HandoffWindow + time.Second)
			if got := h.clusterCount(k); got != 19 {
				t.Errorf("the cluster counts %d of the key (%v); n1 handed over 19", got, h.counts(k))
			}

			before := load.admitted
			for range quota {
				load.spend("n2")
				load.spend("n0")
			}
			h.advance(50 * time.Millisecond)
			load.resume()
			if got := load.admitted - before; got != quota-19 {
				t.Errorf("%d admitted after the leave (%v); %d remained", got, load.by, quota-19)
			}
		})
	}
}

// othersSeeLeaveThenDeath has every node but leaver hear of it as
// leaving, then, 100 ms later, as dead, and waits out the hand-off window.
func (h *handNet) othersSeeLeaveThenDeath(leaver string) {
	for _, name := range h.names {
		if name != leaver {
			h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, leaver), Leaving: []Member{h.member(leaver)}})
			h.pump()
		}
	}
	h.advance(100 * time.Millisecond)
	dead := []Peer{h.member(leaver).Peer()}
	for _, name := range h.names {
		if name != leaver {
			h.list(name, h.othersThan(name, leaver), dead)
		}
	}
	h.advance(h.cfg.HandoffWindow + time.Second)
}

// staysWithinTheLimit spends quota units of the load's key through each
// of the nodes given in turn, and fails t if more than quota were admitted
// beyond what fallback admitted.
func (l *handLoad) staysWithinTheLimit(t *testing.T, quota int, through ...string) {
	t.Helper()
	for range quota {
		for _, name := range through {
			l.spend(name)
		}
	}
	l.h.advance(50 * time.Millisecond)
	l.resume()
	if fb := l.by[SourceFallback]; l.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v); the nodes count %v", l.admitted, quota, fb, l.by, l.h.counts(l.k))
	}
}
