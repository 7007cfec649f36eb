package cluster

import (
	"sync"

	"github.com/tollgate/tollgate/limiter"
)

// transit holds counters extracted for a hand-off and not yet delivered.
// A new owner that pulls a key meanwhile gets it from here, and the push
// then skips it, so a counter is delivered once. A transit is safe for
// concurrent use.
type transit struct {
	mu     sync.Mutex
	states map[limiter.Key]limiter.State
}

func newTransit() *transit {
	return &transit{states: make(map[limiter.Key]limiter.State)}
}

// put holds states until they are taken.
func (t *transit) put(states []limiter.State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range states {
		t.states[s.Key] = s
	}
}

// take removes and returns the counters of those of keys it holds.
func (t *transit) take(keys []limiter.Key) []limiter.State {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []limiter.State
	for _, k := range keys {
		if s, ok := t.states[k]; ok {
			out = append(out, s)
			delete(t.states, k)
		}
	}
	return out
}
