package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A caller's take item is admitted by the key's owner just before the
// key's window ends; the answer is lost (the owner is cut off), the
// caller gives the item up, decides the request by fallback and sends the
// owner a cancel, lost too. The window rolls over; the cut heals and the
// cancel, sent again, reaches the owner in the next window. The item was
// counted in the first window, so its unit comes out of that window: the
// next one is lent nothing, and admits no more than its limit.
func TestACancelSentAgainAcrossAWindowsEndComesOutOfItsOwnWindow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n1", "n2")
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	c0 := h.cores["n0"]

	// Just before a window's end, n1 admits n0's item; the answer is lost.
	h.advance(h.now.Truncate(win).Add(2*win).Sub(h.now) - 300*time.Millisecond)
	first := h.now.Truncate(win)
	tk := &handTake{node: "n0", res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
	if _, done := c0.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatal("n0 decided n1's key itself")
	}
	a := c0.Step(h.now, &tk.op)
	item, ok := a.Msg.(TakeItem)
	if a.Kind != ActCall || a.To.Name != "n1" || !ok {
		t.Fatalf("n0's first step: %+v; want a take item for n1", a)
	}
	if reply, _ := h.cores["n1"].Serve(h.now, c0.Self(), &item, make([]limiter.Result, 1), h.now); !reply.Allowed {
		t.Fatalf("n1 did not admit the item: %+v", reply)
	}
	// n1 is cut off: n0's cancel is lost, and n0 admits by fallback.
	h.cut["n1"] = true
	c0.CallFailed(h.now, &tk.op, false)
	h.pump()
	h.drive(tk)
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourceFallback {
		t.Fatalf("the request given up on: %+v; want admitted by fallback", tk.d)
	}
	if h.now.Truncate(win) != first {
		t.Fatal("the test left the first window")
	}

	// The window rolls over; the cut heals, and the cancel is sent again.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now)+100*time.Millisecond, "n0", "n2")
	second := h.now.Truncate(win)
	takeAt := func(node string) bool {
		tk := &handTake{node: node, res: make([]limiter.Result, 1)}
		tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
		if !done {
			h.drive(tk)
			h.finish(tk)
			d = tk.d
		}
		return d.Allowed
	}
	admitted := 0
	for range 5 {
		if takeAt("n1") {
			admitted++
		}
	}
	h.cut["n1"] = false
	h.advance(3 * time.Second)
	if h.now.Truncate(win) != second {
		t.Fatal("the test left the second window")
	}
	in := func(w time.Time) int64 {
		var n int64
		for _, name := range []string{"n1", "n2"} {
			for _, st := range h.cores[name].engine.StatesOf(h.now, []limiter.Key{k}) {
				if st.Kind < limiter.KindGrant && st.Stamp == w.UnixNano() {
					n += int64(st.Cur)
				} else if st.Kind < limiter.KindGrant && st.Stamp == w.Add(win).UnixNano() {
					n += int64(st.Prev)
				}
			}
		}
		return n
	}
	if got := in(first); got != 1 {
		t.Errorf("the cluster counts %d in the first window; it admitted 1 there (the item was cancelled, the fallback admission stands)", got)
	}
	if got := in(second); got != int64(admitted) {
		t.Errorf("the cluster counts %d in the second window; it admitted %d there: the cancel of the first window's item came out of the second", got, admitted)
	}
	// What the second window admits: at most quota in all.
	for range quota {
		if takeAt("n1") {
			admitted++
		}
	}
	if h.now.Truncate(win) != second {
		t.Fatal("the test left the second window")
	}
	if admitted > quota {
		t.Errorf("the second window admitted %d of %d", admitted, quota)
	}
}
