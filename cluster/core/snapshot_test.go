package core

import (
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
