package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// The transport's client side: one peerClient per other node, which keeps
// a connection to it, sends calls, matches replies to them by frame ID and
// fails them at their deadline. Take items waiting together go out in one
// frame: a forwarded check costs a fraction of a round trip and of a
// system call.

var (
	errTimeout = errors.New("peer call timed out")
	errClosed  = errors.New("peer connection closed")
	errBusy    = errors.New("peer call queue full")
)

// call is one request to a peer: a take item (batched with others) or a
// message of its own. Exactly one outcome settles it: its reply, its
// failure or its deadline, whichever comes first. A take driver uses its
// call again for its next take item once it is settled (takeAgain): each
// use has a number, and a peer client holds a call as one use of it
// (inFlight), so one that holds an earlier use (a call that timed out
// stays in its queue or frame a while) finds that use settled and leaves
// the call alone.
type call struct {
	kind byte
	body []byte                             // the encoded item (take) or message
	buf  [takeItemHead + 2*zoneReqSize]byte // body's storage for items of up to two zones
	res  []limiter.Result                   // where a take reply's results go
	rbuf [2]limiter.Result                  // res's storage for up to two zones
	item core.ItemReply                     // a take item's reply
	repl []byte                             // another kind's reply body
	err  error                              // why it failed
	done func(*call)                        // called once it is settled; nil: a waiter waits on wg
	wg   sync.WaitGroup                     // released when settled, for a waiter
	st   atomic.Uint64                      // the use's number<<2 | callPending, callFilling or callDone
	_    [0]func()                          // not comparable
}

const (
	callPending uint64 = iota
	callFilling
	callDone
)

// epoch is the origin of calls' deadlines: monotonic time, as int64.
var epoch = time.Now()

// monoNanos returns t as nanoseconds since epoch (by the monotonic clock).
func monoNanos(t time.Time) int64 { return max(int64(t.Sub(epoch)), 1) }

// newCall makes a call of kind whose outcome done receives (nil: the
// caller waits for it with wait).
func newCall(kind byte, done func(*call)) *call {
	c := &call{kind: kind, done: done}
	if done == nil {
		c.wg.Add(1)
	}
	return c
}

// newTakeCall makes a call carrying one take item, encoded now: the caller
// may reuse the item's memory as soon as the call returns.
func newTakeCall(it *core.TakeItem, done func(*call)) *call {
	c := newCall(msgTake, done)
	c.carry(it)
	return c
}

// takeAgain makes c the call of the take item it, waited for, as its next
// use: c is new (its zero value) or a call its waiter saw settled, and
// whoever still holds an earlier use finds that use settled.
func (c *call) takeAgain(it *core.TakeItem) {
	c.st.Store((c.st.Load()>>2+1)<<2 | callPending)
	c.kind, c.done, c.err, c.item = msgTake, nil, nil, core.ItemReply{}
	c.wg.Add(1)
	c.carry(it)
}

// carry encodes the take item it as c's body, now: the caller may reuse
// the item's memory as soon as the call returns.
func (c *call) carry(it *core.TakeItem) {
	e := encoder{b: c.buf[:0]}
	encodeTakeItem(&e, it)
	c.body = e.b
	if len(it.Reqs) <= len(c.rbuf) {
		c.res = c.rbuf[:len(it.Reqs)]
	} else {
		c.res = make([]limiter.Result, len(it.Reqs))
	}
}

// settle releases whoever waits for c; only the one that claimed its use
// calls it.
func (c *call) settle() {
	c.st.Add(callDone - callFilling)
	if c.done != nil {
		c.done(c)
	} else {
		c.wg.Done()
	}
}

// inFlight is one use of a call as a peer client holds it, from its queue
// to its answer, with when the watcher gives up on it. Only the one that
// claims the use reads or writes the call, and then settles it; the
// others look at its state alone.
type inFlight struct {
	c    *call
	use  uint64
	kind byte
	due  int64    // deadline, monotonic ns since epoch; 0 for none
	pat  patience // when the watcher gives up on it
}

// pending reports whether the use is neither settled nor being settled.
func (f *inFlight) pending() bool { return f.c.st.Load() == f.use<<2|callPending }

// claim takes the use for its outcome; only the one that claims it writes
// to the call, and then calls settle.
func (f *inFlight) claim() bool {
	return f.c.st.CompareAndSwap(f.use<<2|callPending, f.use<<2|callFilling)
}

// fail settles the use with err unless it is settled already.
func (f *inFlight) fail(err error) {
	if f.claim() {
		f.c.err = err
		f.c.settle()
	}
}

// wait waits for c's outcome.
func (c *call) wait() error {
	c.wg.Wait()
	return c.err
}

// dialer is what a peer client needs of its node to connect.
type dialer struct {
	self    core.Peer
	authKey []byte
	timeout time.Duration // of a dial and its handshake
	// silence: a call past its deadline waits on, up to ten times
	// silence, while the peer has sent something within silence: an owner
	// that answers other calls is alive but behind, and its answer is the
	// decision (deciding the call by fallback would count it twice).
	silence time.Duration
	// stalls measures this process's own stalls: a deadline counts only
	// the time the caller ran (nil: the process's watchdog).
	stalls   stallClock
	network  network // nil: the host's network
	log      *slog.Logger
	observer Observer
	// redialFirst and redialMost bound the wait between dials after a
	// failure: it starts at redialFirst and doubles up to redialMost
	// (zero: 20 ms and a second).
	redialFirst, redialMost time.Duration
}

// redialBackoff returns the first and the longest wait between dials.
func (d *dialer) redialBackoff() (first, most time.Duration) {
	first, most = d.redialFirst, d.redialMost
	if first == 0 {
		first = 20 * time.Millisecond
	}
	if most == 0 {
		most = time.Second
	}
	return first, max(first, most)
}

// stalled returns how long, up to now, this process was seen not running.
func (d *dialer) stalled(now int64) int64 {
	if d.stalls == nil {
		return processStalls.stalled(now)
	}
	return d.stalls.stalled(now)
}

// patience is when the watcher gives up on a call that has no answer. A
// deadline counts only the time the caller ran: while this process was
// stalled it could not have read an answer, so that time is not the
// peer's silence. Past its deadline, a call waits on while the peer is
// behind but not gone (it sent something since the call was sent, within
// silence counted only while this process ran), up to last. A caller that stalled while
// the call waited lets its reader run once before it gives up: an answer
// may have arrived meanwhile, not read yet. Only the peer's watcher reads
// and writes a call's patience once the call is queued.
type patience struct {
	sent    int64 // when the call was sent (monotonic ns since epoch)
	timeout int64 // its deadline, after sent
	base    int64 // this process's stalls up to sent
	last    int64 // the latest the deadline moves to while the peer answers others, before stalls
	graced  bool  // the reader was given its turn
}

// extend is called when the call's deadline has come, at now, with this
// process's stalls up to now (stalled), when the peer was last heard from
// and the stalls up to then. It returns the next deadline and true if the
// call waits on.
func (w *patience) extend(now, stalled, heard, heardStalled, silence int64) (int64, bool) {
	own := stalled - w.base // the caller's stalls while the call waited
	if due := w.sent + w.timeout + own; now < due {
		return due, true
	}
	if last := w.last + own; now < last && heard > w.sent {
		silent := now - heard - max(stalled-heardStalled, 0)
		if silent < silence {
			return min(now+silence-silent, last), true // the peer is behind, not gone
		}
	}
	if own > 0 && !w.graced {
		w.graced = true
		return now + 2*int64(stallTick), true
	}
	return 0, false
}

// peerClient is this node's client of one other node. A call is always in
// one place the watcher looks: the queue, until the writer moves it (under
// the queue's lock) to pending, where it stays until its reply. So callers
// wait on nothing but their call, with no timer of their own. A
// peerClient is safe for concurrent use.
type peerClient struct {
	d    *dialer
	name string
	addr string
	inc  uint64 // the peer's run the client was last matched to (peerSet.mu)

	qmu     sync.Mutex
	queued  []inFlight
	qclosed bool
	wake    chan struct{} // the writer has calls to look at
	kick    chan struct{} // the watcher has an earlier deadline to watch
	wakeAt  atomic.Int64  // the watcher's next wake-up: 0 none, -1 looking

	connected    atomic.Bool
	heard        atomic.Int64 // when the last frame came from the peer (monotonic ns since epoch)
	heardStalled atomic.Int64 // this process's stalls then

	mu      sync.Mutex
	conn    *secureConn
	pending map[uint32]*frameCalls
	nextID  uint32

	frames atomic.Uint64 // take frames sent
	items  atomic.Uint64 // take items sent
	bytes  atomic.Uint64 // bytes of frames sent

	takesInFlight atomic.Int32  // take frames whose first reply has not come
	replied       chan struct{} // a take reply arrived

	redial   chan struct{} // the peer started a new run: dial it now
	redialed atomic.Bool   // a redial cut the last wait short

	stop        chan struct{}
	done        chan struct{}
	watcherDone chan struct{}
}

// frameCalls are the calls one frame carried, until each is answered.
type frameCalls struct {
	calls    []inFlight
	left     int
	answered bool // a first reply came
	take     bool
}

// queueDepth bounds the calls waiting for the writer: beyond it a call
// fails at once, as busy (it says nothing of the peer's health).
const queueDepth = 4096

func newPeerClient(d *dialer, name, addr string, inc uint64) *peerClient {
	p := &peerClient{
		d: d, name: name, addr: addr, inc: inc,
		redial:      make(chan struct{}, 1),
		pending:     make(map[uint32]*frameCalls),
		wake:        make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		replied:     make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		watcherDone: make(chan struct{}),
	}
	go p.run()
	go p.watch()
	return p
}

// close stops the client and fails its calls.
func (p *peerClient) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.mu.Unlock()
	<-p.done
	<-p.watcherDone
}

// send queues c, due by deadline (zero: no deadline, for calls whose
// outcome nobody reads). A call that cannot be queued fails at once.
func (p *peerClient) send(c *call, deadline time.Time) {
	var now time.Time
	if !deadline.IsZero() {
		now = time.Now()
	}
	p.sendAt(c, now, deadline)
}

// sendAt is send for a caller that read the clock as it sent c, at now.
func (p *peerClient) sendAt(c *call, sent, deadline time.Time) {
	f := inFlight{c: c, use: c.st.Load() >> 2, kind: c.kind}
	if !deadline.IsZero() {
		now := monoNanos(sent)
		f.due = monoNanos(deadline)
		f.pat = patience{sent: now, timeout: f.due - now, base: p.d.stalled(now), last: f.due + 10*int64(p.d.silence)}
	}
	p.qmu.Lock()
	if p.qclosed {
		p.qmu.Unlock()
		f.fail(errClosed)
		return
	}
	if len(p.queued) >= queueDepth {
		p.qmu.Unlock()
		f.fail(errBusy)
		return
	}
	p.queued = append(p.queued, f)
	n := len(p.queued)
	p.qmu.Unlock()
	// The writer needs waking for a first call, a full batch, or a call
	// that is not a take (it goes at once, after the takes before it).
	if n == 1 || n == maxBatch || f.kind != msgTake {
		signal(p.wake)
	}
	if due := f.due; due != 0 {
		if at := p.wakeAt.Load(); at <= 0 || due < at {
			signal(p.kick)
		}
	}
}

// signal leaves a token in a channel of capacity one, unless one is there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// watch fails calls whose deadline has passed, waking at the earliest
// deadline of the calls waiting (and not at all when none waits).
func (p *peerClient) watch() {
	defer close(p.watcherDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-p.kick:
		case <-t.C:
		case <-p.stop:
			t.Stop()
			return
		}
		p.wakeAt.Store(-1) // calls queued from now on kick again
		next := p.expire(monoNanos(time.Now()))
		p.wakeAt.Store(next)
		if next > 0 {
			t.Reset(time.Duration(next - monoNanos(time.Now())))
		} else {
			t.Stop()
		}
	}
}

// expire fails the calls due by now and returns the earliest deadline of
// the others, or 0.
func (p *peerClient) expire(now int64) (next int64) {
	st := p.d.stalled(now)
	check := func(f *inFlight) {
		if f.due == 0 || !f.pending() {
			return
		}
		if f.due <= now {
			due, ok := f.pat.extend(now, st, p.heard.Load(), p.heardStalled.Load(), int64(p.d.silence))
			if !ok {
				f.fail(errTimeout)
				return
			}
			f.due = due
		}
		if next == 0 || f.due < next {
			next = f.due
		}
	}
	p.qmu.Lock()
	for i := range p.queued {
		check(&p.queued[i])
	}
	p.qmu.Unlock()
	p.mu.Lock()
	for _, fr := range p.pending {
		for i := range fr.calls {
			check(&fr.calls[i])
		}
	}
	p.mu.Unlock()
	return next
}

// run keeps a connection to the peer, redialling after failures with a
// backoff that grows to a second. A new run of the peer (it restarted)
// is dialled at once: the backoff grew while the last run was away, and
// waiting it out would decide the new run's keys by fallback meanwhile.
func (p *peerClient) run() {
	defer close(p.done)
	labelGoroutine(p.d.self.Name, "peer-writer")
	first, most := p.d.redialBackoff()
	backoff := first
	for {
		if p.stopped() {
			p.failPending(errClosed, true)
			return
		}
		conn, err := p.dial()
		if err != nil {
			p.d.log.Debug("connecting to peer", "peer", p.name, "error", err.Error())
			if !p.sleep(backoff) {
				p.failPending(errClosed, true)
				return
			}
			backoff = min(2*backoff, most)
			if p.redialed.Swap(false) {
				backoff = first
			}
			continue
		}
		backoff = first
		p.mu.Lock()
		p.conn = conn
		p.mu.Unlock()
		p.connected.Store(true)
		readerDone := make(chan error, 1)
		go func() {
			labelGoroutine(p.d.self.Name, "peer-reader")
			readerDone <- p.read(conn)
		}()
		err = p.write(conn, readerDone)
		p.connected.Store(false)
		p.takesInFlight.Store(0)
		conn.Close()
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		stopping := p.stopped()
		// Calls sent on the lost connection fail: their outcome is unknown,
		// and the core deals with that (a take is cancelled, a transfer
		// sent again). Calls still queued wait for the next connection.
		p.failSent(errClosed)
		if stopping {
			p.failPending(errClosed, true)
			return
		}
		p.d.log.Debug("peer connection lost", "peer", p.name, "error", errString(err))
		if !p.sleep(backoff) {
			p.failPending(errClosed, true)
			return
		}
	}
}

func (p *peerClient) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

func (p *peerClient) dial() (*secureConn, error) {
	var raw net.Conn
	var err error
	if nw := p.d.network; nw != nil {
		raw, err = nw.dialPeer(p.d.self.Name, p.name, p.addr, p.d.timeout)
	} else {
		raw, err = net.DialTimeout("tcp", p.addr, p.d.timeout)
	}
	if err != nil {
		return nil, err
	}
	conn, err := clientHandshake(raw, p.d.authKey, p.d.self, time.Now().Add(p.d.timeout))
	if err != nil {
		raw.Close()
		var v VersionError
		if errors.As(err, &v) {
			p.d.log.Error("refusing peer with another protocol version",
				"peer", p.name, "ours", v.Ours, "theirs", v.Theirs)
		}
		return nil, err
	}
	return conn, nil
}

// sleep waits d, or until the peer starts a new run (see newRun), and
// reports false if the client stops meanwhile.
func (p *peerClient) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.redial:
		p.redialed.Store(true)
		return true
	case <-p.stop:
		return false
	}
}

// newRun tells the client that its peer started run inc: a wait between
// dials ends at once. peerSet.mu is held.
func (p *peerClient) newRun(inc uint64) {
	if inc == p.inc {
		return
	}
	p.inc = inc
	signal(p.redial)
}

// Batching. A take call goes out at once when no take frame is awaiting
// its reply, so a lone request pays no delay. While one is, calls gather
// until it is answered, the batch is full, or batchLinger has passed: at
// saturation frames carry many calls each, and the wait a call adds is at
// most one round trip or batchLinger. The writer takes every call queued
// at once, so a frame of many calls costs it one wake-up, not one each.
const (
	maxTakeFramesInFlight = 1
	batchLinger           = 200 * time.Microsecond
	writeTimeout          = 2 * time.Second
)

// write sends queued calls until the connection fails or the client
// stops. Take calls waiting together go out as one frame; other calls go
// one to a frame, in their order among the takes.
func (p *peerClient) write(conn *secureConn, readerDone <-chan error) error {
	enc := &encoder{}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	lingering, lingered := false, false
	for {
		kind, items, waiting := p.nextFrame(enc, lingered)
		if items == 0 {
			if waiting && !lingering {
				linger.Reset(batchLinger)
				lingering = true
			}
			select {
			case <-p.wake:
			case <-p.replied:
			case <-linger.C:
				lingering, lingered = false, true
			case err := <-readerDone:
				return err
			case <-p.stop:
				return errClosed
			}
			continue
		}
		if kind == msgTake {
			if lingering {
				linger.Stop()
				lingering = false
			}
			lingered = false
			p.frames.Add(1)
			p.items.Add(uint64(items))
			p.d.observer.Batch(items)
		}
		p.bytes.Add(uint64(len(enc.b)))
		if err := conn.writeFrame(enc.b, time.Now().Add(writeTimeout)); err != nil {
			return err
		}
	}
}

// nextFrame takes from the queue the calls of the next frame to send,
// writes the frame into enc and, unless it is an Ack (which gets no
// reply), moves them to pending under a new frame ID. It returns no items
// when there is none to send now; waiting then says that takes wait for
// the frame in flight (or for lingered, which sends them anyway). Calls
// settled already (they timed out) are dropped. The calls' bodies are
// copied while the locks hold them: the watcher fails a call only under
// the lock of where it is, and a call failed may be used again at once.
func (p *peerClient) nextFrame(enc *encoder, lingered bool) (kind byte, items int, waiting bool) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	skip := 0
	for skip < len(p.queued) && !p.queued[skip].pending() {
		skip++
	}
	if skip > 0 {
		rest := copy(p.queued, p.queued[skip:])
		clear(p.queued[rest:])
		p.queued = p.queued[:rest]
	}
	q := p.queued
	if len(q) == 0 {
		return 0, 0, false
	}
	var n int
	if q[0].kind != msgTake {
		kind, n = q[0].kind, 1
	} else {
		takes := 0
		for takes < len(q) && takes < maxBatch && q[takes].kind == msgTake {
			takes++
		}
		full := takes == maxBatch || takes < len(q) // a full batch, or a call waits behind
		if !full && !lingered && p.takesInFlight.Load() >= maxTakeFramesInFlight {
			return 0, 0, true
		}
		kind, n = msgTake, takes
	}
	batch := make([]inFlight, 0, n)
	for i := range q[:n] {
		if q[i].pending() {
			batch = append(batch, q[i])
		}
	}
	rest := copy(p.queued, q[n:])
	clear(p.queued[rest:])
	p.queued = p.queued[:rest]
	if len(batch) == 0 {
		return 0, 0, false
	}
	if kind == msgTake {
		p.takesInFlight.Add(1)
	}
	p.mu.Lock()
	p.nextID++
	enc.b = enc.b[:0]
	enc.u8(kind)
	enc.u32(p.nextID)
	if kind == msgTake {
		enc.u16(len(batch))
	}
	for i := range batch {
		enc.b = append(enc.b, batch[i].c.body...)
	}
	if kind != msgAck {
		p.pending[p.nextID] = &frameCalls{calls: batch, left: len(batch), take: kind == msgTake}
	}
	p.mu.Unlock()
	if kind == msgAck {
		for i := range batch {
			if batch[i].claim() {
				batch[i].c.settle() // sent: an Ack's outcome is its sending
			}
		}
	}
	return kind, len(batch), false
}

// read delivers replies until the connection fails.
func (p *peerClient) read(conn *secureConn) error {
	var buf []byte
	for {
		frame, err := conn.readFrame(buf)
		if err != nil {
			return err
		}
		buf = frame[:cap(frame)]
		now := monoNanos(time.Now())
		p.heardStalled.Store(p.d.stalled(now))
		p.heard.Store(now)
		d := &decoder{b: frame}
		kind, id, status := d.u8(), d.u32(), d.u8()
		if d.err != nil || kind&replyBit == 0 {
			return errors.New("malformed reply")
		}
		kind &^= replyBit
		p.mu.Lock()
		f := p.pending[id]
		first := f != nil && !f.answered
		if first {
			f.answered = true
		}
		p.mu.Unlock()
		if first && f.take {
			p.takesInFlight.Add(-1)
			signal(p.replied)
		}
		if f == nil {
			continue // calls that were failed already
		}
		if status != statusOK {
			err := fmt.Errorf("peer %s: %s", p.name, d.str())
			p.finishFrame(id, f, len(f.calls))
			for i := range f.calls {
				f.calls[i].fail(err)
			}
			continue
		}
		if kind != msgTake {
			p.finishFrame(id, f, 1)
			if fc := &f.calls[0]; fc.claim() {
				fc.c.repl = append([]byte(nil), d.b...)
				fc.c.settle()
			}
			continue
		}
		n := d.count(maxBatch, 3)
		answered := 0
		for range n {
			i := d.u16()
			if d.err != nil || i >= len(f.calls) {
				return fmt.Errorf("reply to item %d of a frame of %d", i, len(f.calls))
			}
			fc := &f.calls[i]
			if !fc.claim() {
				// Its caller gave up on it and decided it by fallback; the
				// core sent the owner a cancel, which gives an admission
				// back. Read past it.
				if _, err := decodeItemReply(d, nil); err != nil {
					return err
				}
				answered++
				continue
			}
			c := fc.c
			r, err := decodeItemReply(d, c.res)
			if err != nil {
				c.err = err
				c.settle()
				return err
			}
			c.item = r
			c.settle()
			answered++
		}
		p.finishFrame(id, f, answered)
	}
}

// finishFrame notes answered of frame id's calls answered, and forgets the
// frame once all are.
func (p *peerClient) finishFrame(id uint32, f *frameCalls, answered int) {
	p.mu.Lock()
	f.left -= answered
	if f.left <= 0 {
		delete(p.pending, id)
	}
	p.mu.Unlock()
}

// failSent fails every call sent on a connection that is lost.
func (p *peerClient) failSent(err error) {
	p.mu.Lock()
	pending := p.pending
	p.pending = make(map[uint32]*frameCalls)
	p.mu.Unlock()
	for _, f := range pending {
		for i := range f.calls {
			f.calls[i].fail(err)
		}
	}
}

// failPending fails every call sent or queued; final (the client stops)
// refuses calls from then on.
func (p *peerClient) failPending(err error, final bool) {
	p.failSent(err)
	p.qmu.Lock()
	queued := p.queued
	p.queued = nil
	p.qclosed = p.qclosed || final
	p.qmu.Unlock()
	for i := range queued {
		queued[i].fail(err)
	}
}

// labelGoroutine labels the calling goroutine, and those it starts, in CPU
// profiles with the node and its role in the peer protocol, so a profile of
// several nodes in one process (BenchmarkTake) tells the caller's work from
// the owner's: go tool pprof -tags.
func labelGoroutine(node, role string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(),
		pprof.Labels("tollgate_node", node, "tollgate_role", role)))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// peerSet holds the node's clients of its peers, one per node gossip
// knows (members, and nodes joining, leaving or declared dead: the core
// talks to all of them). Every forwarded check looks its owner's client
// up, so the set is read without a lock: a change builds a new map and
// swaps it in whole. A peerSet is safe for concurrent use.
type peerSet struct {
	mu    sync.Mutex // serializes changes
	peers atomic.Pointer[map[string]*peerClient]
}

func newPeerSet() *peerSet {
	s := &peerSet{}
	s.peers.Store(&map[string]*peerClient{})
	return s
}

// get returns the client of the node called name, or nil.
func (s *peerSet) get(name string) *peerClient { return (*s.peers.Load())[name] }

// all returns every client.
func (s *peerSet) all() []*peerClient {
	peers := *s.peers.Load()
	out := make([]*peerClient, 0, len(peers))
	for _, p := range peers {
		out = append(out, p)
	}
	return out
}

// match keeps one client for each node in nodes (by name), made by open,
// replacing those whose peer address changed, and drops the others. A
// client whose node started a new run at the same address is kept, and
// dials it at once (see peerClient.newRun). It returns the clients
// dropped or replaced, for the caller to close outside the lock.
func (s *peerSet) match(nodes map[string]core.Member, open func(core.Member) *peerClient) []*peerClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.peers.Load()
	peers := make(map[string]*peerClient, len(nodes))
	var gone []*peerClient
	for name, m := range nodes {
		p, ok := old[name]
		if !ok || p.addr != m.PeerAddr {
			if ok {
				gone = append(gone, p)
			}
			p = open(m)
		}
		p.newRun(m.Inc)
		peers[name] = p
	}
	for name, p := range old {
		if _, ok := nodes[name]; !ok {
			gone = append(gone, p)
		}
	}
	s.peers.Store(&peers)
	return gone
}

// takeAll removes and returns every client.
func (s *peerSet) takeAll() []*peerClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.all()
	s.peers.Store(&map[string]*peerClient{})
	return out
}
