package cluster

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// announceHarness runs announceChanges over a state the test sets.
type announceHarness struct {
	mu        sync.Mutex
	member    bool
	leaving   bool
	told      atomic.Bool
	announced atomic.Int32
	changed   chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

func newAnnounceHarness(t *testing.T, grace time.Duration, member bool) *announceHarness {
	h := &announceHarness{member: member, changed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.told.Store(member)
	state := func() (bool, bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.member, !h.member && !h.leaving
	}
	announce := func() {
		h.mu.Lock()
		h.told.Store(h.member)
		h.mu.Unlock()
		h.announced.Add(1)
	}
	go func() {
		defer close(h.done)
		announceChanges(h.changed, h.stop, grace, state, h.told.Load, announce)
	}()
	t.Cleanup(func() { close(h.stop); <-h.done })
	return h
}

// set changes the state and signals it, as the core's Member hook does.
func (h *announceHarness) set(member, leaving bool) {
	h.mu.Lock()
	h.member, h.leaving = member, leaving
	h.mu.Unlock()
	signal(h.changed)
}

// A node declared dead that is back in its ring within the grace
// announces nothing: the others, which listed it again from its
// refutation, never see it leave and come back.
func TestAnEvictionUndoneWithinTheGraceIsNotAnnounced(t *testing.T) {
	h := newAnnounceHarness(t, 200*time.Millisecond, true)
	h.set(false, false)
	time.Sleep(20 * time.Millisecond)
	h.set(true, false)
	time.Sleep(300 * time.Millisecond)
	if n := h.announced.Load(); n != 0 {
		t.Errorf("%d announcements; want none", n)
	}
}

// An eviction that lasts is announced once the grace has passed; the
// return to the ring, like a join, is announced at once.
func TestAnEvictionThatLastsIsAnnouncedAndTheReturnAtOnce(t *testing.T) {
	const grace = 300 * time.Millisecond
	h := newAnnounceHarness(t, grace, true)
	start := time.Now()
	h.set(false, false)
	testutil.Eventually(t, 5*time.Second, "the eviction announced", func() bool { return h.announced.Load() == 1 })
	if d := time.Since(start); d < grace {
		t.Errorf("the eviction was announced after %v; want after the grace, %v", d, grace)
	}
	if h.told.Load() {
		t.Fatal("the others were told the node is in its ring")
	}
	start = time.Now()
	h.set(true, false)
	testutil.Eventually(t, 5*time.Second, "the return announced", func() bool { return h.announced.Load() == 2 })
	if d := time.Since(start); d >= grace {
		t.Errorf("the return was announced after %v; want at once", d)
	}
}

// Leaving is announced at once.
func TestLeavingIsAnnouncedAtOnce(t *testing.T) {
	h := newAnnounceHarness(t, time.Hour, true)
	h.set(false, true)
	testutil.Eventually(t, 5*time.Second, "the leave announced", func() bool { return h.announced.Load() == 1 })
}
