package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

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
	labelGoroutine(n.name, "peer-server")
	defer raw.Close()
	conn, err := serverHandshake(raw, n.authKey, time.Now().Add(handshakeTimeout))
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
	var buf []byte
	enc := &encoder{}
	for {
		frame, err := conn.readFrame(buf)
		if err != nil {
			return
		}
		buf = frame[:cap(frame)]
		d := &decoder{b: frame}
		kind, id := d.u8(), d.u32()
		enc.b = enc.b[:0]
		enc.u8(kind | replyBit)
		enc.u32(id)
		if err := n.handle(kind, d, enc); err != nil {
			enc.b = enc.b[:5]
			enc.u8(statusErr)
			msg := err.Error()
			enc.str(msg[:min(len(msg), maxNameBytes)])
		}
		if err := conn.writeFrame(enc.b, time.Now().Add(2*time.Second)); err != nil {
			return
		}
	}
}

// handle answers one request; it writes the status and body of the reply.
func (n *Node) handle(kind byte, d *decoder, enc *encoder) error {
	now := time.Now()
	switch kind {
	case msgTake:
		var unpulled []limiter.Key // moved here, not held: not counted
		if st := n.state.Load(); n.pulling(st, now) {
			unpulled = n.pullFrame(st, now, *d)
		}
		count := d.count(maxBatch, 2)
		if d.err != nil {
			return d.err
		}
		enc.u8(statusOK)
		enc.u16(count)
		var reqs [maxZones]limiter.Request
		var res [maxZones]limiter.Result
		for range count {
			code, client, zones := d.u8(), limiter.Key(d.u64()), int(d.u8())
			op, known := actionOf(code)
			if !known && d.err == nil {
				return fmt.Errorf("unknown take operation %d", code)
			}
			if op == actPenalize && zones == 0 {
				score := n.engine.Penalize(now, client)
				enc.u8(itemDone)
				enc.u8(0)
				enc.u32(math.Float32bits(float32(score)))
				enc.u8(0)
				continue
			}
			if zones == 0 || zones > maxZones || zones*zoneReqSize > len(d.b) {
				return errors.New("bad zone count")
			}
			for i := range zones {
				r, err := decodeZoneReq(d)
				if err != nil {
					return err
				}
				reqs[i] = r
			}
			if len(unpulled) > 0 && slices.ContainsFunc(reqs[:zones], func(r limiter.Request) bool { return slices.Contains(unpulled, r.Key) }) {
				enc.u8(itemMoved) // to nobody: the caller decides by fallback
				enc.str("")
				continue
			}
			n.answerItem(now, op, client, reqs[:zones], res[:zones], enc)
		}
		return d.err
	case msgTransfer, msgPull:
		var to string
		if kind == msgPull {
			to = d.str()
		}
		keys := decodeKeys(d)
		if d.err != nil {
			return d.err
		}
		// A push of these keys under way lands first: the puller has them
		// then, and this answer holds nothing of them.
		complete := n.sending.wait(keys, now.Add(n.cfg.CallTimeout/2))
		states := append(n.engine.ExtractKeys(now, keys), n.transit.take(keys)...)
		n.lend(to, keys)
		enc.u8(statusOK)
		encodeStates(enc, states)
		if kind == msgPull {
			enc.u8(boolByte(complete))
		}
		return nil
	case msgHandoff:
		states := decodeStates(d)
		if d.err != nil {
			return d.err
		}
		n.engine.Merge(now, states)
		n.dirty.noteStates(states)
		n.stats.handedOff.Add(uint64(len(states)))
		enc.u8(statusOK)
		return nil
	case msgReset:
		keys := decodeKeys(d)
		if d.err != nil {
			return d.err
		}
		n.engine.Reset(keys...)
		n.fallback.Reset(keys...) // what it counted for an owner it could not reach
		n.replicas.drop(keys)
		n.Forget(keys...)
		enc.u8(statusOK)
		return nil
	case msgPing:
		enc.u8(statusOK)
		return nil
	case msgReconcile:
		origin, seq := d.str(), d.u64()
		states := decodeStates(d)
		if d.err != nil {
			return d.err
		}
		n.applyReconcile(now, origin, seq, states)
		n.dirty.noteStates(states)
		enc.u8(statusOK)
		return nil
	case msgFallbackTransfer:
		to := d.str()
		keys := decodeKeys(d)
		if d.err != nil {
			return d.err
		}
		st := n.state.Load()
		states := n.fallback.ExtractKeys(now, keys)
		for _, k := range keys {
			if owner, _ := st.ring.Owner(k.Route()); owner.Name != to && owner.Name != n.name {
				st.redirect.Store(k, to)
			}
		}
		enc.u8(statusOK)
		encodeStates(enc, states)
		return nil
	case msgRestore:
		states := decodeStates(d)
		if d.err != nil {
			return d.err
		}
		n.applyRestore(now, states)
		enc.u8(statusOK)
		return nil
	case msgReplicate:
		states := decodeStates(d)
		if d.err != nil {
			return d.err
		}
		n.replicas.put(now, states)
		enc.u8(statusOK)
		return nil
	case msgForget:
		keys := decodeKeys(d)
		if d.err != nil {
			return d.err
		}
		n.Forget(keys...)
		enc.u8(statusOK)
		return nil
	}
	if kind >= msgGrantPut && kind <= msgGather {
		enc.u8(statusOK)
		return n.query(kind, d, enc)
	}
	return errors.New("unknown message type")
}

// pullFrame pulls, before a take frame is answered, the keys of all its
// items that moved here: one call per node that may hold any, at once.
func (n *Node) pullFrame(st *ringState, now time.Time, d decoder) []limiter.Key {
	count := d.count(maxBatch, 2)
	var keys []limiter.Key
	for range count {
		d.u8()
		client, zones := limiter.Key(d.u64()), int(d.u8())
		if client != 0 {
			keys = append(keys, client)
		}
		for range zones {
			r, err := decodeZoneReq(&d)
			if err != nil {
				return nil
			}
			keys = append(keys, r.Key)
		}
	}
	if d.err == nil && len(keys) > 0 {
		return n.pullKeys(st, now, keys)
	}
	return nil
}

// answerItem performs one take item for a peer, if this node owns its
// keys, or names the owner.
func (n *Node) answerItem(now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result, enc *encoder) {
	st := n.state.Load()
	owning := n.owning()
	for i := range reqs {
		owner, _ := st.ring.Owner(reqs[i].Key.Route())
		if owner.Name == n.name && !owning {
			// Joining again: the node that counted it meanwhile, if any.
			owner, _ = st.ring.Successor(reqs[i].Key.Route())
		}
		if to, lent := n.lentTo(st, owner, reqs[i].Key); lent {
			owner = to
		}
		if owner.Name != n.name || n.leaving.Load() {
			enc.u8(itemMoved)
			enc.str(owner.Name)
			return
		}
	}
	if client != 0 {
		if owner, _ := st.ring.Owner(client.Route()); owner.Name != n.name {
			client = 0 // not ours to keep
		}
	}
	// pullFrame pulled the frame's keys, by the ring of its time; this ring
	// may be newer: a key not held by it is not counted.
	if !n.pullMissing(st, now, reqs, client) {
		enc.u8(itemMoved) // to nobody: the caller decides by fallback
		enc.str("")
		return
	}
	allowed, score := n.local(now, op, client, reqs, res)
	enc.u8(itemDone)
	enc.u8(boolByte(allowed))
	enc.u32(math.Float32bits(float32(score)))
	enc.u8(byte(len(res)))
	for i := range res {
		encodeZoneRes(enc, &res[i])
	}
}
