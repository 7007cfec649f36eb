package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// ProtocolVersion is the version of the peer protocol and of the node
// metadata. Nodes of different versions refuse each other. Version 2
// seals shared values with the cluster secret, adds the reconcile,
// replicate, fallback-transfer, restore and named pull messages and the
// joining flag, and carries reputation scores as float64.
const ProtocolVersion = 2

// Message types. A request frame is [type][call ID u32][body]; its reply
// is [type|replyBit][call ID][status][body].
const (
	msgTake     byte = 1 // a batch of take, peek or refund items
	msgTransfer byte = 2 // give me these keys' counters (and forget them)
	msgHandoff  byte = 3 // here are counters you own now
	msgReset    byte = 4 // drop these keys' counters
	msgForget   byte = 5 // drop these keys from your blocked cache
	msgPing     byte = 6 // are you there?
	// msgReconcile: here is what I counted in fallback for keys you own
	// (origin name, sequence number, counters); add it unless you have.
	msgReconcile byte = 7
	// msgReplicate: the current counters of keys you succeed me for.
	msgReplicate byte = 8
	// msgFallbackTransfer: I own these keys now (the owner died); give me
	// what you counted for them in fallback, and route them to me.
	msgFallbackTransfer byte = 9
	replyBit            byte = 0x80
)

// Reply statuses.
const (
	statusOK  byte = 0
	statusErr byte = 1
)

// Item operations in a take batch: the wire codes of the node's actions.
const (
	opTake     byte = 1
	opPeek     byte = 2
	opRefund   byte = 3
	opPenalize byte = 4 // no zones
)

// opOf returns the wire code of an action.
func opOf(a action) byte {
	switch a {
	case actPeek:
		return opPeek
	case actRefund:
		return opRefund
	case actPenalize:
		return opPenalize
	}
	return opTake
}

// actionOf returns the action a wire code names, if it names one.
func actionOf(op byte) (action, bool) {
	switch op {
	case opTake:
		return actTake, true
	case opPeek:
		return actPeek, true
	case opRefund:
		return actRefund, true
	case opPenalize:
		return actPenalize, true
	}
	return 0, false
}

// Item outcomes in a take batch reply.
const (
	itemDone  byte = 0 // results follow
	itemMoved byte = 1 // not the owner: the owner's name follows
)

// Limits that keep a peer from making us allocate without bound.
const (
	maxFrame     = 4 << 20
	maxBatch     = 512 // items per take frame
	maxZones     = 64  // zone requests per item
	maxStates    = 8192
	zoneReqSize  = 8 + 8 + 1 + 4 + 8 + 4 + 4 + 8
	zoneResSize  = 1 + 8 + 8 + 8
	maxNameBytes = 255
)

var errShort = errors.New("truncated message")

// encoder appends little-endian values.
type encoder struct{ b []byte }

func (e *encoder) u8(v byte)    { e.b = append(e.b, v) }
func (e *encoder) u16(v int)    { e.b = binary.LittleEndian.AppendUint16(e.b, uint16(v)) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) { e.u8(byte(len(s))); e.b = append(e.b, s...) }

// decoder reads little-endian values; a read past the end sets err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n > len(d.b) || n < 0 {
		d.err = errShort
		return make([]byte, max(n, 0))
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
func (d *decoder) u8() byte    { return d.take(1)[0] }
func (d *decoder) u16() int    { return int(binary.LittleEndian.Uint16(d.take(2))) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *decoder) str() string { return string(d.take(int(d.u8()))) }

// count reads a u16 count and checks it against a bound and what is left.
func (d *decoder) count(bound, each int) int {
	n := d.u16()
	if n > bound || n*each > len(d.b) {
		d.err = fmt.Errorf("count %d exceeds the bound %d or the message", n, bound)
		return 0
	}
	return n
}

func encodeZoneReq(e *encoder, r *limiter.Request) {
	e.u64(uint64(r.Key))
	e.u64(r.Zone)
	e.u8(byte(r.Limit.Algorithm))
	e.u32(uint32(r.Limit.Quota))
	e.u64(uint64(r.Limit.Window))
	e.u32(uint32(r.Limit.Burst))
	e.u32(uint32(max(r.Cost, 0)))
	e.u64(r.LeaseID)
}

func decodeZoneReq(d *decoder) (limiter.Request, error) {
	r := limiter.Request{
		Key:  limiter.Key(d.u64()),
		Zone: d.u64(),
		Limit: limiter.Limit{
			Algorithm: limiter.Algorithm(d.u8()),
			Quota:     int64(d.u32()),
			Window:    time.Duration(d.u64()),
			Burst:     int64(d.u32()),
		},
		Cost:    int64(d.u32()),
		LeaseID: d.u64(),
	}
	if d.err != nil {
		return r, d.err
	}
	if err := r.Limit.Validate(); err != nil {
		return r, fmt.Errorf("invalid limit: %w", err)
	}
	return r, nil
}

func encodeZoneRes(e *encoder, r *limiter.Result) {
	if r.Allowed {
		e.u8(1)
	} else {
		e.u8(0)
	}
	e.u64(uint64(r.Remaining))
	e.u64(uint64(r.Reset))
	e.u64(uint64(r.RetryAfter))
}

func decodeZoneRes(d *decoder) limiter.Result {
	return limiter.Result{
		Allowed:    d.u8() == 1,
		Remaining:  int64(d.u64()),
		Reset:      time.Duration(d.u64()),
		RetryAfter: time.Duration(d.u64()),
	}
}

// encodeStates writes counters, grants and lease lists as they move
// between nodes, in the limiter's binary form.
func encodeStates(e *encoder, states []limiter.State) {
	e.b = limiter.AppendStates(e.b, states)
}

func decodeStates(d *decoder) []limiter.State {
	if d.err != nil {
		return nil
	}
	states, rest, err := limiter.DecodeStates(d.b, maxStates)
	d.b = rest
	if err != nil {
		d.err = err
	}
	return states
}

func encodeKeys(e *encoder, keys []limiter.Key) {
	e.u16(len(keys))
	for _, k := range keys {
		e.u64(uint64(k))
	}
}

func decodeKeys(d *decoder) []limiter.Key {
	n := d.count(maxStates, 8)
	out := make([]limiter.Key, n)
	for i := range out {
		out[i] = limiter.Key(d.u64())
	}
	return out
}
