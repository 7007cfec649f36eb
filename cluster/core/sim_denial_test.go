package core

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A caller that admitted a unit of a key by its fallback and crashed before
// it answered the request (its other key was still on its way) had sent its
// fallback count on to the key's owner: the unit, never admitted to a
// client, counts there, and the key is denied one unit early
// (cluster/doc.go, "What the cluster holds"). The checker's denial rule
// counts that unit as the owner's, as it counts an owner's grant to a
// caller that died mid-request (seed 1795824794757165042 of the
// simulator: n00 admitted a unit of key 1 by fallback, sent it to the
// owner n01 and crashed; n01 denied the key with 29 of 30 admitted, and
// each of those denials was reported false).
func TestSimADenialCountsTheFallbackUnitOfACallerThatDiedMidRequest(t *testing.T) {
	s := newSim(1, 2)
	k := limiter.ZoneKey(s.hasher.String("denied-key"), 1)
	s.keys = []simKey{{key: k, limit: 3}}
	lost := &simNode{name: "n00", index: 0, inc: 1}
	s.current["n00"] = &simNode{name: "n00", index: 0, inc: 4} // restarted
	owner := &simNode{name: "n01", index: 1, inc: 2}
	s.current["n01"] = owner
	at := func(ms int) time.Time { return simEpoch.Add(time.Duration(ms) * time.Millisecond) }
	req := func(n *simNode, by Source, when time.Time, allowed, done bool) *simReq {
		r := &simReq{node: n, zones: []int{0}, done: done, zoneAt: []time.Time{when}, zoneOK: []bool{allowed}, zoneBy: []Source{by}, zoneAlone: []bool{false}, zoneDenied: []bool{!allowed}}
		r.d.Allowed = allowed
		return r
	}
	s.hist.reqs = []*simReq{
		req(owner, SourceOwner, at(100), true, true),
		// Admitted by the caller's fallback; the caller crashed before it
		// answered, its fallback count already sent to the owner.
		req(lost, SourceFallback, at(200), true, false),
		req(owner, SourceOwner, at(300), true, true),
		req(owner, SourceOwner, at(400), false, true),
	}
	s.checkDenials()
	if len(s.violations) > 0 {
		t.Errorf("the owner's denial with its limit counted (one unit admitted by the fallback of a caller that died mid-request) is reported:\n%s", strings.Join(s.violations, "\n"))
	}

	// Without that unit, the same denial is false.
	s.violations = nil
	s.hist.reqs = append(s.hist.reqs[:1], s.hist.reqs[2:]...)
	s.checkDenials()
	if len(s.violations) != 1 || !strings.HasPrefix(s.violations[0], "false-denial:") {
		t.Errorf("a denial with 2 of 3 counted is reported as %q, want one false denial", s.violations)
	}
}
