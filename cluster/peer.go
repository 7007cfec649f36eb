package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

var (
	errUnavailable = errors.New("peer unavailable")
	errTimeout     = errors.New("peer call timed out")
	errClosed      = errors.New("peer connection closed")
)

// call is one request to a peer: a take item (batched with others) or a
// message of its own.
type call struct {
	kind byte                            // msgTake, or another message type
	item []byte                          // for msgTake: the encoded item (op, client, zones)
	res  []limiter.Result                // filled by the reply; the caller's memory
	body []byte                          // for other kinds: the encoded body
	buf  [1 + 8 + 1 + 2*zoneReqSize]byte // item's storage for up to two zones
	due  int64                           // deadline, as monotonic ns since epoch; 0 for none
	wait patience                        // for a patient call (timeout > 0): how its deadline moves

	allowed bool
	score   float64 // the client's reputation, for msgTake
	moved   string  // for msgTake: the owner the peer points to
	reply   []byte  // for other kinds: the reply body
	err     error

	state atomic.Int32   // callPending, callFilling or callDone
	done  sync.WaitGroup // released when the call is done
}

const (
	callPending int32 = iota
	callFilling
	callDone
)

// epoch is the origin of calls' deadlines: monotonic time, as int64.
var epoch = time.Now()

// monoNanos returns t as nanoseconds since epoch (by the monotonic clock).
func monoNanos(t time.Time) int64 { return max(int64(t.Sub(epoch)), 1) }

func newCall(kind byte) *call {
	c := &call{kind: kind}
	c.done.Add(1)
	return c
}

// newTakeCall makes a take item: a on reqs for client, with the results
// to be written to res. The requests are encoded now, by the caller: the
// caller may reuse their memory as soon as the call returns, even if it
// timed out while the writer was still batching it.
func newTakeCall(a action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) *call {
	c := newCall(msgTake)
	c.res = res
	e := encoder{b: c.buf[:0]}
	e.u8(opOf(a))
	e.u64(uint64(client))
	e.u8(byte(len(reqs)))
	for i := range reqs {
		encodeZoneReq(&e, &reqs[i])
	}
	c.item = e.b
	return c
}

// begin claims c for its outcome: the reply, a failure or the deadline,
// whichever comes first; only the one that claims it writes to it, and
// then calls end.
func (c *call) begin() bool { return c.state.CompareAndSwap(callPending, callFilling) }

// end releases the caller of a claimed call.
func (c *call) end() {
	c.state.Store(callDone)
	c.done.Done()
}

// fail completes c with err unless its outcome is settled already.
func (c *call) fail(err error) {
	if c.begin() {
		c.err = err
		c.end()
	}
}

// peer is this node's client of one other node: a persistent connection
// whose writer batches concurrent take calls into one frame, whose reader
// matches replies to calls, a watcher that fails calls at their deadline,
// and a breaker that keeps calls away after a failure.
//
// A call is always in one place the watcher looks: the queue, until the
// writer moves it (under the queue's lock) to pending, where it stays until
// its reply. So callers wait on nothing but their call, with no timer of
// their own.
type peer struct {
	node   *Node
	member Member

	qmu     sync.Mutex
	queued  []*call       // calls the writer has not sent yet, in order
	qclosed bool          // the peer stopped: no more calls
	wake    chan struct{} // the writer has calls to look at
	kick    chan struct{} // the watcher has an earlier deadline to watch
	wakeAt  atomic.Int64  // the watcher's next wake-up: 0 none, -1 looking

	breaker   breaker
	connected atomic.Bool
	heard     atomic.Int64 // when the last frame came from the peer (monotonic ns, see clock)

	mu      sync.Mutex
	conn    *secureConn
	pending map[uint32][]*call
	nextID  uint32

	frames atomic.Uint64 // take frames sent
	items  atomic.Uint64 // take items sent

	takesInFlight atomic.Int32  // take frames awaiting their reply
	replied       chan struct{} // a take reply arrived

	stop        chan struct{}
	done        chan struct{}
	watcherDone chan struct{}
}

// queueDepth bounds the calls waiting for the writer: beyond it, a call
// fails at once (as if it had timed out) rather than grow memory.
const queueDepth = 4096

func newPeer(n *Node, m Member) *peer {
	p := &peer{
		node:        n,
		member:      m,
		pending:     make(map[uint32][]*call),
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

// close stops the peer and fails its calls.
func (p *peer) close() {
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

// do sends c and waits for its reply until deadline.
func (p *peer) do(c *call, deadline time.Time) error {
	if !p.connected.Load() {
		return errUnavailable
	}
	c.due = monoNanos(deadline)
	if err := p.push(c); err != nil {
		return err
	}
	c.done.Wait()
	return c.err
}

// post queues c without waiting for it: its outcome goes unread. It is
// dropped when the peer is not connected or its queue is full.
func (p *peer) post(c *call) {
	if p.connected.Load() {
		p.push(c)
	}
}

// push queues c for the writer, and tells the watcher of its deadline if
// it is earlier than the one the watcher waits for.
func (p *peer) push(c *call) error {
	due := c.due // the watcher may move it once c is queued
	p.qmu.Lock()
	if p.qclosed {
		p.qmu.Unlock()
		return errClosed
	}
	if len(p.queued) >= queueDepth {
		p.qmu.Unlock()
		return errTimeout
	}
	p.queued = append(p.queued, c)
	n := len(p.queued)
	p.qmu.Unlock()
	// The writer needs waking for a first call, a full batch, or a call
	// that is not a take (it goes at once, after the takes before it).
	if n == 1 || n == maxBatch || c.kind != msgTake {
		signal(p.wake)
	}
	if due != 0 {
		if at := p.wakeAt.Load(); at <= 0 || due < at {
			signal(p.kick)
		}
	}
	return nil
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
func (p *peer) watch() {
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
func (p *peer) expire(now int64) (next int64) {
	check := func(c *call) {
		if c.due == 0 || c.state.Load() != callPending {
			return
		}
		if c.due <= now && !(c.wait.timeout > 0 && c.wait.extend(c, p, now)) {
			c.fail(errTimeout)
			return
		}
		if next == 0 || c.due < next {
			next = c.due
		}
	}
	p.qmu.Lock()
	for _, c := range p.queued {
		check(c)
	}
	p.qmu.Unlock()
	p.mu.Lock()
	for _, batch := range p.pending {
		for _, c := range batch {
			check(c)
		}
	}
	p.mu.Unlock()
	return next
}

// run keeps a connection to the peer, redialling with the breaker's
// backoff after failures.
func (p *peer) run() {
	defer close(p.done)
	labelGoroutine(p.node.name, "peer-writer")
	for {
		select {
		case <-p.stop:
			p.failPending(errClosed, true)
			return
		default:
		}
		conn, err := p.dial()
		if err != nil {
			p.noteFailure(fmt.Errorf("connecting: %w", err))
			if !p.sleep(p.retryIn()) {
				p.failPending(errClosed, true)
				return
			}
			continue
		}
		p.mu.Lock()
		p.conn = conn
		p.mu.Unlock()
		p.connected.Store(true)
		readerDone := make(chan error, 1)
		go func() {
			labelGoroutine(p.node.name, "peer-reader")
			readerDone <- p.read(conn)
		}()
		err = p.write(conn, readerDone)
		p.connected.Store(false)
		p.takesInFlight.Store(0)
		conn.Close()
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		stopping := false
		select {
		case <-p.stop:
			stopping = true
		default:
		}
		p.failPending(errClosed, stopping)
		if stopping {
			return
		}
		p.noteFailure(err)
		if !p.sleep(p.retryIn()) {
			p.failPending(errClosed, true)
			return
		}
	}
}

func (p *peer) dial() (*secureConn, error) {
	timeout := max(p.node.cfg.CallTimeout*10, time.Second)
	var raw net.Conn
	var err error
	if nw := p.node.cfg.network; nw != nil {
		raw, err = nw.dialPeer(p.node.name, p.member.Name, p.member.PeerAddr, timeout)
	} else {
		raw, err = net.DialTimeout("tcp", p.member.PeerAddr, timeout)
	}
	if err != nil {
		return nil, err
	}
	conn, err := clientHandshake(raw, p.node.authKey, p.node.name, time.Now().Add(timeout))
	if err != nil {
		raw.Close()
		var v VersionError
		if errors.As(err, &v) {
			p.node.log.Error("refusing peer with another protocol version",
				"peer", p.member.Name, "ours", v.Ours, "theirs", v.Theirs)
		}
		return nil, err
	}
	return conn, nil
}

func (p *peer) noteFailure(err error) {
	if p.breaker.failure(time.Now()) {
		p.node.log.Warn("peer unreachable: counting its keys in fallback", "peer", p.member.Name, "error", err.Error())
		p.node.fallback.activations.Add(1)
	}
	p.node.watchReturn(p)
}

func (p *peer) retryIn() time.Duration {
	p.breaker.mu.Lock()
	defer p.breaker.mu.Unlock()
	return max(time.Until(p.breaker.openTill), 10*time.Millisecond)
}

func (p *peer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stop:
		return false
	}
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
)

// write sends queued calls until the connection fails or the peer stops.
// Take calls waiting together go out as one frame; other calls go one to
// a frame, in their order among the takes.
func (p *peer) write(conn *secureConn, readerDone <-chan error) error {
	enc := &encoder{}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	lingering, lingered := false, false
	for {
		kind, id, batch, waiting := p.nextFrame(lingered)
		if batch == nil {
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
		enc.b = enc.b[:0]
		enc.u8(kind)
		enc.u32(id)
		if kind == msgTake {
			if lingering {
				linger.Stop()
				lingering = false
			}
			lingered = false
			enc.u16(len(batch))
			for _, b := range batch {
				enc.b = append(enc.b, b.item...)
			}
			p.frames.Add(1)
			p.items.Add(uint64(len(batch)))
			p.node.cfg.Observer.Batch(len(batch))
		} else {
			enc.b = append(enc.b, batch[0].body...)
		}
		if err := conn.writeFrame(enc.b, time.Now().Add(p.node.cfg.CallTimeout)); err != nil {
			return err
		}
	}
}

// nextFrame takes from the queue the calls of the next frame to send, and
// moves them to pending under a new frame ID, id. It returns a nil
// batch when there is none to send now; waiting then says that takes wait
// for the frame in flight (or for lingered, which sends them anyway).
// Calls whose outcome is settled already (they timed out) are dropped.
func (p *peer) nextFrame(lingered bool) (kind byte, id uint32, batch []*call, waiting bool) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if skip := p.settled(); skip > 0 {
		rest := copy(p.queued, p.queued[skip:])
		clear(p.queued[rest:])
		p.queued = p.queued[:rest]
	}
	q := p.queued
	if len(q) == 0 {
		return 0, 0, nil, false
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
			return 0, 0, nil, true
		}
		kind, n = msgTake, takes
	}
	batch = make([]*call, 0, n)
	for _, c := range q[:n] {
		if c.state.Load() == callPending {
			batch = append(batch, c)
		}
	}
	rest := copy(p.queued, q[n:])
	clear(p.queued[rest:])
	p.queued = p.queued[:rest]
	if kind == msgTake {
		p.takesInFlight.Add(1)
	}
	p.mu.Lock()
	p.nextID++
	id = p.nextID
	p.pending[id] = batch
	p.mu.Unlock()
	return kind, id, batch, false
}

// settled counts the calls at the head of the queue whose outcome is
// settled (they timed out); the queue's lock is held.
func (p *peer) settled() int {
	n := 0
	for n < len(p.queued) && p.queued[n].state.Load() != callPending {
		n++
	}
	return n
}

// read delivers replies until the connection fails.
func (p *peer) read(conn *secureConn) error {
	var buf []byte
	for {
		frame, err := conn.readFrame(buf)
		if err != nil {
			return err
		}
		buf = frame[:cap(frame)]
		p.heard.Store(clock())
		d := &decoder{b: frame}
		kind, id, status := d.u8(), d.u32(), d.u8()
		if d.err != nil || kind&replyBit == 0 {
			return fmt.Errorf("malformed reply")
		}
		if kind&^replyBit == msgTake {
			p.takesInFlight.Add(-1)
			signal(p.replied)
		}
		p.mu.Lock()
		batch := p.pending[id]
		delete(p.pending, id)
		p.mu.Unlock()
		if batch == nil {
			continue // calls that were failed already
		}
		// The breaker is closed by callers, which know whether the owner
		// has heard of what was counted while it was open.
		if status != statusOK {
			err := fmt.Errorf("peer %s: %s", p.member.Name, d.str())
			for _, c := range batch {
				c.fail(err)
			}
			continue
		}
		if kind&^replyBit != msgTake {
			if c := batch[0]; c.begin() {
				c.reply = append([]byte(nil), d.b...)
				c.end()
			}
			continue
		}
		if n := d.u16(); n != len(batch) {
			return fmt.Errorf("reply of %d items to a batch of %d", n, len(batch))
		}
		for _, c := range batch {
			late, err := readItem(d, c)
			if err != nil {
				return err
			}
			if late {
				p.giveBack(c) // its caller gave up and decided it in fallback
			}
		}
	}
}

// readItem reads one item of a take reply into c, if its caller still
// waits for it, or past it. late reports an admission whose caller had
// given up on it.
func readItem(d *decoder, c *call) (late bool, err error) {
	if d.u8() == itemMoved {
		moved := d.str()
		if d.err == nil && c.begin() {
			c.moved = moved
			c.end()
		}
		return false, d.err
	}
	allowed := d.u8() == 1
	score := float64(math.Float32frombits(d.u32()))
	n := int(d.u8())
	if n > maxZones || n*zoneResSize > len(d.b) {
		return false, fmt.Errorf("reply of %d zones", n)
	}
	if !c.begin() {
		d.take(n * zoneResSize) // it timed out
		return allowed && d.err == nil, d.err
	}
	c.allowed, c.score = allowed, score
	for i := range n {
		r := decodeZoneRes(d)
		if i < len(c.res) {
			c.res[i] = r
		}
	}
	c.end()
	return false, d.err
}

// failPending fails every call that waits for a reply or to be sent;
// final (the peer stops) refuses calls from then on.
func (p *peer) failPending(err error, final bool) {
	p.mu.Lock()
	pending := p.pending
	p.pending = make(map[uint32][]*call)
	p.mu.Unlock()
	for _, batch := range pending {
		for _, c := range batch {
			c.fail(err)
		}
	}
	p.qmu.Lock()
	queued := p.queued
	p.queued = nil
	p.qclosed = p.qclosed || final
	p.qmu.Unlock()
	for _, c := range queued {
		c.fail(err)
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
