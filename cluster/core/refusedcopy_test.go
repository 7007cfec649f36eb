package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A node's fallback counts reach the keys' owner, which holds no lease
// from the node yet (cut off, it ran out): the owner refuses them, and
// the sender's view changes before it sends them again (a node joins and
// takes one of the keys), so it places them anew, under a new number:
// one key to the owner again, the other to the joiner. A second copy of
// the refused transfer (the network delivered it twice) reaches the owner
// once it holds the lease: applied then, its counts are counted beside
// the ones placed anew (seed 1795875077797396671 of the simulator: 4
// held of a key 3 were admitted, and 28 of another 23 were). Every copy
// of a transfer gets the answer its first one got: refused, never
// applied.
func TestEveryCopyOfATransferRefusedIsRefused(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	h.names = append(h.names, "n3")
	h.start("n3", true)
	const quota = 10
	three := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2")})
	four := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2"), h.member("n3")})
	var stays, moves limiter.Key
	for i := range 10000 {
		x := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		before, _ := three.Owner(x.Route())
		after, _ := four.Owner(x.Route())
		switch {
		case before.Name != "n0":
		case after.Name == "n0" && stays == 0:
			stays = x
		case after.Name == "n3" && moves == 0:
			moves = x
		}
	}
	if stays == 0 || moves == 0 {
		t.Fatal("no pair of keys of n0, one of which moves to n3")
	}

	// n0 is cut off: n1 admits a request for each key by fallback, and
	// n0's lease from n1 runs out.
	h.cut["n0"] = true
	for _, k := range []limiter.Key{stays, moves} {
		if tk := h.take("n1", k, quota); !tk.done || !tk.d.Allowed || tk.d.Source != SourceFallback {
			t.Fatalf("n1's request with n0 cut off: %+v; want admitted by fallback", tk.d)
		}
	}
	h.advance(time.Second)

	// n0 answers again, but its pings of n1 are lost: n1's fallback counts
	// reach it while it holds no lease from n1, and it refuses them.
	n0, n1 := h.cores["n0"], h.cores["n1"]
	var first *Transfer
	h.drops = func(from string, o Outgoing) bool {
		if tr, ok := o.Msg.(Transfer); ok && from == "n1" && o.To.Name == "n0" && tr.Mode == ModeAdd && first == nil {
			first = &tr
		}
		return false
	}
	h.oneway = map[[2]string]bool{{"n0", "n1"}: true}
	h.cut["n0"] = false
	for i := 0; first == nil && i < 50; i++ {
		h.advance(10 * time.Millisecond)
	}
	h.drops = nil
	if first == nil || len(first.States) != 2 {
		t.Fatalf("n1 sent n0 %+v; want one transfer of both keys' fallback counts", first)
	}
	if got := h.count("n0", stays) + h.count("n0", moves); got != 0 {
		t.Fatalf("n0 counts %d of the keys while it holds no lease from n1; want the counts refused", got)
	}

	// n0 pings n1 again, and holds a lease from it before n1 sends the
	// counts again. The network delivers the refused transfer a second
	// time.
	delete(h.oneway, [2]string{"n0", "n1"})
	h.advance(200*time.Millisecond, "n0")
	if p := n0.peers.get("n1"); !p.leased(n0.mono(h.now)) {
		t.Fatal("n0 holds no lease from n1 once its pings reach n1")
	}
	ack, ok := n0.Handle(h.now, n1.Self(), *first).(Ack)
	if !ok || !ack.Refused {
		t.Errorf("n0 answered a copy of the transfer it refused with %+v; want it refused again", ack)
	}
	h.pump()

	// n3 joins in n1's view: n1 places the refused counts anew.
	h.list("n1", []Member{h.member("n0"), h.member("n2"), h.member("n3")}, nil)
	h.advance(time.Second)
	if got := h.count("n0", stays); got != 1 {
		t.Errorf("n0 counts %d of the key that stays its own; 1 was admitted", got)
	}
	if got := h.count("n0", moves); got != 0 {
		t.Errorf("n0 counts %d of the key n3 took; n1 placed its count anew", got)
	}
}
