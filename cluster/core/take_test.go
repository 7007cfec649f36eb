package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A request for two zones through a node that grouped them by an earlier
// view: both keys had one owner then, two now (a node joined). Each owner
// sends the group on to the other; the group must be split by the view as
// it is now and each key decided by its own owner, not go round until the
// request's patience is spent and fallback decides it (a fallback during a
// graceful join, and counts kept apart from the owners').
func TestAGroupFormedByAnEarlierViewIsSplitByTheViewNow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	without := func(name string) Membership {
		var m Membership
		for _, x := range h.names {
			if x != name && x != "n0" {
				m.Members = append(m.Members, Member{Name: x, Inc: h.incs[x], PeerAddr: x})
			}
		}
		return m
	}
	before := NewRing(h.hash, append(without("n4").Members, Member{Name: "n0", Inc: h.incs["n0"], PeerAddr: "n0"}))
	now := h.cores["n1"].Ring()
	var moved, stayed limiter.Key
	for i := range 20000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), uint64(1+i%2))
		was, _ := before.Owner(k.Route())
		is, _ := now.Owner(k.Route())
		switch {
		case was.Name != "n1":
		case is.Name == "n4" && moved == 0:
			moved = k
		case is.Name == "n1" && stayed == 0:
			stayed = k
		}
	}
	if moved == 0 || stayed == 0 {
		t.Fatal("no pair of keys of n1 of which n4 takes one")
	}
	// n0 does not know n4 yet.
	h.cores["n0"].SetMembership(h.now, without("n4"))
	h.pump()
	h.advance(100 * time.Millisecond)

	tk := &handTake{node: "n0", res: make([]limiter.Result, 2)}
	hour := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour}
	tk.reqs = []limiter.Request{{Key: moved, Zone: 1, Limit: hour}, {Key: stayed, Zone: 2, Limit: hour}}
	if d, done := h.cores["n0"].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatalf("decided at once (%+v): want it asked of n1", d)
	}
	h.drive(tk)
	// n0 learns of n4 while the request waits.
	h.advance(20 * time.Millisecond)
	h.setMembership("n0", nil)
	h.finish(tk)
	if !tk.d.Allowed || tk.d.Source != SourcePeer {
		t.Fatalf("decided %+v: want allowed by the keys' owners", tk.d)
	}
	if got := h.count("n4", moved); got != 1 {
		t.Errorf("n4 counts the key it took over at %d; want 1", got)
	}
	if got := h.count("n1", stayed); got != 1 {
		t.Errorf("n1 counts the key it kept at %d; want 1", got)
	}
	for i, r := range tk.res {
		if !r.Allowed || r.Remaining != 9 {
			t.Errorf("zone %d: %+v; want allowed with 9 remaining", i+1, r)
		}
	}
}
