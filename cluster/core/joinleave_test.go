package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Two nodes, n2 and n3, join at once, each hearing of the other as a
// member, while the key's owner n0, which has heard of neither (or of n3
// alone), leaves gracefully and hands its counter to n1 (or n3), the
// owner by its ring without itself. n2 owns the key by every ring the
// joiners reach; it pulls it from n3 (its stable ring without n2 names
// n3), which, joining, sends the pull on to where its own hand-off would
// take the key from (beforeJoin): n0, a leaver, whose counter is on its
// way to n1 or n3, or there, or on from there to n2. The pull must find
// the counter, or wait for it: the leave refuses no request under the
// limit, decides none by fallback beyond what the same joins decide so
// without it (the joiners' hand-off itself), and the key's owner ends
// holding exactly what was admitted. Played with n1 and the joiners
// hearing of the leave at several points.
func TestTwoJoinersPullingFromALeavingOwnerRefuseNoRequestUnderTheLimit(t *testing.T) {
	for _, c := range []joinLeaveCase{
		{n1Hears: false, handedBefore: true},
		{n1Hears: true, handedBefore: true},
		{n1Hears: false},
		{n1Hears: true, joinersHear: 30 * time.Millisecond},
		{n1Hears: false, joinersHear: 300 * time.Millisecond, handedBefore: true},
		{n1Hears: true, knowsN3: true},
		{n1Hears: false, handedBefore: true, knowsN3: true},
		{n1Hears: true, joinersHear: 300 * time.Millisecond, knowsN3: true},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			const requests = 5 + 15
			_, _, without := c.play(t, false)
			h, k, load := c.play(t, true)
			if load.admitted != requests {
				t.Errorf("%d of %d requests admitted under a limit of %d (%v): a client under the limit was refused", load.admitted, requests, joinLeaveQuota, load.by)
			}
			if fb, before := load.by[SourceFallback], without.by[SourceFallback]; fb > before {
				t.Errorf("%d requests decided by fallback (%v); %d without the leave", fb, load.by, before)
			}
			if got := h.clusterCount(k); got != int64(load.admitted) || h.count("n2", k) != got {
				t.Errorf("the cluster counts %d of the key (%v); %d were admitted", got, h.counts(k), load.admitted)
			}
		})
	}
}

const joinLeaveQuota = 30

type joinLeaveCase struct {
	n1Hears      bool          // n1 hears of the leave before the joiners join
	joinersHear  time.Duration // how long after the joins the joiners hear of it
	handedBefore bool          // n0 hands its counter over before the joiners join
	knowsN3      bool          // n0 has heard of n3 (not n2): its counter goes to n3
}

// play spends 5 of the key at n0, has n2 and n3 join, n0 leave (if
// leave), and 15 requests go through n1, n2 and n3 meanwhile and after.
func (c joinLeaveCase) play(t *testing.T, leave bool) (*handNet, limiter.Key, *handLoad) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2", "n3")
	h.start("n2", true)
	h.start("n3", true)
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2", "n3").Name == "n2" && r("n0", "n1", "n3").Name == "n3" && r("n1", "n3").Name == "n3"
	})
	load := newHandLoad(h, k, joinLeaveQuota)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	leaving := []Member{h.member("n0")}
	goes := func() {
		if !leave {
			return
		}
		n0.Leave(h.now)
		ms := []Member{h.member("n1")}
		if c.knowsN3 {
			ms = append(ms, h.member("n3"))
		}
		n0.SetMembership(h.now, Membership{Members: ms})
		h.pump()
	}
	if c.handedBefore {
		goes()
	}
	if leave && c.n1Hears {
		n1.SetMembership(h.now, Membership{Leaving: leaving})
		h.pump()
	}
	h.cores["n2"].Joined(h.now)
	h.cores["n3"].Joined(h.now)
	h.list("n2", h.othersThan("n2"), nil)
	h.list("n3", h.othersThan("n3"), nil)
	if leave && c.n1Hears {
		n1.SetMembership(h.now, Membership{Members: h.othersThan("n1", "n0"), Leaving: leaving})
		h.pump()
	} else {
		h.list("n1", h.othersThan("n1"), nil)
	}
	if !c.handedBefore {
		goes()
	}
	spend := func(n int) {
		for i := range n {
			load.spend([]string{"n1", "n2", "n3"}[i%3])
		}
		// Requests that wait are driven as time passes, every node
		// ticking (none stands still).
		for _, tk := range load.waiting {
			for !tk.done {
				h.advance(10 * time.Millisecond)
				h.drive(tk)
			}
			load.count(tk)
		}
		load.waiting = nil
		h.advance(50 * time.Millisecond)
	}
	spend(3)
	h.advance(c.joinersHear)
	spend(3)
	if leave {
		for _, name := range []string{"n1", "n2", "n3"} {
			h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n0"), Leaving: leaving})
			h.pump()
		}
	}
	spend(3)
	h.advance(200 * time.Millisecond)
	if leave {
		h.down["n0"] = true
		for _, name := range []string{"n1", "n2", "n3"} {
			h.list(name, h.othersThan(name, "n0"), nil)
		}
	}
	h.advance(100 * time.Millisecond)
	spend(6)
	return h, k, load
}
