package core

import (
	"fmt"
	"testing"
	"time"
)

// A frozen owner is declared dead, and answers again before its successor
// has taken its keys over; the others list it again (memberlist's refute:
// the same run, never told it was declared dead). What the others
// admitted in fallback meanwhile must reach it: the key's window then
// admits its limit in all, and the owner's count is what was admitted.
// Played for several lengths of the death and of the time the owner is
// heard before it is listed again.
func TestAnOwnerDeclaredDeadAndBackBeforeTheTakeoverHearsTheFallback(t *testing.T) {
	for _, dead := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, 550 * time.Millisecond, 700 * time.Millisecond} {
		for _, heardFirst := range []time.Duration{0, 20 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond} {
			t.Run(dead.String()+"/"+heardFirst.String(), func(t *testing.T) { refuteCase(t, dead, heardFirst) })
		}
	}
}

// refuteCase plays one: n2, owner of a key of limit 20 with n1 its
// successor, frozen; n0 and n1 decide it in fallback, declare n2 dead for
// dead, hear it again for heardFirst, and list it again.
func refuteCase(t *testing.T, dead, heardFirst time.Duration) {
	cfg := handTiming
	cfg.FallbackRatio = 0.4
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	const quota = 20
	k := h.keyOwnedBy("n2", "n1")
	load := newHandLoad(h, k, quota)
	h.down["n2"] = true
	h.advance(100*time.Millisecond, "n0", "n1")
	for range quota {
		load.spend("n0")
		load.spend("n1")
	}
	h.advance(50*time.Millisecond, "n0", "n1")
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	h.advance(dead, "n0", "n1")
	for range quota {
		load.spend("n0")
		load.spend("n1")
	}
	h.down["n2"] = false
	h.advance(heardFirst)
	h.setMembership("n0", nil)
	h.setMembership("n1", nil)
	h.advance(2 * time.Second)
	load.resume()
	for range quota {
		load.spend("n0")
		load.spend("n1")
		load.spend("n2")
	}
	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d (%v); counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	if load.admitted > quota {
		t.Errorf("%d admitted of a limit of %d (%v)", load.admitted, quota, load.by)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("the owner holds %d; %d were admitted", got, load.admitted)
	}
}

// The owner's successor declares it dead first and hears it answer again
// while its ring of two still gives it the owner's keys: by that ring the
// owner is owed nothing. The other survivor declares it dead too, a moment
// before or after; then both list it again, before any takeover completed.
// What the survivors admitted in fallback for its key (each one's own, and
// what the other sent the successor) reaches it only now, in transfers
// that it refuses until it holds a lease from their senders again: each
// survivor must call it for the key only once it has them, or the owner
// counts the key from less than was admitted. Played with the owner
// renewing its leases as soon as it answers, or only once it is listed
// again.
func TestAnOwnerListedAgainIsCalledOnlyOnceItHoldsTheFallbackCounts(t *testing.T) {
	for _, succ := range []string{"n0", "n1"} {
		for _, other := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond, 105 * time.Millisecond} {
			for _, leased := range []bool{true, false} {
				name := fmt.Sprintf("successor %s/other declares after %v/leases renewed %v", succ, other, leased)
				t.Run(name, func(t *testing.T) { relistCase(t, succ, other, leased) })
			}
		}
	}
}

// relistCase plays one: n2, owner of a key of limit 20, frozen; n0 and n1
// decide the key in fallback; succ, its successor, declares n2 dead; the
// other survivor does so other later; n2 answers 10ms after succ declared
// it dead, before its silence would let a takeover complete; both list it
// again 110ms after, when n2 holds no lease any more unless it renewed
// them.
func relistCase(t *testing.T, succ string, other time.Duration, leased bool) {
	cfg := handTiming
	cfg.FallbackRatio = 0.4
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	const quota = 20
	k := h.keyOwnedBy("n2", succ)
	second := map[string]string{"n0": "n1", "n1": "n0"}[succ]
	survivors := []string{"n0", "n1"}
	load := newHandLoad(h, k, quota)
	h.down["n2"] = true
	h.advance(100*time.Millisecond, survivors...)
	for range quota {
		load.spend("n0")
		load.spend("n1")
	}
	fallback := load.admitted
	// n2's leases, from its last pings as the cluster started, run out
	// 100ms after start, before it is listed again; the survivors may take
	// its keys over only once they have not heard from it for 675ms.
	h.advance(cfg.LeaseTime-200*time.Millisecond, survivors...)

	start := h.now
	h.setMembership(succ, []string{"n2"})
	declared := false
	for h.now.Sub(start) < 110*time.Millisecond {
		at := h.now.Sub(start)
		if at >= 10*time.Millisecond {
			h.down["n2"] = false
		}
		if !declared && at >= other {
			h.setMembership(second, []string{"n2"})
			declared = true
		}
		if h.down["n2"] || !leased {
			h.advance(5*time.Millisecond, survivors...)
		} else {
			h.advance(5 * time.Millisecond)
		}
	}
	if h.cores[succ].HandoffUnderway() == false {
		t.Fatalf("%s took n2's keys over before n2 was listed again", succ)
	}
	h.setMembership("n0", nil)
	h.setMembership("n1", nil)

	// Once both call n2 for the key, it holds what they admitted.
	calls := func() bool {
		for _, s := range survivors {
			if o, _ := h.cores[s].Owner(k); o.Name != "n2" || !h.cores[s].Reachable("n2") {
				return false
			}
		}
		return true
	}
	for i := 0; i < 200 && !calls(); i++ {
		h.advance(time.Millisecond)
	}
	if !calls() {
		t.Fatal("the survivors do not call n2 again")
	}
	if got := h.count("n2", k); got != int64(fallback) {
		t.Errorf("both survivors call n2 again while it holds %d of the key; %d were admitted in fallback", got, fallback)
	}
	for range quota {
		load.spend("n0")
		load.spend("n1")
		load.spend("n2")
	}
	load.resume()
	h.advance(time.Second)
	if load.admitted > quota {
		t.Errorf("%d admitted of a limit of %d (%v)", load.admitted, quota, load.by)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("the owner holds %d; %d were admitted", got, load.admitted)
	}
}
