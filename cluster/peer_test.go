package cluster

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

// silentPeer returns a peer of a fresh node connected to a server that
// reads frames and never answers.
func silentPeer(t *testing.T) *peerClient {
	t.Helper()
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := silentServer(t, n)
	p := newPeerClient(testDialer(n), "silent", addr, 1)
	t.Cleanup(p.close)
	eventually(t, 2*time.Second, "connected", p.connected.Load)
	return p
}

// Calls have no timer of their own: the peer's watcher fails them at their
// deadline, never before it, and a call with an early deadline queued
// behind one with a late deadline is failed at its own.
func TestCallsTimeOutAtTheirOwnDeadline(t *testing.T) {
	p := silentPeer(t)
	req := []limiter.Request{{Key: 1, Cost: 1, Limit: limitOf(10)}}

	late := time.Now().Add(time.Minute)
	lateDone := make(chan error, 1)
	go func() { lateDone <- p.do(takeCall(req), late) }()
	eventually(t, 2*time.Second, "the late call sent", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == 1
	})

	for _, wait := range []time.Duration{0, time.Millisecond, 30 * time.Millisecond} {
		deadline := time.Now().Add(wait)
		err := doOrGiveUp(t, p, takeCall(req), deadline)
		if !errors.Is(err, errTimeout) {
			t.Fatalf("a call to a silent peer with a deadline in %s: %v, want a time-out", wait, err)
		}
		if time.Now().Before(deadline) {
			t.Fatalf("a call with a deadline in %s timed out before it", wait)
		}
	}
	// A query (not batched) is watched the same way.
	c := newCall(msgPing, nil)
	if err := doOrGiveUp(t, p, c, time.Now().Add(5*time.Millisecond)); !errors.Is(err, errTimeout) {
		t.Fatalf("a ping to a silent peer: %v, want a time-out", err)
	}
	select {
	case err := <-lateDone:
		t.Fatalf("the call with a deadline a minute away returned early: %v", err)
	default:
	}
	p.close()
	if err := <-lateDone; !errors.Is(err, errClosed) {
		t.Fatalf("a waiting call when the peer closed: %v, want closed", err)
	}
	if err := p.do(takeCall(req), time.Now().Add(time.Minute)); err == nil {
		t.Fatal("a call to a closed peer succeeded")
	}
}

// doOrGiveUp is p.do, failing the test if the call has not returned long
// after its deadline.
func doOrGiveUp(t *testing.T, p *peerClient, c *call, deadline time.Time) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.do(c, deadline) }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Until(deadline) + 10*time.Second):
		t.Fatal("a call did not return at its deadline")
		return nil
	}
}

// Many callers at once against a silent peer: every call returns, by its
// deadline's watcher, and none is lost between the queue and the frame in
// flight (where the writer holds takes while one frame awaits its reply).
func TestEveryCallToASilentPeerReturns(t *testing.T) {
	p := silentPeer(t)
	done := make(chan error, 64*20)
	for g := range 64 {
		go func() {
			for i := range 20 {
				req := []limiter.Request{{Key: limiter.Key(g<<8 | i + 1), Cost: 1, Limit: limitOf(10)}}
				done <- p.do(takeCall(req), time.Now().Add(time.Duration(i%5)*time.Millisecond))
			}
		}()
	}
	for range 64 * 20 {
		select {
		case err := <-done:
			if !errors.Is(err, errTimeout) {
				t.Fatalf("a call to a silent peer: %v, want a time-out", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("calls to a silent peer never returned")
		}
	}
}

// A busy peer that answers everything: no call waits for its deadline (a
// lost wake-up of the writer or the watcher would leave a call queued
// until then, and the check would fall back). The deadline is far away,
// so only a call that was never sent or never completed reaches it.
func TestNoCallToAnAnsweringPeerWaitsForItsDeadline(t *testing.T) {
	cfg := testConfig()
	cfg.CallTimeout = 20 * time.Second
	cfg.Gossip = GossipTuning{} // the default: a busy machine does not split the two
	first := startNode(t, cfg)
	second := startNode(t, cfg, first.GossipAddr())
	waitConverged(t, []*Node{first, second}, 2)
	var keys []limiter.Key
	for i := 0; len(keys) < 500; i++ {
		if k := limiter.ZoneKey(uint64(i+1)*0x9E3779B97F4A7C15, 1); first.Owner(k).Name == second.Name() {
			keys = append(keys, k)
		}
	}
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	errs := make(chan string, 64)
	for g := range 64 {
		go func() {
			req := make([]limiter.Request, 1)
			res := make([]limiter.Result, 1)
			for i := range 200 {
				req[0] = limiter.Request{Key: keys[(g*200+i)%len(keys)], Zone: 1, Limit: lim}
				if _, src := first.Take(time.Now(), req, res); src == SourceFallback {
					errs <- "a check to an answering owner fell back"
					return
				}
			}
			errs <- ""
		}()
	}
	for range 64 {
		if e := <-errs; e != "" {
			t.Fatal(e)
		}
	}
}

// The same at the peer alone, with nothing else (no pings, no other
// messages) to wake its writer: a call the writer is not woken for waits
// until its deadline and fails.
func TestEveryCallWakesTheWriter(t *testing.T) {
	server := startNode(t, testConfig())
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	p := newPeerClient(testDialer(n), server.Name(), server.PeerAddr(), 1)
	defer p.close()
	eventually(t, 2*time.Second, "connected", p.connected.Load)
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	for _, callers := range []int{1, 64} {
		errs := make(chan error, callers)
		for g := range callers {
			go func() {
				for i := range 200 {
					req := []limiter.Request{{Key: limiter.Key(g<<16 | i + 1), Zone: 1, Limit: lim}}
					if err := p.do(takeCall(req), time.Now().Add(20*time.Second)); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range callers {
			if err := <-errs; err != nil {
				t.Fatalf("%d callers: a call to an answering peer: %v", callers, err)
			}
		}
	}
}

// The patience of a call, step by step at fixed instants (ms): sent at 0
// with a deadline at 100, silence 100, at most ten silences more.
func TestACallersOwnStallsAreNotThePeersSilence(t *testing.T) {
	const ms = int64(time.Millisecond)
	fresh := func() patience { return patience{sent: 0, timeout: 100 * ms, base: 0, last: 1100 * ms} }
	never := int64(-1 << 40) // the peer was never heard from

	// The caller ran throughout and the peer said nothing: it gives up at
	// the deadline.
	w := fresh()
	if _, ok := w.extend(100*ms, 0, never, 0, 100*ms); ok {
		t.Fatal("a caller that ran throughout waits on for a silent peer past the deadline")
	}
	// The caller was stopped 80 ms of the first 100: it has run only 20,
	// so the deadline moves by the 80.
	w = fresh()
	due, ok := w.extend(100*ms, 80*ms, never, 0, 100*ms)
	if !ok || due != 180*ms {
		t.Fatalf("a caller stalled 80 ms: waits on %v until %d ms, want until 180 ms", ok, due/ms)
	}
	// At 180 with no more stall: its reader gets one turn, then it gives up.
	due, ok = w.extend(180*ms, 80*ms, never, 0, 100*ms)
	if !ok || due != 180*ms+2*int64(stallTick) {
		t.Fatalf("a caller that stalled: the reader's turn %v until %d ms", ok, due/ms)
	}
	if _, ok = w.extend(due, 80*ms, never, 0, 100*ms); ok {
		t.Fatal("a caller that stalled waits on for a silent peer after its reader's turn")
	}
	// A stall longer than every bound still moves the deadline: a process
	// stopped for a minute decides nothing while it is stopped.
	w = fresh()
	if due, ok := w.extend(60_000*ms, 59_950*ms, never, 0, 100*ms); !ok || due != 60_050*ms {
		t.Fatalf("a caller stalled a minute: waits on %v until %d ms, want until 60050 ms", ok, due/ms)
	}
	// The peer answered others 30 ms ago: it is behind, not gone.
	w = fresh()
	if due, ok := w.extend(100*ms, 0, 70*ms, 0, 100*ms); !ok || due != 170*ms {
		t.Fatalf("a peer heard 30 ms ago: waits on %v until %d ms, want until 170 ms", ok, due/ms)
	}
	// Heard 150 ms ago, but the caller stalled 100 ms of those: silent 50.
	w = fresh()
	if due, ok := w.extend(400*ms, 250*ms, 250*ms, 150*ms, 100*ms); !ok || due != 400*ms+50*ms {
		t.Fatalf("a peer silent 50 ms while the caller ran: waits on %v until %d ms, want until 450 ms", ok, due/ms)
	}
	// A peer that answers others does not hold a call past last.
	w = fresh()
	if _, ok := w.extend(1100*ms, 0, 1090*ms, 0, 100*ms); ok {
		t.Fatal("a call waits on past its last deadline for a peer that answers others")
	}
}

// fakeStalls is a stall clock a test drives: while stalling, every instant
// counts as a stall of the process.
type fakeStalls struct {
	mu       sync.Mutex
	total    int64
	since    int64 // when the stall under way began; 0 for none
	stalling bool
}

func (f *fakeStalls) stalled(now int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stalling {
		return f.total + now - f.since
	}
	return f.total
}

func (f *fakeStalls) set(stalling bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := monoNanos(time.Now())
	if f.stalling && !stalling {
		f.total += now - f.since
	}
	if stalling && !f.stalling {
		f.since = now
	}
	f.stalling = stalling
}

// A caller that does not run gives up on no peer: a call to a silent
// peer stays pending past its deadline while the caller is stalled, and
// times out once the caller runs again for longer than the deadline.
func TestAStalledCallerWaitsOnItsCalls(t *testing.T) {
	p := silentPeer(t)
	clock := &fakeStalls{}
	p.d.stalls = clock
	clock.set(true)
	deadline := time.Now().Add(5 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- p.do(takeCall([]limiter.Request{{Key: 1, Cost: 1, Limit: limitOf(10)}}), deadline) }()
	// Well past the deadline, with the watcher woken again and again.
	for range 5 {
		signal(p.kick)
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a call whose caller was stalled since it was sent returned: %v", err)
	default:
	}
	clock.set(false)
	testutil.Eventually(t, 10*time.Second, "the call timed out once its caller ran", func() bool {
		select {
		case err := <-done:
			if !errors.Is(err, errTimeout) {
				t.Fatalf("a call to a silent peer: %v, want a time-out", err)
			}
			return true
		default:
			return false
		}
	})
}

// gatedNetwork dials peers on the host's network once it is open, and
// refuses every dial before; it counts the dials.
type gatedNetwork struct {
	mu    sync.Mutex
	open  bool
	dials int
}

func (g *gatedNetwork) dialPeer(from, to, addr string, timeout time.Duration) (net.Conn, error) {
	g.mu.Lock()
	g.dials++
	open := g.open
	g.mu.Unlock()
	if !open {
		return nil, errors.New("connection refused")
	}
	return net.DialTimeout("tcp", addr, timeout)
}

func (g *gatedNetwork) gossip(string, *memberlist.NetTransportConfig) (memberlist.Transport, error) {
	return nil, errors.New("gatedNetwork carries no gossip")
}

func (g *gatedNetwork) dialed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dials
}

// A peer that restarts comes back at its address as a new run, while
// this node's client of it waits between dials with a backoff that grew
// while it was away (up to a second: its keys decided by fallback
// meanwhile, and a graceful rolling restart refusing clients under their
// limits). Told of the new run, the client dials it at once, and stays
// the same client: calls queued for the node wait for it.
func TestAClientDialsANewRunOfItsPeerAtOnce(t *testing.T) {
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := silentServer(t, n)
	gate := &gatedNetwork{}
	d := testDialer(n)
	d.network, d.redialFirst = gate, time.Hour // once refused, it would wait an hour
	set := newPeerSet()
	open := func(m core.Member) *peerClient { return newPeerClient(d, m.Name, m.PeerAddr, m.Inc) }
	run := func(inc uint64) map[string]core.Member {
		return map[string]core.Member{"restarting": {Name: "restarting", Inc: inc, PeerAddr: addr}}
	}
	set.match(run(1), open)
	p := set.get("restarting")
	t.Cleanup(p.close)
	eventually(t, 10*time.Second, "a first dial, refused", func() bool { return gate.dialed() > 0 })

	gate.mu.Lock()
	gate.open = true
	gate.mu.Unlock()
	if gone := set.match(run(2), open); len(gone) != 0 || set.get("restarting") != p {
		t.Fatalf("a new run at the same address replaced the client (%d dropped)", len(gone))
	}
	eventually(t, 10*time.Second, "connected to the new run", p.connected.Load)
}
