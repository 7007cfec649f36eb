package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// keyOrdered returns a key whose ring of every node places it at first,
// then second, then third.
func (h *handNet) keyOrdered(first, second, third string) limiter.Key {
	var all []Member
	for _, name := range h.names {
		all = append(all, h.member(name))
	}
	ring := NewRing(h.hash, all)
	for i := range 10000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := ring.Owner(k.Route())
		s, _ := ring.OwnerWithout(k.Route(), first)
		var rest []Member
		for _, m := range all {
			if m.Name != first && m.Name != second {
				rest = append(rest, m)
			}
		}
		t, _ := NewRing(h.hash, rest).Owner(k.Route())
		if o.Name == first && s.Name == second && t.Name == third {
			return k
		}
	}
	h.t.Fatalf("no key placed at %s, %s, %s", first, second, third)
	return 0
}

// A split takes a key's owner (n2) away; the majority's new owner (n0)
// counts the key, replicated to its successor (n1). The split heals and
// n0 crashes at once: n2's next run, which has heard of the crash, counts
// the key again and replicates it to n1, its successor now, while n1 has
// not heard of the crash yet. n1 kept one replica a key, and took n0's
// for stale, its run alive (its counter handed over, it assumed): n2's
// replaced it, and n0's counts were nowhere (seed 1795811258943076314 of
// the simulator: 30 of 60 lost). A replica of a run that did not leave
// gracefully, displaced by another run's, goes to that run, naming its
// run: weighed there, it adds what is not held of that run already.
func TestAReplicaOfALiveRunDisplacedByAnotherRunsIsSentOn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n2", "n0", "n1")
	load := newHandLoad(h, k, 30)

	// n2 is cut off and declared dead: the key is n0's, replicated to n1.
	h.cut["n2"] = true
	for _, name := range []string{"n0", "n1", "n3"} {
		h.setMembership(name, []string{"n2"})
	}
	h.setMembership("n2", []string{"n0", "n1", "n3"})
	h.advance(6 * time.Second)
	for range 5 {
		load.spend("n0")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	if _, owner, ok := h.cores["n1"].replicas.get(k); !ok || owner.Name != "n0" {
		t.Fatalf("n1 keeps no replica of n0's counter of the key")
	}

	// n0 crashes as the split heals; n2's next run joins n1 and n3 and
	// counts the key, while n1 still lists n0.
	dead := Peer{Name: "n0", Inc: h.incs["n0"]}
	h.down["n0"] = true
	h.cut["n2"] = false
	h.start("n2", true)
	h.list("n2", []Member{h.member("n1"), h.member("n3")}, []Peer{dead})
	h.cores["n2"].Joined(h.now)
	h.list("n3", []Member{h.member("n1"), h.member("n2")}, []Peer{dead})
	h.list("n1", []Member{h.member("n0"), h.member("n2"), h.member("n3")}, nil)
	h.advance(6 * time.Second)
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(50 * time.Millisecond)

	// n1 hears of the crash.
	h.list("n1", []Member{h.member("n2"), h.member("n3")}, []Peer{dead})
	h.advance(2 * time.Second)
	load.resume()

	if o, _ := h.cores["n2"].Owner(k); o.Name != "n2" {
		t.Fatalf("the key's owner is %s; want n2", o.Name)
	}
	t.Logf("admitted %d %v", load.admitted, load.by)
	h.holdsAdmitted(k, load.admitted, "n0")
}
