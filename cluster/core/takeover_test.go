package core

import (
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A few cores wired by hand: every message delivered at once, in order,
// with time passed in by the test. Nodes marked down lose every message to
// and from them, and stand still. Nodes marked cut run on, on the far side
// of a split: every message between them and the nodes not cut is lost.
type handNet struct {
	t     testing.TB
	now   time.Time
	names []string
	cores map[string]*Core
	incs  map[string]uint64
	down  map[string]bool
	cut   map[string]bool
	// unacked: the transfers a node sends another (from, to) are applied
	// there, but their acknowledgements are lost.
	unacked map[[2]string]bool
	// oneway: what a node sends another (from, to) is lost, but not what
	// the other sends it, nor the answers to that.
	oneway map[[2]string]bool
	// drops, if set, reports whether a message from is sending is lost
	// beyond those the fields above lose.
	drops func(from string, o Outgoing) bool
	// unanswered, if set, reports whether the answer to a message from is
	// sending is lost: its receiver handles it, but from never learns how.
	unanswered func(from string, o Outgoing) bool
	hash       keyhash.Hasher
	cfg        Config // timings and ratios of every core
	// bucket, if set, has take ask for token buckets (Burst the quota,
	// refilled at the quota an hour) instead of fixed windows, and count
	// count the tokens a bucket owes (of limit quota).
	bucket struct {
		on    bool
		quota int64
	}
}

// lost reports whether a message between from and to is lost.
func (h *handNet) lost(from, to string) bool {
	return h.down[from] || h.down[to] || h.cut[from] != h.cut[to] || h.oneway[[2]string{from, to}]
}

// handLog prints the cores' events (debugging a hand-wired test).
var handLog = os.Getenv("TOLLGATE_HAND_LOG") != ""

var handTiming = Config{
	CallTimeout:    50 * time.Millisecond,
	ProbeInterval:  200 * time.Millisecond,
	LeaseTime:      600 * time.Millisecond,
	ReplicateEvery: 10 * time.Millisecond,
	HandoffWindow:  5 * time.Second,
	FallbackRatio:  1,
	CacheSlots:     64,
}

// newHandNet starts a cluster of names, all members from the start, and
// lets them ping each other once (leases).
func newHandNet(t testing.TB, names ...string) *handNet {
	return newHandNetWith(t, handTiming, names...)
}

// newHandNetWith is newHandNet with cfg's timings and ratios.
func newHandNetWith(t testing.TB, cfg Config, names ...string) *handNet {
	h := &handNet{t: t, now: simEpoch, names: names, cores: map[string]*Core{}, incs: map[string]uint64{}, down: map[string]bool{}, cut: map[string]bool{}, unacked: map[[2]string]bool{}, cfg: cfg}
	h.hash = keyhash.New([]byte("hand secret"), "ring")
	for _, name := range names {
		h.start(name, false)
	}
	for _, name := range names {
		h.setMembership(name, nil)
	}
	h.tick()
	return h
}

// start starts a new run of name; joining: it has seeds to join.
func (h *handNet) start(name string, joining bool) *Core {
	h.incs[name]++
	cfg := h.cfg
	cfg.Self = Member{Name: name, Inc: h.incs[name], PeerAddr: name}
	cfg.Engine = limiter.New(limiter.Config{MaxKeys: 1024})
	cfg.Hasher = h.hash
	cfg.Joining = joining
	if handLog {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("t", h.now.Sub(simEpoch))
	}
	h.cores[name] = New(cfg, h.now)
	h.down[name] = false
	return h.cores[name]
}

// setMembership tells name's core that every other node is a member but
// the dead.
func (h *handNet) setMembership(name string, dead []string) {
	var m Membership
	for _, x := range h.names {
		switch {
		case x == name:
		case slices.Contains(dead, x):
			m.Dead = append(m.Dead, Peer{Name: x, Inc: h.incs[x]})
		default:
			m.Members = append(m.Members, Member{Name: x, Inc: h.incs[x], PeerAddr: x})
		}
	}
	h.cores[name].SetMembership(h.now, m)
	h.pump()
}

// advance lets d pass, ticking the cores given (all running ones if none)
// every 10ms.
func (h *handNet) advance(d time.Duration, only ...string) {
	end := h.now.Add(d)
	for h.now.Before(end) {
		h.now = h.now.Add(min(10*time.Millisecond, end.Sub(h.now)))
		h.tick(only...)
	}
}

func (h *handNet) tick(only ...string) {
	for _, name := range h.names {
		if !h.down[name] && (len(only) == 0 || slices.Contains(only, name)) {
			h.cores[name].Tick(h.now)
		}
	}
	h.pump()
}

// pump delivers what the cores queued until nothing more comes.
func (h *handNet) pump() {
	for range 100 {
		busy := false
		for _, name := range h.names {
			from := h.cores[name]
			for _, o := range from.Outbox() {
				busy = true
				h.deliver(name, o)
			}
		}
		if !busy {
			return
		}
	}
	h.t.Fatal("messages kept coming")
}

func (h *handNet) deliver(from string, o Outgoing) {
	if handLog {
		h.t.Logf("%s -> %s: %T %+v", from, o.To.Name, o.Msg, o.Msg)
	}
	src := h.cores[from]
	lost := h.lost(from, o.To.Name) || h.drops != nil && h.drops(from, o)
	dest := h.cores[o.To.Name]
	switch msg := o.Msg.(type) {
	case Ack:
		if !lost {
			dest.Handle(h.now, src.Self(), msg)
		}
		return
	case TakeItem:
		if !lost {
			dest.Serve(h.now, src.Self(), &msg, make([]limiter.Result, len(msg.Reqs)), h.now)
		}
		return
	}
	if lost {
		src.Failed(h.now, o.ID)
		return
	}
	reply := dest.Handle(h.now, src.Self(), o.Msg)
	_, isTransfer := o.Msg.(Transfer)
	if isTransfer && h.unacked[[2]string{from, o.To.Name}] || h.unanswered != nil && h.unanswered(from, o) {
		src.Failed(h.now, o.ID)
		return
	}
	src.Answered(h.now, o.ID, reply)
}

// handTake is one request for one key through one node.
type handTake struct {
	node  string
	op    TakeOp
	reqs  []limiter.Request
	res   []limiter.Result
	done  bool
	d     Decision
	until time.Time // while waiting
}

// take starts a request for k (limit quota an hour) through node and
// drives it as far as it goes now.
func (h *handNet) take(node string, k limiter.Key, quota int64) *handTake {
	return h.takeUnder(node, k, h.limitOf(quota))
}

// hourly is the limit of quota an hour, in fixed windows.
func hourly(quota int64) limiter.Limit {
	return limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}
}

// takeUnder starts a request for k under limit through node and drives
// it as far as it goes now.
func (h *handNet) takeUnder(node string, k limiter.Key, limit limiter.Limit) *handTake {
	tk := &handTake{node: node, res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limit}}
	d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
	if done {
		tk.done, tk.d = true, d
		return tk
	}
	h.drive(tk)
	return tk
}

// drive steps a request until it is decided or waits; items are served at
// once, held by nobody.
func (h *handNet) drive(tk *handTake) {
	c := h.cores[tk.node]
	for !tk.done {
		a := c.Step(h.now, &tk.op)
		switch a.Kind {
		case ActDone:
			tk.done, tk.d = true, tk.op.Decision()
		case ActWait:
			tk.until = a.Until
			return
		case ActCall:
			if h.lost(tk.node, a.To.Name) {
				c.CallFailed(h.now, &tk.op, false)
				break
			}
			dest := h.cores[a.To.Name]
			switch m := a.Msg.(type) {
			case TakeItem:
				res := make([]limiter.Result, len(m.Reqs))
				reply, _ := dest.Serve(h.now, c.Self(), &m, res, h.now)
				c.Replied(h.now, &tk.op, reply)
			default:
				c.Replied(h.now, &tk.op, dest.Handle(h.now, c.Self(), m))
			}
		}
		h.pump()
	}
}

// admitUnanswered starts a request for k (limit quota an hour) through
// caller, whose first step calls owner, and has owner admit the item; the
// answer is not delivered: the test decides what becomes of it.
func (h *handNet) admitUnanswered(caller, owner string, k limiter.Key, quota int64) *handTake {
	h.t.Helper()
	c := h.cores[caller]
	tk := &handTake{node: caller, res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: h.limitOf(quota)}}
	if _, done := c.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		h.t.Fatalf("%s decided %s's key itself", caller, owner)
	}
	a := c.Step(h.now, &tk.op)
	item, ok := a.Msg.(TakeItem)
	if a.Kind != ActCall || a.To.Name != owner || !ok {
		h.t.Fatalf("%s's first step: %+v; want a take item for %s", caller, a, owner)
	}
	if reply, _ := h.cores[owner].Serve(h.now, c.Self(), &item, make([]limiter.Result, 1), h.now); !reply.Allowed {
		h.t.Fatalf("%s did not admit the item: %+v", owner, reply)
	}
	return tk
}

// fallbackAfterLostAnswer has owner admit caller's request for k (with
// quota) and the answer lost: cutOff is cut off from then on, and
// caller, giving the item up, decides the request by fallback, which
// admits it. The owner's count and the caller's fallback count both hold
// the request until a cancel comes.
func (h *handNet) fallbackAfterLostAnswer(caller, owner string, k limiter.Key, quota int64, cutOff string) *handTake {
	h.t.Helper()
	tk := h.admitUnanswered(caller, owner, k, quota)
	h.cut[cutOff] = true
	h.cores[caller].CallFailed(h.now, &tk.op, false)
	h.pump()
	h.drive(tk)
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourceFallback {
		h.t.Fatalf("the request given up on: %+v; want admitted by fallback", tk.d)
	}
	return tk
}

// keyOwnedBy returns a key whose owner is first and whose successor is
// second, by the ring of every node, other than the keys not.
func (h *handNet) keyOwnedBy(first, second string, not ...limiter.Key) limiter.Key {
	ring := h.cores[first].Ring()
	for i := range 10000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := ring.Owner(k.Route())
		s, _ := ring.Successor(k.Route())
		if o.Name == first && s.Name == second && !slices.Contains(not, k) {
			return k
		}
	}
	h.t.Fatalf("no key owned by %s with successor %s", first, second)
	return 0
}

// finish drives tk until it is decided, letting time pass to each instant
// it waits for.
func (h *handNet) finish(tk *handTake) {
	for !tk.done {
		h.now = maxTime(h.now, tk.until)
		h.drive(tk)
	}
}

// handLoad spends one key through the nodes and counts what was admitted,
// by source. Requests that wait are finished by resume.
type handLoad struct {
	h        *handNet
	k        limiter.Key
	quota    int64
	limit    limiter.Limit // the handNet's (see limitOf) unless a test sets another
	admitted int
	by       map[Source]int
	waiting  []*handTake
}

func newHandLoad(h *handNet, k limiter.Key, quota int64) *handLoad {
	return &handLoad{h: h, k: k, quota: quota, limit: h.limitOf(quota), by: map[Source]int{}}
}

// spend starts one request through node.
func (l *handLoad) spend(node string) *handTake {
	tk := l.h.takeUnder(node, l.k, l.limit)
	if tk.done {
		l.count(tk)
	} else {
		l.waiting = append(l.waiting, tk)
	}
	return tk
}

// resume finishes the requests that wait.
func (l *handLoad) resume() {
	for _, tk := range l.waiting {
		l.h.finish(tk)
		l.count(tk)
	}
	l.waiting = nil
}

func (l *handLoad) count(tk *handTake) {
	if tk.d.Allowed {
		l.admitted++
		l.by[tk.d.Source]++
	}
}

// spendsToTheLimit is the other side of a count held once: the cluster
// healed, it spends the rest of the load's limit through owner, the node
// that counts the key, and through each node of through in turn,
// forwarded to it. Every request up to the limit is admitted by the owner
// (no false denial, none by fallback), the first past it is refused
// through every one of them, and the owner then counts the limit.
func (l *handLoad) spendsToTheLimit(t testing.TB, owner string, through ...string) {
	t.Helper()
	h := l.h
	for _, name := range append([]string{owner}, through...) {
		if o, _ := h.cores[name].Ring().Owner(l.k.Route()); o.Name != owner {
			t.Fatalf("%s's ring names %s the key's owner; want %s", name, o.Name, owner)
		}
	}
	at := append([]string{owner}, through...)
	for i := 0; l.admitted < int(l.quota); i++ {
		node, want := at[i%len(at)], SourcePeer
		if node == owner {
			want = SourceOwner
		}
		tk := h.take(node, l.k, l.quota)
		h.finish(tk)
		l.count(tk)
		if !tk.d.Allowed || tk.d.Source != want {
			t.Fatalf("through %s, %d of %d admitted: allowed %v by %v; want admitted by %v (counts %v)", node, l.admitted, l.quota, tk.d.Allowed, tk.d.Source, want, h.counts(l.k))
		}
	}
	for _, node := range at {
		tk := h.take(node, l.k, l.quota)
		h.finish(tk)
		l.count(tk)
		if tk.d.Allowed {
			t.Errorf("through %s, past the limit of %d: admitted by %v (%d admitted; counts %v)", node, l.quota, tk.d.Source, l.admitted, h.counts(l.k))
		}
	}
	if got := h.count(owner, l.k); got != l.quota {
		t.Errorf("the owner %s counts %d of the key spent to its limit %d (counts %v)", owner, got, l.quota, h.counts(l.k))
	}
}

// units is what node's engine counts of the load's key, in units of the
// load's limit (see unitsOf).
func (l *handLoad) units(node string) int64 {
	return l.unitsOf(l.h.cores[node].engine.StatesOf(l.h.now, []limiter.Key{l.k}))
}

// unitsOf is what the counters states count, in units of the load's
// limit: a window's count, or a bucket's debt (its arrival time beyond
// now) in intervals of one unit's refill, rounded up.
func (l *handLoad) unitsOf(states []limiter.State) int64 {
	var n int64
	for _, s := range states {
		switch {
		case s.Kind >= limiter.KindGrant:
		case l.limit.Algorithm == limiter.TokenBucket:
			every := int64(l.limit.Window) / l.limit.Quota
			if debt := s.Stamp - l.h.now.UnixNano(); debt > 0 {
				n += (debt + every - 1) / every
			}
		default:
			n += int64(s.Cur)
		}
	}
	return n
}

// holdsAdmitted fails the test unless the nodes' engines and fallback
// counters hold, in units of the load's limit, what the load admitted.
func (l *handLoad) holdsAdmitted() {
	l.h.t.Helper()
	var held int64
	by := map[string]int64{}
	for _, name := range l.h.names {
		c := l.h.cores[name]
		by[name] = l.units(name) + l.unitsOf(c.fallback.engine.StatesOf(l.h.now, []limiter.Key{l.k}))
		held += by[name]
	}
	if held != int64(l.admitted) {
		l.h.t.Errorf("the cluster holds %d of the key (%v); %d were admitted", held, by, l.admitted)
	}
}

// admitsTheRest fails the test unless node admits what the load's quota
// leaves of what it admitted, and refuses the next.
func (l *handLoad) admitsTheRest(node string) {
	l.h.t.Helper()
	before, want := l.admitted, l.quota-int64(l.admitted)
	for range want + 1 {
		l.spend(node)
		l.resume()
	}
	if got := int64(l.admitted - before); got != want {
		l.h.t.Errorf("%s admitted %d more of the key after %d; the quota %d leaves %d", node, got, before, l.quota, want)
	}
}

func (h *handNet) count(name string, k limiter.Key) int64 {
	states := h.cores[name].engine.StatesOf(h.now, []limiter.Key{k})
	if h.bucket.on {
		return h.bucketCount(states)
	}
	return windowCount(states)
}

// limitOf returns the limit take asks for: quota an hour, in a fixed
// window, or a token bucket (see handNet.bucket).
func (h *handNet) limitOf(quota int64) limiter.Limit {
	if h.bucket.on {
		h.bucket.quota = quota
		return limiter.Limit{Algorithm: limiter.TokenBucket, Quota: quota, Window: time.Hour}
	}
	return limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}
}

// bucketCount returns the tokens the buckets of states owe now, to the
// nearest token: how far each bucket's arrival time is ahead of now, in
// intervals of one token.
func (h *handNet) bucketCount(states []limiter.State) int64 {
	every := int64(time.Hour) / h.bucket.quota
	var n int64
	for _, st := range states {
		if st.Kind < limiter.KindGrant && st.Stamp > h.now.UnixNano() {
			n += (st.Stamp - h.now.UnixNano() + every/2) / every
		}
	}
	return n
}

// A member dies with 6 of 10 spent; its successor takes its keys over,
// from their replica, once the other survivor sealed and the dead
// member's lease ran out. Meanwhile both survivors decide the key by
// fallback, each within its share of what the dead owner said remained:
// the new owner's own requests, and the other survivor's, which the new
// owner answers NotYetMine after that survivor sealed. Both fallback
// counts must be in the new owner's count before it counts the key, or
// the key admits more than its limit.
func TestATakeoverCountsTheSurvivorsFallbackBeforeItCounts(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	const quota = 10
	a, b, c := "n1", "n2", "n3"
	k := h.keyOwnedBy(a, b)
	admitted := 0
	spend := func(node string) *handTake {
		tk := h.take(node, k, quota)
		if tk.done && tk.d.Allowed {
			admitted++
		}
		return tk
	}
	for range 4 {
		spend(a)
	}
	spend(b) // b heard 5 remain
	spend(c) // c heard 4 remain
	if admitted != 6 {
		t.Fatalf("before the crash: %d admitted; want 6", admitted)
	}
	h.advance(20 * time.Millisecond) // replicated to b
	if st, _, ok := h.cores[b].replicas.get(k); !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("b's replica of the key: %v %v; want 6", st, ok)
	}

	// a dies; the survivors declare it dead soon, before its lease ran out.
	h.down[a] = true
	h.advance(100 * time.Millisecond)
	h.setMembership(b, []string{a})
	h.setMembership(c, []string{a})
	h.advance(100 * time.Millisecond)
	if !h.cores[b].HandoffUnderway() {
		t.Fatal("b does not wait before it counts a's keys")
	}

	// Requests through b wait a call timeout for the key, then fallback
	// decides them.
	h.advance(200 * time.Millisecond)
	own := []*handTake{spend(b), spend(b)}
	h.advance(60 * time.Millisecond)
	for _, tk := range own {
		h.drive(tk)
		if !tk.done || tk.d.Source != SourceFallback {
			t.Fatalf("a request through b during the takeover: done %v, decided by %v; want fallback", tk.done, tk.d.Source)
		}
		if tk.d.Allowed {
			admitted++
		}
	}

	// Just before a's lease runs out at b, c's requests reach b, which
	// cannot count the key yet.
	h.advance(140 * time.Millisecond)
	var pending []*handTake
	for range 2 {
		if tk := spend(c); !tk.done {
			pending = append(pending, tk)
		}
	}
	// b takes the key over now, before c's next reconcile tick.
	for range 20 {
		if !h.cores[b].HandoffUnderway() {
			break
		}
		h.advance(10*time.Millisecond, b)
	}
	if h.cores[b].HandoffUnderway() {
		t.Fatal("b did not take a's keys over")
	}
	for _, tk := range pending {
		h.now = maxTime(h.now, tk.until)
		h.drive(tk)
		if !tk.done {
			t.Fatal("a request through c still waits after b took the key over")
		}
		if tk.d.Allowed {
			admitted++
		}
	}
	for range 2 * quota {
		spend(b)
		spend(c)
	}
	h.advance(time.Second)
	if admitted > quota {
		t.Errorf("%d admitted of limit %d: the new owner counted before the survivor's fallback count reached it", admitted, quota)
	}
	if got := h.count(b, k); got != int64(admitted) {
		t.Errorf("the new owner holds %d; %d were admitted", got, admitted)
	}
}

// A member crashes with 3 of 10 spent and comes back at once, under a new
// run, while the others count its keys: 3 in fallback, then 2 by its
// successor, which took them over from their replica. The new run owns
// them again, and must count them only once the successor's count of 8
// arrived, or it counts them from nothing and admits 10 more. Its driver
// says a seed answered before it lists the members: a moment later, or
// (no seed answered in time) only once the node entered a ring of itself
// alone.
func TestARestartedOwnerWaitsForTheCountsOfItsKeys(t *testing.T) {
	for _, alone := range []bool{false, true} {
		name := "members listed a moment after the join"
		if alone {
			name = "members listed after the node entered its ring alone"
		}
		t.Run(name, func(t *testing.T) { restartedOwner(t, alone) })
	}
}

func restartedOwner(t *testing.T, alone bool) {
	h := newHandNet(t, "n1", "n2", "n3")
	const quota = 10
	k := h.keyOwnedBy("n2", "n1")
	load := newHandLoad(h, k, quota)
	spend, resume := load.spend, load.resume
	for range 3 {
		spend("n2")
	}
	h.advance(20 * time.Millisecond) // replicated to n1

	h.down["n2"] = true
	h.advance(100 * time.Millisecond)
	for range 3 {
		if tk := spend("n3"); !tk.done || tk.d.Source != SourceFallback {
			t.Fatalf("a request through n3 while n2 is down: done %v, decided by %v; want fallback", tk.done, tk.d.Source)
		}
	}
	h.setMembership("n1", []string{"n2"})
	h.setMembership("n3", []string{"n2"})
	h.advance(time.Second)
	if h.cores["n1"].HandoffUnderway() {
		t.Fatal("n1 did not take n2's keys over")
	}
	for range 2 {
		spend("n1")
	}
	if got := h.count("n1", k); got != 8 || load.admitted != 8 {
		t.Fatalf("n1 holds %d after taking over; %d admitted; want 8 and 8", got, load.admitted)
	}

	// n2 comes back, and takes requests at once unless it enters its ring
	// alone; the others have not heard of it yet.
	n2 := h.start("n2", true)
	n2.Joined(h.now)
	h.pump()
	if alone {
		h.advance(handTiming.ProbeInterval, "n2")
		if !n2.Member() {
			t.Fatal("the new run of n2 did not enter its ring alone")
		}
	}
	if !alone {
		for range quota {
			spend("n2")
		}
	}
	h.setMembership("n2", nil)
	h.advance(10*time.Millisecond, "n2") // it enters its ring, and its pings renew its leases
	if !n2.Member() {
		t.Fatal("the new run of n2 did not enter its ring")
	}
	for range quota {
		spend("n2")
	}
	h.setMembership("n1", nil)
	h.setMembership("n3", nil)
	h.advance(200 * time.Millisecond)
	resume()
	for range quota {
		spend("n1")
		spend("n2")
		spend("n3")
	}
	h.advance(time.Second)
	resume()
	if load.admitted > quota {
		t.Errorf("%d admitted of limit %d: the new run of n2 counted its key before the counts moving to it arrived", load.admitted, quota)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 holds %d; %d were admitted", got, load.admitted)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A survivor sealed to the node its ring gives a dead member's key; a
// peer with an older view sends its request for the key on to another
// node, which cannot count it (NotYetMine). The survivor must not decide
// it by fallback then: the owner it sealed to may start counting the key
// before that fallback count reaches it. It asks again, a call timeout
// later, the owner by its own view.
func TestASurvivorSentOnByAnOlderViewWaitsForTheOwnerItSealedTo(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	a, b, c := "n1", "n2", "n3"
	k := h.keyOwnedBy(a, b)
	h.take(c, k, 10)
	h.advance(20 * time.Millisecond)
	h.down[a] = true
	h.advance(100 * time.Millisecond)
	for _, n := range []string{b, c} {
		h.setMembership(n, []string{a})
	}
	h.advance(50 * time.Millisecond)
	cc := h.cores[c]
	if !cc.sealsGiven.gave(b, cc.view.Load().ring.Fingerprint()) {
		t.Fatalf("%s did not seal to %s", c, b)
	}
	if !h.cores[b].HandoffUnderway() {
		t.Fatalf("%s already counts %s's keys", b, a)
	}

	// a comes back, a new run not yet in c's ring: it cannot count the
	// key.
	h.start(a, true)
	cc.SetMembership(h.now, Membership{Members: []Member{h.member(b)}, Joining: []Member{h.member(a)}})
	h.pump()
	d := a
	if p := cc.peers.get(d); p == nil || !p.calls() || p.peer.Inc != h.incs[a] {
		t.Fatalf("%s does not call %s's new run: %+v", c, a, p)
	}

	tk := &handTake{node: c, res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour}}}
	if _, done := cc.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatalf("%s decided the key at once", c)
	}
	if a := cc.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != b {
		t.Fatalf("%s's first step: %+v; want a call to %s", c, a, b)
	}
	cc.Replied(h.now, &tk.op, ItemReply{Outcome: MovedTo, Owner: d}) // an older view
	if a := cc.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != d {
		t.Fatalf("%s's step after the redirect: %+v; want a call to %s", c, a, d)
	}
	cc.Replied(h.now, &tk.op, ItemReply{Outcome: NotYetMine})
	a1 := cc.Step(h.now, &tk.op)
	if a1.Kind != ActWait {
		t.Fatalf("%s's step after %s's NotYetMine: %+v (decided by %v); want a wait for %s, which it sealed to", c, d, a1, tk.op.Decision().Source, b)
	}
	h.now = a1.Until
	if a := cc.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != b {
		t.Fatalf("%s's step after the wait: %+v; want a call to %s", c, a, b)
	}
}

// A survivor that declared a member dead asks the node its ring gives the
// member's key; that node, by its older view, sends the request on to the
// dead member, until it declares the member dead too and the survivor
// seals to it. An answer it gave before then, arriving after the seal with
// little of the request's patience left, must not have the survivor decide
// the request by fallback: the owner it sealed to may start counting the
// key before that fallback count reaches it. The survivor asks the owner.
func TestASurvivorWithLittlePatienceLeftAsksTheOwnerItSealedTo(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	a, b, c := "n1", "n2", "n3"
	k := h.keyOwnedBy(a, b)
	h.down[a] = true
	h.advance(handTiming.LeaseTime + 100*time.Millisecond) // a's lease ran out
	h.setMembership(c, []string{a})                        // c declares a dead; b does not yet
	h.advance(50 * time.Millisecond)
	cc := h.cores[c]

	tk := &handTake{node: c, res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour}}}
	if _, done := cc.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatalf("%s decided the key at once", c)
	}
	if a := cc.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != b {
		t.Fatalf("%s's first step: %+v; want a call to %s", c, a, b)
	}
	// The answer comes late, once most of the request's patience is spent
	// and b has declared a dead and c has sealed to it.
	h.advance(cc.patience() - 30*time.Millisecond)
	h.setMembership(b, []string{a})
	h.advance(10 * time.Millisecond)
	if h.cores[b].HandoffUnderway() {
		t.Fatalf("%s does not count %s's keys yet", b, a)
	}
	if !cc.sealsGiven.gave(b, cc.view.Load().ring.Fingerprint()) {
		t.Fatalf("%s did not seal to %s", c, b)
	}
	cc.Replied(h.now, &tk.op, ItemReply{Outcome: MovedTo, Owner: a}) // b's older view
	step := cc.Step(h.now, &tk.op)
	if step.Kind != ActCall || step.To.Name != b {
		t.Fatalf("%s's step after the late redirect to %s: %+v (decided by %v); want a call to %s, which it sealed to", c, a, step, tk.op.Decision().Source, b)
	}
	h.drive(tk)
	if !tk.done || tk.d.Source != SourcePeer {
		t.Errorf("the request: %+v; want it decided by %s", tk.d, b)
	}
}
