package core

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner keeps a snapshot with 3 of a key counted, counts 2 more, and
// crashes; its successor, with the key's replica (5), is cut off on the
// far side of a split. The others admit 4 more in fallback, and count
// them at the key's new owner. The owner's next run reads its snapshot
// back (the 3) and owns the key again: the 3 and the 4 are different
// admissions, so the key counts 7. Taken as copies of one count, the
// newer standing, the key counted 4, and 3 were lost. Once the split
// heals, the replica adds what it holds beyond the snapshot (the 2), and
// nothing twice.
func TestASnapshotReadBackAddsToWhatOthersAdmittedMeanwhile(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n0", "n1", 3)
	h.advance(20 * time.Millisecond) // replicated to n1
	snapshot := h.cores["n0"].Keep(h.now, h.cores["n0"].engine.StatesOf(h.now, []limiter.Key{k}))
	load.spend("n0")
	load.spend("n0")
	h.advance(20 * time.Millisecond) // replicated to n1

	// n0 crashes; n1 is cut off with its replica. The others admit 4 in
	// fallback and declare both dead.
	h.down["n0"] = true
	h.cut["n1"] = true
	for range 4 {
		load.spend("n2")
	}
	load.resume()
	if load.admitted != 9 {
		t.Fatalf("%d admitted; want 9 (5, then 4 in fallback)", load.admitted)
	}
	survivors := []string{"n2", "n3", "n4"}
	for _, name := range survivors {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(6*time.Second, survivors...)

	// n0's next run reads its snapshot back and joins the survivors.
	old0 := Peer{Name: "n0", Inc: h.incs["n0"]}
	old1 := Peer{Name: "n1", Inc: h.incs["n1"]}
	n0 := h.start("n0", true)
	n0.RestoreCounters(h.now, snapshot)
	n0.Joined(h.now)
	for _, name := range survivors {
		var m Membership
		for _, x := range survivors {
			if x != name {
				m.Members = append(m.Members, h.member(x))
			}
		}
		m.Joining = []Member{h.member("n0")}
		m.Dead = []Peer{old0, old1}
		h.cores[name].SetMembership(h.now, m)
		h.pump()
	}
	h.setMembership("n0", []string{"n1"})
	h.advance(100*time.Millisecond, "n0", "n2", "n3", "n4")
	for _, name := range survivors {
		h.setMembership(name, []string{"n1"})
	}
	h.advance(6*time.Second, "n0", "n2", "n3", "n4")
	if !n0.Member() || n0.HandoffUnderway() {
		t.Fatalf("the new run of n0: member %v, hand-off under way %v", n0.Member(), n0.HandoffUnderway())
	}
	total := func() int64 {
		var n int64
		for _, name := range h.names {
			n += h.count(name, k)
		}
		return n
	}
	if got := total(); got != 7 {
		t.Errorf("the cluster counts %d (n0 %d); 7 were admitted but for the 2 only n1's replica holds", got, h.count("n0", k))
	}

	// The split heals: n1's replica of the crashed run adds what it holds
	// beyond the snapshot.
	h.cut["n1"] = false
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(6 * time.Second)
	if got := total(); got != 9 {
		t.Errorf("once the split healed, the cluster counts %d (n0 %d, n1 %d); 9 were admitted", got, h.count("n0", k), h.count("n1", k))
	}
}

// A key's owner applies a transfer of what another node admitted in
// fallback, keeps a snapshot holding it, and crashes before its
// acknowledgement reaches the sender, and before it replicated the
// transfer: its successor's replica does not hold it, nor knows it was
// applied. The sender gives the transfer up and sends its counts, naming
// the one they replace, to the node that took the dead run's keys over;
// the owner's next run sends the snapshot there too, naming the run that
// kept it. Both hold the transfer's count: whichever arrives first, it is
// counted once (seed 2054 of the simulator: the resent count arrived
// first, and the snapshot added it again).
func TestASnapshotAndATransferItsRunAppliedAreCountedOnce(t *testing.T) {
	for _, snapshotFirst := range []bool{true, false} {
		name := "transfer first"
		if snapshotFirst {
			name = "snapshot first"
		}
		t.Run(name, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2")
			k, load := h.spentKey("n1", "n2", 5)
			h.advance(20 * time.Millisecond) // replicated to n2
			n0, n1 := h.cores["n0"], h.cores["n1"]

			// n0 sends 1 it admitted in fallback; n1 applies it, and the
			// acknowledgement is lost. n1 keeps a snapshot and crashes
			// before it replicates the transfer.
			one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
			one.Cur = 1
			n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
			for _, o := range n0.Outbox() {
				n1.Handle(h.now, n0.Self(), o.Msg)
				n0.Failed(h.now, o.ID)
			}
			load.admitted++
			snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
			if got := windowCount(snapshot.States); got != 6 {
				t.Fatalf("the snapshot holds %d; want 6", got)
			}
			h.down["n1"] = true
			if st, ok := h.cores["n2"].ReplicaOf(k); !ok || windowCount([]limiter.State{st}) != 5 {
				t.Fatalf("n2's replica of the key: %v %v; want 5", st, ok)
			}

			// The next run reads the snapshot back and joins: the others
			// hear of it as joining, then as a member.
			restart := func(dead []Peer) {
				n1 = h.start("n1", true)
				n1.RestoreCounters(h.now, snapshot)
				n1.Joined(h.now)
				for _, pair := range [][2]string{{"n0", "n2"}, {"n2", "n0"}} {
					h.cores[pair[0]].SetMembership(h.now, Membership{Members: []Member{h.member(pair[1])}, Joining: []Member{h.member("n1")}, Dead: dead})
					h.pump()
				}
				h.setMembership("n1", nil)
				h.advance(100 * time.Millisecond)
				h.setMembership("n0", nil)
				h.setMembership("n2", nil)
			}
			if snapshotFirst {
				// The next run starts at once, before the death was
				// noticed: its snapshot reaches n2, which keeps the dead
				// run's replicas, while n0 still holds on to its transfer
				// (the dead run's lease).
				restart(nil)
			} else {
				// n0 and n2 declare n1 dead; n2 takes its keys over from
				// the replica, and n0 gives its transfer up, sending the
				// count to n2. Then the next run starts.
				h.setMembership("n0", []string{"n1"})
				h.setMembership("n2", []string{"n1"})
				h.advance(2*time.Second, "n0", "n2")
				restart([]Peer{{Name: "n1", Inc: h.incs["n1"]}})
			}
			h.advance(3 * time.Second)
			if !n1.Member() || n1.HandoffUnderway() {
				t.Fatalf("the new run of n1: member %v, hand-off under way %v", n1.Member(), n1.HandoffUnderway())
			}
			var held int64
			by := map[string]int64{}
			for _, name := range h.names {
				by[name] = h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
				held += by[name]
			}
			if held != int64(load.admitted) {
				t.Errorf("the cluster holds %d of the key (%v); %d were admitted", held, by, load.admitted)
			}
		})
	}
}

// A snapshot lists the transfers of what others admitted that its run
// applied and may not have acknowledged, and holds their counts, also one
// applied after the driver read the counters.
func TestASnapshotHoldsTheCountsOfTheTransfersItLists(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, _ := h.spentKey("n1", "n2", 5)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	read := n1.engine.StatesOf(h.now, []limiter.Key{k}) // the driver reads the counters
	one := read[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var seq uint64
	for _, o := range n0.Outbox() {
		seq = o.Msg.(Transfer).Seq
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	kept := n1.Keep(h.now, read)
	if got := windowCount(kept.States); got != 6 {
		t.Errorf("the snapshot holds %d; want 6", got)
	}
	want := []KeptApplied{{From: n0.self, Seq: seq, Keys: []limiter.Key{k}}}
	if !reflect.DeepEqual(kept.Applied, want) {
		t.Errorf("the snapshot lists %+v; want %+v", kept.Applied, want)
	}
}
