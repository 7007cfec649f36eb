package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joins and owns a key whose counter its old owner holds. The
// owner's hand-off of it does not arrive (what the owner sends the joiner
// is lost), and the joiner pulls the key: the owner answers with the
// counter, and the answer is still on its way when the joiner asks the
// owner for its seal again. The hand-off completes when every source has
// sealed; were the owner's seal given while its answer was on its way, the
// joiner would settle the key from nothing, admit its whole limit, and the
// answer would add the counter on top of it. A source seals only once
// every transfer to the asker, those given in a pull's answer too, is
// acknowledged: the hand-off waits for the answer.
func TestAHandoffWaitsForAPullsAnswerOnItsWay(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	const quota = 5
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	if load.admitted != 3 || h.count("n0", k) != 3 {
		t.Fatalf("n0 admitted %d and counts %d; want 3 and 3", load.admitted, h.count("n0", k))
	}

	// n2 joins. What n0 sends n2 is lost: its hand-off of the key too.
	h.oneway = map[[2]string]bool{{"n0", "n2"}: true}
	n0, n2 := h.cores["n0"], h.cores["n2"]
	n2.Joined(h.now)
	all := func(name string) []Member {
		var ms []Member
		for _, x := range h.names {
			if x != name {
				ms = append(ms, h.member(x))
			}
		}
		return ms
	}
	for _, name := range h.names {
		h.list(name, all(name), nil)
	}
	h.advance(100 * time.Millisecond)
	if !n2.Member() || !n2.HandoffUnderway() {
		t.Fatalf("n2 member %v, hand-off under way %v; want both", n2.Member(), n2.HandoffUnderway())
	}
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d of the key before its pull", got)
	}

	// n2 pulls the key; n0 answers, and the answer is on its way.
	n2.requestKeys(h.now, n2.view.Load(), []limiter.Key{k})
	var (
		id    uint64
		reply Message
	)
	for _, o := range n2.Outbox() {
		if p, ok := o.Msg.(Pull); ok && o.To.Name == "n0" && id == 0 {
			id, reply = o.ID, n0.Handle(h.now, n2.Self(), p)
			continue
		}
		h.deliver("n2", o)
	}
	h.pump()
	if id == 0 {
		t.Fatal("n2 did not pull the key from n0")
	}
	if r, ok := reply.(PullReply); !ok || len(r.Given) == 0 {
		t.Fatalf("n0's answer to the pull: %+v; want the key's counter given", reply)
	}

	// The links are whole again; n2 asks for the seals meanwhile (within
	// the pull's call timeout): n0's answer is not acknowledged yet.
	h.oneway = nil
	h.advance(40 * time.Millisecond)
	if !n2.HandoffUnderway() {
		t.Errorf("n2's hand-off completed, counting the key at %d, while n0's answer carrying its counter was on its way", h.count("n2", k))
	}

	// The answer arrives; the hand-off completes; the key is spent.
	n2.Answered(h.now, id, reply)
	h.pump()
	h.advance(time.Second)
	if n2.HandoffUnderway() {
		t.Fatal("n2's hand-off did not complete")
	}
	for range quota {
		load.spend("n2")
		load.spend("n1")
	}
	h.advance(time.Second)
	load.resume()
	held := h.count("n0", k) + h.count("n1", k) + h.count("n2", k)
	t.Logf("admitted %d (%v); counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	if load.admitted > quota {
		t.Errorf("%d admitted of limit %d: the key settled before the pull's answer came, and the answer added on top", load.admitted, quota)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster holds %d of the key; %d were admitted", held, load.admitted)
	}
}
