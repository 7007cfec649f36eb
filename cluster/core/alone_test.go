package core

import (
	"testing"
	"time"
)

// A member restarts on the far side of a partition, under a new run with
// seeds, while the others count its keys: no seed answers, and it counts
// alone. Its ring of itself alone holds a majority of what it knows (it
// knows no member), so it counts every key as its owner, from what it
// admitted in fallback meanwhile: a side of a split, it admits at most the
// limit (the S of cluster/doc.go's bound), and the owner on the others'
// side its limit too. Once the partition heals and it hears of the
// members, its counts reach the key's owner: the cluster holds everything
// admitted, and denies the key from then on.
func TestANodeThatCountsAloneIsOneSideOfASplit(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, quota)

	h.down["n3"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n1", []string{"n3"})
	h.setMembership("n2", []string{"n3"})
	h.advance(time.Second)
	for range quota {
		if tk := load.spend("n1"); !tk.done || tk.d.Source != SourceOwner {
			t.Fatalf("a request through the owner n1: done %v, decided by %v; want the owner", tk.done, tk.d.Source)
		}
	}
	if load.admitted != quota {
		t.Fatalf("the owner admitted %d of %d", load.admitted, quota)
	}

	// n3 comes back cut off: it decides by fallback until it counts
	// alone, then as the owner of every key.
	h.cut["n3"] = true
	n3 := h.start("n3", true)
	h.pump()
	for range 3 {
		tk := h.take("n3", k, quota) // it waits a bounded while for the join
		h.finish(tk)
		load.count(tk)
		if tk.d.Source != SourceFallback || !tk.d.Allowed {
			t.Fatalf("a request through n3 before it joined: decided by %v, allowed %v; want an admission by fallback", tk.d.Source, tk.d.Allowed)
		}
	}
	n3.Joined(h.now) // no seed answered in time
	h.advance(handTiming.ProbeInterval+10*time.Millisecond, "n3")
	if !n3.Member() {
		t.Fatal("n3 did not enter its ring alone")
	}
	alone := 0
	for range quota {
		if tk := load.spend("n3"); tk.done && tk.d.Allowed {
			if tk.d.Source != SourceOwner {
				t.Fatalf("n3, counting alone, admitted by %v; want as the owner", tk.d.Source)
			}
			alone++
		}
	}
	if alone != quota-3 {
		t.Errorf("n3, counting alone from its fallback count of 3, admitted %d as owner; want %d: one limit on its side", alone, quota-3)
	}

	// The partition heals; each side hears of the other.
	h.cut["n3"] = false
	h.setMembership("n3", nil)
	h.setMembership("n1", nil)
	h.setMembership("n2", nil)
	h.advance(time.Second)
	load.resume()
	if want := 2 * quota; load.admitted != want {
		t.Fatalf("%d admitted; want %d: the limit on each side of the split", load.admitted, want)
	}
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if got := h.count("n1", k); got != held || held != int64(load.admitted) {
		t.Errorf("the owner n1 holds %d, the cluster %d; %d were admitted", got, held, load.admitted)
	}
	for _, via := range h.names {
		load.spend(via)
	}
	h.advance(time.Second)
	load.resume()
	if load.admitted != 2*quota {
		t.Errorf("%d admitted after the split healed; want no more than %d", load.admitted, 2*quota)
	}
}
