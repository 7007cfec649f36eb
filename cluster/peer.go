package cluster

import (
	"errors"
	"fmt"
	"math"
	"net"
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

	allowed bool
	score   float64 // the client's reputation, for msgTake
	moved   string  // for msgTake: the owner the peer points to
	reply   []byte  // for other kinds: the reply body
	err     error

	state atomic.Int32 // callPending, callFilling, callDone or callAbandoned
	done  chan struct{}
}

const (
	callPending int32 = iota
	callFilling
	callDone
	callAbandoned
)

func newCall(kind byte) *call {
	return &call{kind: kind, done: make(chan struct{})}
}

// newTakeCall makes a take item: a on reqs for client, with the results
// to be written to res. The requests are encoded now, by the caller: the
// caller may reuse their memory as soon as the call returns, even if it
// gave up while the writer was still batching it.
func newTakeCall(a action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) *call {
	c := &call{kind: msgTake, res: res, done: make(chan struct{})}
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

// finish completes c unless its caller has given up on it; fill writes
// the results while the caller is still waiting. It reports whether the
// caller was still waiting.
func (c *call) finish(fill func(*call)) bool {
	if !c.state.CompareAndSwap(callPending, callFilling) {
		return false
	}
	fill(c)
	c.state.Store(callDone)
	close(c.done)
	return true
}

// peer is this node's client of one other node: a persistent connection
// whose writer batches concurrent take calls into one frame, whose reader
// matches replies to calls, and a breaker that keeps calls away after a
// failure.
type peer struct {
	node   *Node
	member Member
	queue  chan *call

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

	stop chan struct{}
	done chan struct{}
}

// queueDepth bounds the calls waiting for the writer: beyond it, callers
// wait (until their deadline) rather than grow memory.
const queueDepth = 4096

func newPeer(n *Node, m Member) *peer {
	p := &peer{
		node:    n,
		member:  m,
		queue:   make(chan *call, queueDepth),
		pending: make(map[uint32][]*call),
		replied: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go p.run()
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
}

// do sends c and waits for its reply until deadline.
func (p *peer) do(c *call, deadline time.Time) error {
	if !p.connected.Load() {
		return errUnavailable
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case p.queue <- c:
	case <-t.C:
		return errTimeout
	case <-p.stop:
		return errClosed
	}
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		if c.state.CompareAndSwap(callPending, callAbandoned) {
			return errTimeout
		}
		<-c.done // the reply is being written: it is moments away
		return c.err
	}
}

// run keeps a connection to the peer, redialling with the breaker's
// backoff after failures.
func (p *peer) run() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			p.failPending(errClosed)
			return
		default:
		}
		conn, err := p.dial()
		if err != nil {
			p.noteFailure(fmt.Errorf("connecting: %w", err))
			if !p.sleep(p.retryIn()) {
				p.failPending(errClosed)
				return
			}
			continue
		}
		p.mu.Lock()
		p.conn = conn
		p.mu.Unlock()
		p.connected.Store(true)
		readerDone := make(chan error, 1)
		go func() { readerDone <- p.read(conn) }()
		err = p.write(conn, readerDone)
		p.connected.Store(false)
		p.takesInFlight.Store(0)
		conn.Close()
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		p.failPending(errClosed)
		select {
		case <-p.stop:
			return
		default:
		}
		p.noteFailure(err)
		if !p.sleep(p.retryIn()) {
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
		p.node.fallbackActivations.Add(1)
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
// most one round trip or batchLinger.
const (
	maxTakeFramesInFlight = 1
	batchLinger           = 200 * time.Microsecond
)

// write sends queued calls until the connection fails or the peer stops.
// Take calls waiting together go out as one frame.
func (p *peer) write(conn *secureConn, readerDone <-chan error) error {
	var carry *call
	enc := &encoder{}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		c := carry
		carry = nil
		if c == nil {
			select {
			case c = <-p.queue:
			case err := <-readerDone:
				return err
			case <-p.stop:
				return errClosed
			}
		}
		if c.state.Load() != callPending {
			continue // its caller gave up before it was sent
		}
		batch := []*call{c}
		if c.kind == msgTake {
			busy := p.takesInFlight.Load() >= maxTakeFramesInFlight
			if busy {
				linger.Reset(batchLinger)
			}
		collect:
			for len(batch) < maxBatch && carry == nil {
				if !busy {
					// Drain what is already queued, without waiting.
					select {
					case next := <-p.queue:
						carry = p.addToBatch(&batch, next)
						continue
					default:
						break collect
					}
				}
				select {
				case next := <-p.queue:
					carry = p.addToBatch(&batch, next)
				case <-p.replied:
					busy = p.takesInFlight.Load() >= maxTakeFramesInFlight
				case <-linger.C:
					busy = false
				case err := <-readerDone:
					return err
				case <-p.stop:
					return errClosed
				}
			}
			if !linger.Stop() {
				select {
				case <-linger.C:
				default:
				}
			}
		}
		p.mu.Lock()
		p.nextID++
		id := p.nextID
		p.pending[id] = batch
		p.mu.Unlock()

		enc.b = enc.b[:0]
		enc.u8(c.kind)
		enc.u32(id)
		if c.kind == msgTake {
			enc.u16(len(batch))
			for _, b := range batch {
				enc.b = append(enc.b, b.item...)
			}
			p.frames.Add(1)
			p.items.Add(uint64(len(batch)))
			p.node.cfg.Observer.Batch(len(batch))
			p.takesInFlight.Add(1)
		} else {
			enc.b = append(enc.b, c.body...)
		}
		if err := conn.writeFrame(enc.b, time.Now().Add(p.node.cfg.CallTimeout)); err != nil {
			return err
		}
	}
}

// addToBatch adds a queued call to a take batch, or returns it to be sent
// on its own after the batch.
func (p *peer) addToBatch(batch *[]*call, next *call) (carry *call) {
	if next.kind != msgTake {
		return next
	}
	if next.state.Load() == callPending {
		*batch = append(*batch, next)
	}
	return nil
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
			select {
			case p.replied <- struct{}{}:
			default:
			}
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
			msg := d.str()
			for _, c := range batch {
				c.finish(func(c *call) { c.err = fmt.Errorf("peer %s: %s", p.member.Name, msg) })
			}
			continue
		}
		if kind&^replyBit != msgTake {
			body := append([]byte(nil), d.b...)
			batch[0].finish(func(c *call) { c.reply = body })
			continue
		}
		if n := d.u16(); n != len(batch) {
			return fmt.Errorf("reply of %d items to a batch of %d", n, len(batch))
		}
		for _, c := range batch {
			outcome := d.u8()
			switch outcome {
			case itemMoved:
				moved := d.str()
				c.finish(func(c *call) { c.moved = moved })
			default:
				allowed := d.u8() == 1
				score := float64(math.Float32frombits(d.u32()))
				n := int(d.u8())
				res := make([]limiter.Result, n)
				for i := range res {
					res[i] = decodeZoneRes(d)
				}
				if d.err != nil {
					return d.err
				}
				if !c.finish(func(c *call) {
					c.allowed, c.score = allowed, score
					copy(c.res, res)
				}) && allowed {
					p.giveBack(c) // its caller decided it in fallback
				}
			}
		}
	}
}

// failPending fails every call that waits for a reply.
func (p *peer) failPending(err error) {
	p.mu.Lock()
	pending := p.pending
	p.pending = make(map[uint32][]*call)
	p.mu.Unlock()
	for _, batch := range pending {
		for _, c := range batch {
			c.finish(func(c *call) { c.err = err })
		}
	}
	for {
		select {
		case c := <-p.queue:
			c.finish(func(c *call) { c.err = err })
		default:
			return
		}
	}
}
