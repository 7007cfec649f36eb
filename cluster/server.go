package cluster

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// The transport's server side: it accepts peer connections, authenticates
// them, and answers each frame through the handler of its kind. Frames of
// one connection are read in order; their replies are written under the
// connection's write lock, since a take item held for keys on their way
// here is answered later, from another goroutine.

// handler answers one request frame. It writes the reply's body (after the
// status byte, which is written for it) to enc and reports whether there
// is a reply at all; an error becomes an error reply.
type handler func(n *Node, sc *serverConn, id uint32, d *decoder, enc *encoder) (reply bool, err error)

// handlers answers each kind of request, by its kind byte.
var handlers [128]handler

func init() {
	handlers[msgTake] = (*Node).serveTakes
	for _, k := range []byte{msgTransfer, msgAck, msgPull, msgSeal, msgPing, msgScore} {
		handlers[k] = (*Node).handleCore
	}
	handlers[msgReset] = (*Node).handleReset
	handlers[msgForget] = (*Node).handleForget
	for k := msgGrantPut; k <= msgGather; k++ {
		handlers[k] = (*Node).handleQuery
	}
}

// serverConn is one authenticated connection from a peer's run.
type serverConn struct {
	conn *secureConn
	from core.Peer

	wmu  sync.Mutex // serializes writes: held items are answered later
	enc  encoder    // the reply being built by the reader (reader only)
	reqs [maxZones]limiter.Request
	res  [maxZones]limiter.Result
}

// reply writes one reply frame.
func (sc *serverConn) reply(frame []byte) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	return sc.conn.writeFrame(frame, time.Now().Add(writeTimeout))
}

// serve accepts peer connections until the node stops.
func (n *Node) serve() {
	defer n.wg.Done()
	for {
		conn, err := n.listener.Accept()
		if err != nil {
			select {
			case <-n.stop:
				return
			default:
			}
			n.log.Warn("accepting peer connection", "error", err.Error())
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !n.handshakes.enter() {
			n.handshakes.note(n.log, slog.LevelWarn, "refusing peer connections: too many handshakes under way", conn.RemoteAddr().String(), time.Now(), "max", maxHandshakes)
			conn.Close()
			continue
		}
		n.wg.Add(1)
		go n.serveConn(conn)
	}
}

// serveConn authenticates one peer connection and answers its frames in
// order until it closes. Anything that fails authentication is dropped
// before a single frame is read.
func (n *Node) serveConn(raw net.Conn) {
	defer n.wg.Done()
	labelGoroutine(n.Name(), "peer-server")
	defer raw.Close()
	conn, from, err := serverHandshake(raw, n.authKey, time.Now().Add(handshakeTimeout))
	n.handshakes.leave()
	if err != nil {
		var v VersionError
		switch {
		case errors.As(err, &v):
			n.handshakes.note(n.log, slog.LevelError, "refusing peer connections with another protocol version", raw.RemoteAddr().String(), time.Now(), "ours", v.Ours, "theirs", v.Theirs)
		case errors.Is(err, errAuth):
			n.handshakes.note(n.log, slog.LevelWarn, "refusing peer connections that failed authentication", raw.RemoteAddr().String(), time.Now())
		}
		return
	}
	sc := &serverConn{conn: conn, from: from}
	// The node's stop closes the connection; the watcher ends with it.
	closed := make(chan struct{})
	defer close(closed)
	go func() {
		select {
		case <-n.stop:
			conn.Close()
		case <-closed:
		}
	}()
	defer n.held.dropConn(sc)
	var buf []byte
	for {
		frame, err := conn.readFrame(buf)
		if err != nil {
			return
		}
		buf = frame[:cap(frame)]
		d := &decoder{b: frame}
		kind, id := d.u8(), d.u32()
		enc := &sc.enc
		enc.b = enc.b[:0]
		enc.u8(kind | replyBit)
		enc.u32(id)
		enc.u8(statusOK)
		var h handler
		if d.err == nil && int(kind) < len(handlers) {
			h = handlers[kind]
		}
		reply, err := true, errUnknownKind
		if h != nil {
			reply, err = h(n, sc, id, d, enc)
		}
		if err != nil {
			enc.b = enc.b[:5]
			enc.u8(statusErr)
			enc.str(err.Error())
			reply = true
		}
		if reply {
			if err := sc.reply(enc.b); err != nil {
				return
			}
		}
	}
}

// serveTakes serves a frame of take items: those decided now are answered
// in this reply, each with its position in the frame; those whose keys are
// on their way here are held and answered in a later frame (see heldItems).
func (n *Node) serveTakes(sc *serverConn, id uint32, d *decoder, enc *encoder) (bool, error) {
	c := n.core()
	count := d.count(maxBatch, takeItemHead)
	if d.err != nil {
		return true, d.err
	}
	countAt := len(enc.b)
	enc.u16(0)
	answered := 0
	now := time.Now()
	hold := now.Add(n.cfg.CallTimeout)
	// The frame's items are served under one hold of the core's lock: each
	// is still served whole by one membership.
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	for i := range count {
		item, err := decodeTakeItem(d, sc.reqs[:0])
		if err != nil {
			return true, err
		}
		res := sc.res[:len(item.Reqs)]
		r, wait := c.Serve(now, sc.from, &item, res, hold)
		if wait {
			item.Reqs = slices.Clone(item.Reqs)
			n.held.add(&heldItem{sc: sc, id: id, index: i, item: item, res: make([]limiter.Result, len(item.Reqs)), hold: hold})
			continue
		}
		enc.u16(i)
		encodeItemReply(enc, &r)
		answered++
	}
	enc.b[countAt] = byte(answered)
	enc.b[countAt+1] = byte(answered >> 8)
	return true, nil
}

// handleCore hands a core message to the core and replies with its
// answer; an Ack gets none.
func (n *Node) handleCore(sc *serverConn, id uint32, d *decoder, enc *encoder) (bool, error) {
	kind := enc.b[0] &^ replyBit
	msg, err := decodeRequest(kind, d)
	if err != nil {
		return kind != msgAck, err
	}
	n.coreMu.RLock()
	reply := n.core().Handle(time.Now(), sc.from, msg)
	n.coreMu.RUnlock()
	if kind == msgAck || reply == nil {
		return false, nil
	}
	encodeMessage(enc, reply)
	return true, nil
}

// handleReset drops keys everywhere on this node: the counters it owns,
// what it counted for them in fallback, replicas, and what it heard.
func (n *Node) handleReset(sc *serverConn, id uint32, d *decoder, enc *encoder) (bool, error) {
	keys := decodeKeys(d)
	if d.err != nil {
		return true, d.err
	}
	n.core().ResetLocal(keys...)
	return true, nil
}

// handleForget drops keys from what this node heard of their owners.
func (n *Node) handleForget(sc *serverConn, id uint32, d *decoder, enc *encoder) (bool, error) {
	keys := decodeKeys(d)
	if d.err != nil {
		return true, d.err
	}
	n.core().Forget(keys...)
	return true, nil
}

// handleQuery answers a query about this node's keys (grants, leases,
// reputation, gather).
func (n *Node) handleQuery(sc *serverConn, id uint32, d *decoder, enc *encoder) (bool, error) {
	return true, n.query(enc.b[0]&^replyBit, d, enc)
}

// heldItem is a take item an owner holds while the counts of its keys are
// on their way here: it is served again when the core says keys settled,
// or at its hold time (when the core answers it NotYetMine).
type heldItem struct {
	sc    *serverConn
	id    uint32
	index int
	item  core.TakeItem
	res   []limiter.Result
	hold  time.Time
}

// heldItems are the take items held on this node. It is safe for
// concurrent use.
type heldItems struct {
	mu    sync.Mutex
	items []*heldItem
}

func (h *heldItems) add(it *heldItem) {
	h.mu.Lock()
	h.items = append(h.items, it)
	h.mu.Unlock()
}

func (h *heldItems) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.items)
}

// takeAll removes and returns the held items.
func (h *heldItems) takeAll() []*heldItem {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.items
	h.items = nil
	return out
}

// dropConn forgets the items held for a connection that closed: their
// callers see the call fail.
func (h *heldItems) dropConn(sc *serverConn) {
	h.mu.Lock()
	h.items = slices.DeleteFunc(h.items, func(it *heldItem) bool { return it.sc == sc })
	h.mu.Unlock()
}

// serveHeld serves the held items again: those the core decides now (or
// whose hold time passed) are answered, the others held on.
func (n *Node) serveHeld(now time.Time) {
	c := n.core()
	var keep []*heldItem
	enc := &encoder{}
	for _, it := range n.held.takeAll() {
		n.coreMu.RLock()
		r, wait := c.Serve(now, it.sc.from, &it.item, it.res, it.hold)
		n.coreMu.RUnlock()
		if wait {
			keep = append(keep, it)
			continue
		}
		enc.b = enc.b[:0]
		enc.u8(msgTake | replyBit)
		enc.u32(it.id)
		enc.u8(statusOK)
		enc.u16(1)
		enc.u16(it.index)
		encodeItemReply(enc, &r)
		it.sc.reply(enc.b) // a failed write closes the connection; its reader ends
	}
	for _, it := range keep {
		n.held.add(it)
	}
}

// dueHeld reports whether a held item's hold time has passed.
func (h *heldItems) due(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range h.items {
		if !now.Before(it.hold) {
			return true
		}
	}
	return false
}
