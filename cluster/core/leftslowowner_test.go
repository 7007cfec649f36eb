package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A leaver's fallback counts go to their key's owner only once the owner
// answers a ping. A leaver whose own links are fine but whose link to that
// owner is so slow that its calls mostly outlast the patience (the
// owner's links alone are slow) hands them nowhere: when its leave times
// out, it takes them with it, as one cut off from every node takes all it
// holds (C in the bound). The checker's account of a leave that timed out
// must count them, per link, also when the slow link came back just before
// the timeout (seed 1795834744546493666 of the simulator: n02's links slow
// by 149 ms until 74 ms before n00's leave timed out; the one unit n00 had
// admitted in fallback for each of two keys n02 owns was reported lost).
func TestALeaverCutOffFromAKeysOwnerOnlyMayLoseItsFallbackCount(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n2", "n1")
	n0 := h.cores["n0"]
	req := limiter.Request{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour}, Cost: 1}
	if ok, _ := n0.fallback.engine.TakeFor(h.now, 0, []limiter.Request{req}, make([]limiter.Result, 1)); !ok {
		t.Fatal("n0's fallback denies the unit")
	}
	n0.fallback.wrote()

	s := newSim(1, 0)
	s.names = []string{"n0", "n1", "n2"}
	s.now = h.now
	s.keys = []simKey{{key: k, limit: 10}}
	s.hist.loss = map[limiter.Key]int64{}
	for i, name := range s.names {
		c := h.cores[name]
		s.current[name] = &simNode{name: name, index: i, core: c, engine: c.engine}
	}
	n := s.current["n0"]
	s.net.nodeDelay["n2"] = 149 * time.Millisecond
	s.now = s.now.Add(2 * time.Second)
	s.noteCutOff()
	delete(s.net.nodeDelay, "n2")
	s.now = s.now.Add(74 * time.Millisecond)
	if s.cutOffLately(n) {
		t.Fatal("n0, which talks to n1 at the network's speed, is cut off from every node")
	}
	s.noteLeftUndrained(n)
	if got := s.hist.loss[k]; got != 1 {
		t.Errorf("a leaver cut off from a key's owner until 74 ms ago, holding 1 of the key in fallback, may lose %d of it; want 1", got)
	}

	s.hist.loss[k] = 0
	s.now = s.now.Add(time.Second)
	s.noteLeftUndrained(n)
	if got := s.hist.loss[k]; got != 0 {
		t.Errorf("a leaver that could reach the key's owner for a second may lose %d of its fallback count; want 0", got)
	}
}
