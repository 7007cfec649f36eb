package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// ProtocolVersion is the version of the peer protocol and of the node
// metadata. Nodes of different versions refuse each other, with a log line
// naming the peer and both versions. Version 3 carries the messages of the
// cluster's core (numbered, acknowledged transfers; typed replies to take
// items; pulls, seals, pings and score queries), names the caller's run in
// the handshake, and the run's incarnation in the metadata. Version 4
// carries what settles a request after its response (refunds counted at an
// instant, charges), a request's longest wait and the wait and next-quota
// time of its result, and calendar windows. Version 5 says in a ping
// whether the asker counts keys (a node declared dead and joining again
// does not). Version 6 names, in a transfer of counters handed over, the
// run whose counters they are, also where they are passed on. Version 7
// names, in a pull, the run asked, and with counters the other runs'
// counts they hold; it repeats, in a transfer of what a node admitted in
// fallback, the cancels of take items it has not had acknowledged; and it
// lists, with a snapshot's copies, the transfers their run had applied;
// and it names, with counts sent again in place of a transfer, who sent
// that transfer and every transfer it replaced in turn. Version 8 says
// which counters are their run's last word on them (handed over by it,
// or sent as it stopped counting), where they are passed on
// (Transfer.Last) and in the records of the counts a counter holds
// (Held.Last): a node of version 7 would weigh them as copies, and count
// again units given back. It also lists, in a pull's reply, the keys the
// source holds nothing of while it knew an earlier run of the puller
// (PullReply.Earlier): their replicas may be on their way from elsewhere.
// Version 9 says, in the cancels a transfer repeats or passes on
// (Transfer.Cancels, Taken.Waiting), when their take items were sent
// (Cancel.At): their units come out of that window, however late the
// cancel arrives. Version 10 names, in a seal query, the run asked
// (SealQuery.To): a later run of a leaving node, restarted at its address,
// answered for the leaving run, and completed a leave the run had not.
// Version 11 names, in the records a counter carries of transfers sent
// again in place of transfers to runs taken for dead (Transfer.Resent),
// the units it lacks that were given back again (Resent.Given): a node of
// version 10 would read them as counts.
// It also sends a run's counter, sent as it stopped counting, on as a
// copy naming its run that is its last word (ModeCopy with CountersOf and
// Last), where a copy naming no run went ahead of it: weighed where a
// record of the run's counter is held, a copy elsewhere. A node of
// version 10 would weigh it as a snapshot's copy naming its run, and add
// it whole where no record is held.
// Version 12 says, in the records of the runs' counts a counter holds,
// what the counter holds of each it holds less of (Held.In: units given
// back to it took it below the copy): a node of version 11 would read
// the transfer short, and one that dropped it would take the counter for
// holding the whole copy, and add nothing of what it admitted beyond.
const ProtocolVersion = 12

// Frames. A request frame is [kind][call ID u32][body]; its reply is
// [kind|replyBit][call ID][status][body]. A take frame carries many take
// items; its reply carries the answers of those decided at once, each with
// its position in the frame, and the owner sends the answers of items it
// holds (their counts are on their way to it) in later reply frames with
// the same ID. An Ack gets no reply.
const (
	msgTake     byte = 1 // take items (core.TakeItem), batched
	msgTransfer byte = 2 // core.Transfer → core.Ack
	msgAck      byte = 3 // core.Ack of a transfer given in a pull's reply; no reply
	msgPull     byte = 4 // core.Pull → core.PullReply
	msgSeal     byte = 5 // core.SealQuery → core.SealReply
	msgPing     byte = 6 // core.Ping → core.Pong
	msgScore    byte = 7 // core.ScoreQuery → core.ScoreReply
	msgReset    byte = 8 // drop these keys everywhere on the node
	msgForget   byte = 9 // drop these keys from what the node heard of owners
	replyBit    byte = 0x80
)

// Reply statuses.
const (
	statusOK  byte = 0
	statusErr byte = 1
)

// Limits that keep a peer from making us allocate without bound. A
// transfer carries every counter of one hand-off in one frame, so frames
// are large enough for a hand-off of a big engine.
const (
	maxFrame     = 64 << 20
	maxBatch     = 512 // items per take frame
	maxZones     = 64  // zone requests per item
	maxStates    = 1 << 20
	maxList      = 1 << 16                               // entries of other lists (keys, applied transfers, moved keys)
	zoneReqSize  = 8 + 8 + 1 + 4 + 8 + 4 + 4 + 8 + 8 + 1 // the least: a calendar's zone name adds to it
	zoneResSize  = 1 + 8 + 8 + 8 + 8 + 8
	maxNameBytes = 255
)

var errShort = errors.New("truncated message")

// encoder appends little-endian values.
type encoder struct{ b []byte }

func (e *encoder) u8(v byte)    { e.b = append(e.b, v) }
func (e *encoder) u16(v int)    { e.b = binary.LittleEndian.AppendUint16(e.b, uint16(v)) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) {
	s = s[:min(len(s), maxNameBytes)]
	e.u8(byte(len(s)))
	e.b = append(e.b, s...)
}
func (e *encoder) f64(v float64) { e.u64(math.Float64bits(v)) }
func (e *encoder) flag(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// decoder reads little-endian values; a read past the end sets err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n > len(d.b) || n < 0 {
		if d.err == nil {
			d.err = errShort // the first error stands: it says what was wrong
		}
		return make([]byte, max(n, 0))
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
func (d *decoder) u8() byte     { return d.take(1)[0] }
func (d *decoder) u16() int     { return int(binary.LittleEndian.Uint16(d.take(2))) }
func (d *decoder) u32() uint32  { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64  { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *decoder) str() string  { return string(d.take(int(d.u8()))) }
func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }
func (d *decoder) flag() bool   { return d.u8() != 0 }

// count32 reads a u32 count and checks it against a bound and what is left.
func (d *decoder) count32(bound, each int) int {
	n := int(d.u32())
	if n > bound || n*each > len(d.b) {
		d.err = fmt.Errorf("count %d exceeds the bound %d or the message", n, bound)
		return 0
	}
	return n
}

// count reads a u16 count and checks it against a bound and what is left.
func (d *decoder) count(bound, each int) int {
	n := d.u16()
	if n > bound || n*each > len(d.b) {
		d.err = fmt.Errorf("count %d exceeds the bound %d or the message", n, bound)
		return 0
	}
	return n
}

// AppendRequest appends r as the peer protocol writes a zone's request: a
// snapshot keeps the units given back again that its counters lack
// (Resent.Given) this way.
func AppendRequest(b []byte, r limiter.Request) []byte {
	e := &encoder{b: b}
	encodeZoneReq(e, &r)
	return e.b
}

// ReadRequest reads a request AppendRequest wrote, and returns what
// follows it. A request cut short, or out of range, is an error.
func ReadRequest(b []byte) (limiter.Request, []byte, error) {
	d := &decoder{b: b}
	r, err := decodeZoneReq(d)
	if err == nil {
		err = d.err
	}
	return r, d.b, err
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
	e.u64(uint64(max(r.MaxDelay, 0)))
	encodeCalendar(e, r.Limit.Calendar)
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
		Cost:     int64(d.u32()),
		LeaseID:  d.u64(),
		MaxDelay: time.Duration(d.u64()),
	}
	r.Limit.Calendar = decodeCalendar(d)
	if d.err != nil {
		return r, d.err
	}
	if r.MaxDelay < 0 || r.MaxDelay > limiter.MaxWindow {
		return r, fmt.Errorf("longest wait %d ns out of range (allowed: 0 to %s)", int64(r.MaxDelay), limiter.MaxWindow)
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
	e.u64(uint64(max(r.Delay, 0)))
	e.u64(uint64(max(r.Next, 0)))
}

// decodeZoneRes reads a zone's result; a wait or a next-quota time below
// zero is an error.
func decodeZoneRes(d *decoder) limiter.Result {
	r := limiter.Result{
		Allowed:    d.u8() == 1,
		Remaining:  int64(d.u64()),
		Reset:      time.Duration(d.u64()),
		RetryAfter: time.Duration(d.u64()),
		Delay:      time.Duration(d.u64()),
		Next:       time.Duration(d.u64()),
	}
	if d.err == nil && (r.Delay < 0 || r.Next < 0) {
		d.err = fmt.Errorf("result with a wait of %d ns and a next-quota time of %d ns: want neither below zero", int64(r.Delay), int64(r.Next))
	}
	return r
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
	e.u32(uint32(len(keys)))
	for _, k := range keys {
		e.u64(uint64(k))
	}
}

func decodeKeys(d *decoder) []limiter.Key {
	n := d.count32(maxList, 8)
	out := make([]limiter.Key, n)
	for i := range out {
		out[i] = limiter.Key(d.u64())
	}
	return out
}
