package core

import (
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
