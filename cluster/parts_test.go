package cluster

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A standalone node is a ring of one: it owns and counts every key, an
// empty batch asks nobody, and it still counts after Leave (there is
// nothing to leave).
func TestStandaloneIsARingOfOne(t *testing.T) {
	n := Standalone(limiter.New(limiter.Config{}))
	t0 := time.Unix(1_700_000_000, 0)
	if ok, src := n.Take(t0, nil, nil); !ok || src != SourceOwner {
		t.Fatalf("empty batch: %v %v; want granted by the owner", ok, src)
	}
	req := []limiter.Request{{Key: 7, Limit: limitOf(2)}}
	res := make([]limiter.Result, 1)
	for i, want := range []bool{true, true, false} {
		if ok, src := n.Take(t0, req, res); ok != want || src != SourceOwner {
			t.Fatalf("take %d: %v %v; want %v by the owner", i, ok, src, want)
		}
	}
	if err := n.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if n.Peek(t0, req, res); res[0].Allowed {
		t.Fatalf("after Leave: %+v; want the count kept (denied)", res[0])
	}
	if st := n.Status(); !st.Standalone || len(st.Members) != 1 || st.Members[0].Share != 1 {
		t.Fatalf("status %+v; want standalone, itself alone", st)
	}
}

func TestPeerSetMatch(t *testing.T) {
	made := 0
	newPeer := func(m Member) *peer { made++; return &peer{member: m} }
	s := newPeerSet()
	s.match([]Member{{Name: "a", PeerAddr: "1"}, {Name: "b", PeerAddr: "2"}, {Name: "c", PeerAddr: "3"}}, func(string) bool { return false }, newPeer)
	old := s.get("a")
	for _, tc := range []struct {
		name    string
		members []Member
		keep    string
		want    []string // names in the set after
		gone    []string // names returned to close
		made    int
	}{
		{"unchanged", []Member{{Name: "a", PeerAddr: "1"}, {Name: "b", PeerAddr: "2"}, {Name: "c", PeerAddr: "3"}}, "", []string{"a", "b", "c"}, nil, 0},
		{"address changed", []Member{{Name: "a", PeerAddr: "9"}, {Name: "b", PeerAddr: "2"}, {Name: "c", PeerAddr: "3"}}, "", []string{"a", "b", "c"}, []string{"a"}, 1},
		{"leaving is kept", []Member{{Name: "a", PeerAddr: "9"}, {Name: "b", PeerAddr: "2"}}, "c", []string{"a", "b", "c"}, nil, 0},
		{"gone is dropped", []Member{{Name: "a", PeerAddr: "9"}}, "", []string{"a"}, []string{"b", "c"}, 0},
	} {
		made = 0
		gone := s.match(tc.members, func(name string) bool { return name == tc.keep }, newPeer)
		var have, closed []string
		for _, p := range s.all() {
			have = append(have, p.member.Name)
		}
		for _, p := range gone {
			closed = append(closed, p.member.Name)
		}
		slices.Sort(have)
		slices.Sort(closed)
		if !slices.Equal(have, tc.want) || !slices.Equal(closed, tc.gone) || made != tc.made {
			t.Errorf("%s: set %v, closed %v, made %d; want %v, %v, %d", tc.name, have, closed, made, tc.want, tc.gone, tc.made)
		}
	}
	if s.get("a") == old {
		t.Error("a peer whose address changed was kept")
	}
	if all := s.takeAll(); len(all) != 1 || len(s.all()) != 0 {
		t.Errorf("takeAll: %d taken, %d left; want 1 and 0", len(all), len(s.all()))
	}
}

// Counters in transit are taken once, however many ask at once.
func TestTransitDeliversOnce(t *testing.T) {
	tr := newTransit()
	var states []limiter.State
	var keys []limiter.Key
	for k := range limiter.Key(1000) {
		states = append(states, limiter.State{Key: k + 1})
		keys = append(keys, k+1)
	}
	tr.put(states)
	got := make([]int, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = len(tr.take(keys)) })
	}
	wg.Wait()
	if total := got[0] + got[1] + got[2] + got[3]; total != len(states) {
		t.Fatalf("taken %v = %d; want every counter once (%d)", got, total, len(states))
	}
}

// A denial is answered until it may pass, and no longer once the shared
// values it was decided under change; closing the cache while it is in
// use is safe.
func TestBlockedCacheGenerationsAndClose(t *testing.T) {
	var b blockedCache
	t0 := time.Unix(1_700_000_000, 0)
	req := []limiter.Request{{Key: 5, Limit: limitOf(1)}}
	denied := []limiter.Result{{RetryAfter: time.Minute, Reset: time.Minute}}
	res := make([]limiter.Result, 1)
	b.remember(t0, req, denied) // not started: remembers nothing
	if b.answer(t0, req, res) {
		t.Fatal("a cache never started answered")
	}
	if err := b.start(64); err != nil {
		t.Fatal(err)
	}
	b.remember(t0, req, denied)
	b.wait()
	if !b.answer(t0.Add(time.Second), req, res) || res[0].RetryAfter != 59*time.Second {
		t.Fatalf("answer %+v; want denied for 59s more", res[0])
	}
	if b.answer(t0.Add(2*time.Minute), req, res) {
		t.Fatal("answered a denial past its time")
	}
	b.forgetAll()
	if b.answer(t0.Add(time.Second), req, res) {
		t.Fatal("answered a denial of an older generation")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				b.remember(t0, req, denied)
				b.answer(t0, req, res)
			}
		})
	}
	b.close()
	wg.Wait()
	if b.answer(t0, req, res) {
		t.Fatal("a closed cache answered")
	}
}

// Fallback decides by its mode: local counts at the scaled limit, open
// admits, closed denies, and a zone the owner said was empty denies.
func TestFallbackCounterModes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	reqs := []limiter.Request{{Key: 1, Limit: limitOf(2)}, {Key: 2, Limit: limitOf(2)}}
	for _, tc := range []struct {
		name  string
		mode  FallbackMode
		empty int
		want  []bool
	}{
		{"local", FallbackLocal, -1, []bool{true, true, false}},
		{"open", FallbackOpen, -1, []bool{true, true, true}},
		{"closed", FallbackClosed, -1, []bool{false, false, false}},
		{"empty zone", FallbackLocal, 1, []bool{false, false, false}},
	} {
		f := newFallbackCounter(0, tc.mode, 0.5)
		res := make([]limiter.Result, 2)
		for i, want := range tc.want {
			if ok, _ := f.decide(t0, actTake, 0, reqs, tc.empty, res); ok != want {
				t.Errorf("%s, take %d: %v; want %v", tc.name, i, ok, want)
			}
		}
		if tc.mode == FallbackLocal && tc.empty < 0 {
			f.refund(t0, reqs[:1])
			if ok, _ := f.decide(t0, actTake, 0, reqs[:1], -1, res); !ok {
				t.Errorf("%s: refunded unit not available again", tc.name)
			}
		}
	}
}
