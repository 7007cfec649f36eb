package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner is cut off (with another node, n3) and counts 3 beyond the
// replica its successor keeps (5). A node joins the successor, taking the
// cut-off owner for dead: it owns the key in its ring and, asked for it,
// pulls it from the successor, which has no majority to send the replica
// on and answers with it (a pull reply naming the run, in a hand-off that
// names no dead run). The key starts from the replica while the
// owner runs on, cut off: a takeover of a cut-off owner is a crash in the
// bound (cluster/doc.go: C, what the owner's count holds beyond the
// replica the key starts from), so the simulator's account of what it
// may lose counts the 3 wherever a replica of a run that still runs
// becomes a key's counter, not only in a hand-off naming the run dead
// (seed 1795826658905453632: 22 admitted, 20 allowed without the 5 the
// replica lacked).
func TestAKeyStartedFromAPulledReplicaOfACutOffOwnerMayLoseWhatTheReplicaLacks(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n3")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	var k limiter.Key
	pair := NewRing(h.hash, []Member{h.member("n1"), h.member("n2"), h.member("n3")})
	for not := []limiter.Key(nil); ; not = append(not, k) {
		k = h.keyOwnedBy("n0", "n1", not...)
		if o, _ := pair.Owner(k.Route()); o.Name == "n2" {
			break
		}
	}
	load := newHandLoad(h, k, 20)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	// n3 is cut off with n0: n1, which takes n0 for dead, has no
	// majority of its ring, and keeps n0's replica rather than send it on.
	h.cut["n0"], h.cut["n3"] = true, true
	for range 3 {
		load.spend("n0")
	}
	if got := h.count("n0", k); got != 8 {
		t.Fatalf("n0 counts %d; want 8", got)
	}
	if st, ok := h.cores["n1"].ReplicaOf(k); !ok || windowCount([]limiter.State{st}) != 5 {
		t.Fatalf("n1 keeps no replica of 5 of the key: %v %v", st, ok)
	}

	s := &sim{now: h.now, names: h.names, keys: []simKey{{key: k, limit: 20}}, current: map[string]*simNode{}}
	s.hist.loss = map[limiter.Key]int64{}
	for _, name := range h.names {
		c := h.cores[name]
		s.current[name] = &simNode{name: name, inc: h.incs[name], core: c, engine: c.engine}
	}
	for _, name := range []string{"n1", "n2"} {
		n := s.current[name]
		hook := s.takeoverHook(n)
		n.core.completing = func(plan *handoffPlan) { s.now = h.now; hook(plan) }
		promote := s.promotionHook(n)
		n.core.promoting = func(owner Peer, states []limiter.State) { s.now = h.now; promote(owner, states) }
	}
	h.advance(time.Second, "n1", "n2", "n3") // n1 hears nothing from n3
	dead := []Peer{h.member("n0").Peer()}
	h.list("n2", []Member{h.member("n1"), h.member("n3")}, dead)
	h.list("n1", []Member{h.member("n2"), h.member("n3")}, dead)
	h.cores["n2"].Joined(h.now)
	load.spend("n2") // n2 pulls the key from n1
	h.advance(time.Second, "n1", "n2", "n3")
	load.resume()
	if got := h.count("n2", k); got < 5 {
		t.Fatalf("n2 counts %d of the key; want the replica's 5 at least", got)
	}
	if got := s.hist.loss[k]; got != 3 {
		t.Errorf("starting the key from a replica of a cut-off owner that counted 3 beyond it may lose %d; want 3", got)
	}
}
