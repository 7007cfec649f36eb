package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// The codec: the core's messages as bytes, and back. Each request kind has
// one reply type (see the msg constants); a decoded message is checked as
// far as its form goes (bounds, known modes and outcomes, valid limits),
// and the core judges what it means.

var errUnknownKind = errors.New("unknown message kind")

// kindOf returns the frame kind that carries msg.
func kindOf(msg core.Message) (byte, error) {
	switch msg.(type) {
	case core.TakeItem:
		return msgTake, nil
	case core.Transfer:
		return msgTransfer, nil
	case core.Ack:
		return msgAck, nil
	case core.Pull:
		return msgPull, nil
	case core.SealQuery:
		return msgSeal, nil
	case core.Ping:
		return msgPing, nil
	case core.ScoreQuery:
		return msgScore, nil
	}
	return 0, fmt.Errorf("no frame carries %T", msg)
}

// encodeMessage appends the body of a request or a reply.
func encodeMessage(e *encoder, msg core.Message) {
	switch m := msg.(type) {
	case core.TakeItem:
		encodeTakeItem(e, &m)
	case core.ItemReply:
		encodeItemReply(e, &m)
	case core.Transfer:
		encodeTransfer(e, &m)
	case core.Ack:
		e.u64(m.Seq)
		e.flag(m.Refused)
	case core.Pull:
		e.u64(m.To)
		encodeKeys(e, m.Keys)
	case core.PullReply:
		e.u32(uint32(len(m.Given)))
		for i := range m.Given {
			encodeTransfer(e, &m.Given[i])
		}
		e.u32(uint32(len(m.Moved)))
		for _, ko := range m.Moved {
			e.u64(uint64(ko.Key))
			e.str(ko.Owner)
		}
		e.flag(m.Refused)
		encodeUnreached(e, m.Unreached)
		encodeKeys(e, m.Sending)
		encodeKeys(e, m.Earlier)
	case core.SealQuery:
		e.str(m.Ring)
		e.u64(m.To)
	case core.SealReply:
		e.flag(m.Sealed)
		encodeUnreached(e, m.Unreached)
		e.u32(uint32(len(m.Moved)))
		for _, ko := range m.Moved {
			e.u64(uint64(ko.Key))
			e.str(ko.Owner)
		}
	case core.Ping:
		e.u64(m.Epoch)
		e.flag(m.Counting)
	case core.Pong:
		e.flag(m.Dead)
		e.u32(uint32(len(m.Owed)))
		for _, seq := range m.Owed {
			e.u64(seq)
		}
		e.flag(m.Recovering)
		e.u64(m.Run)
	case core.ScoreQuery:
		e.u64(uint64(m.Client))
	case core.ScoreReply:
		e.f64(m.Score)
	}
}

// decodeRequest decodes the body of a request of kind (not a take frame:
// see decodeTakeItem).
func decodeRequest(kind byte, d *decoder) (core.Message, error) {
	var msg core.Message
	switch kind {
	case msgTransfer:
		msg = decodeTransfer(d)
	case msgAck:
		msg = core.Ack{Seq: d.u64(), Refused: d.flag()}
	case msgPull:
		msg = core.Pull{To: d.u64(), Keys: decodeKeys(d)}
	case msgSeal:
		msg = core.SealQuery{Ring: d.str(), To: d.u64()}
	case msgPing:
		msg = core.Ping{Epoch: d.u64(), Counting: d.flag()}
	case msgScore:
		msg = core.ScoreQuery{Client: limiter.Key(d.u64())}
	default:
		return nil, errUnknownKind
	}
	return msg, d.err
}

// decodeReply decodes the reply to a request of kind.
func decodeReply(kind byte, d *decoder) (core.Message, error) {
	var msg core.Message
	switch kind {
	case msgTransfer:
		msg = core.Ack{Seq: d.u64(), Refused: d.flag()}
	case msgPull:
		var r core.PullReply
		n := d.count32(maxList, 8)
		for range n {
			r.Given = append(r.Given, decodeTransfer(d))
		}
		n = d.count32(maxList, 9)
		for range n {
			r.Moved = append(r.Moved, core.KeyOwner{Key: limiter.Key(d.u64()), Owner: d.str()})
		}
		r.Refused = d.flag()
		r.Unreached = decodeUnreached(d)
		r.Sending = decodeKeys(d)
		r.Earlier = decodeKeys(d)
		msg = r
	case msgSeal:
		r := core.SealReply{Sealed: d.flag()}
		r.Unreached = decodeUnreached(d)
		n := d.count32(maxList, 9)
		for range n {
			r.Moved = append(r.Moved, core.KeyOwner{Key: limiter.Key(d.u64()), Owner: d.str()})
		}
		msg = r
	case msgPing:
		pong := core.Pong{Dead: d.flag()}
		n := d.count32(maxList, 8)
		for range n {
			pong.Owed = append(pong.Owed, d.u64())
		}
		pong.Recovering = d.flag()
		pong.Run = d.u64()
		msg = pong
	case msgScore:
		msg = core.ScoreReply{Score: d.f64()}
	default:
		return nil, errUnknownKind
	}
	return msg, d.err
}

// Unreached gaps: count u32, then each: ring runs (count u32, name str |
// inc u64), dead runs (likewise), within i64 ns.
func encodeUnreached(e *encoder, us []core.Unreached) {
	e.u32(uint32(len(us)))
	for _, u := range us {
		encodePeers(e, u.Ring)
		encodePeers(e, u.Dead)
		e.u64(uint64(u.Within))
	}
}

func encodePeers(e *encoder, ps []core.Peer) {
	e.u32(uint32(len(ps)))
	for _, p := range ps {
		e.str(p.Name)
		e.u64(p.Inc)
	}
}

func decodeUnreached(d *decoder) []core.Unreached {
	n := d.count32(maxList, 4+4+8)
	var us []core.Unreached
	for range n {
		u := core.Unreached{Ring: decodePeers(d), Dead: decodePeers(d), Within: time.Duration(d.u64())}
		if d.err != nil {
			return nil
		}
		us = append(us, u)
	}
	return us
}

func decodePeers(d *decoder) []core.Peer {
	n := d.count32(maxList, 1+8)
	var ps []core.Peer
	for range n {
		ps = append(ps, core.Peer{Name: d.str(), Inc: d.u64()})
	}
	return ps
}

// A take item: seq u64 | op u8 | client u64 | zones u8 | zone requests.
const takeItemHead = 8 + 1 + 8 + 1

func encodeTakeItem(e *encoder, it *core.TakeItem) {
	e.u64(it.Seq)
	e.u8(byte(it.Op))
	e.u64(uint64(it.Client))
	e.u8(byte(len(it.Reqs)))
	for i := range it.Reqs {
		encodeZoneReq(e, &it.Reqs[i])
	}
}

// decodeTakeItem reads one take item, its requests into buf's storage.
func decodeTakeItem(d *decoder, buf []limiter.Request) (core.TakeItem, error) {
	it := core.TakeItem{Seq: d.u64(), Op: core.Op(d.u8()), Client: limiter.Key(d.u64())}
	zones := int(d.u8())
	if d.err != nil {
		return it, d.err
	}
	switch it.Op {
	case core.OpTake, core.OpPeek:
		if zones == 0 {
			return it, errors.New("take item without zones")
		}
	case core.OpPenalize:
	default:
		return it, fmt.Errorf("unknown take operation %d", it.Op)
	}
	if zones > maxZones || zones*zoneReqSize > len(d.b) {
		return it, fmt.Errorf("take item of %d zones", zones)
	}
	if cap(buf) < zones {
		buf = make([]limiter.Request, zones)
	}
	buf = buf[:zones]
	for i := range buf {
		r, err := decodeZoneReq(d)
		if err != nil {
			return it, err
		}
		buf[i] = r
	}
	it.Reqs = buf
	return it, nil
}

// An item reply: outcome u8, then for Decided allowed u8 | score f64 |
// zones u8 | results; for MovedTo the owner's name; for NotYetMine nothing.
func encodeItemReply(e *encoder, r *core.ItemReply) {
	e.u8(byte(r.Outcome))
	switch r.Outcome {
	case core.Decided:
		e.flag(r.Allowed)
		e.f64(r.Score)
		e.u8(byte(len(r.Results)))
		for i := range r.Results {
			encodeZoneRes(e, &r.Results[i])
		}
	case core.MovedTo:
		e.str(r.Owner)
	}
}

// decodeItemReply reads an item reply, its results into res (at most
// len(res) of them; the rest are read past).
func decodeItemReply(d *decoder, res []limiter.Result) (core.ItemReply, error) {
	r := core.ItemReply{Outcome: core.Outcome(d.u8())}
	switch r.Outcome {
	case core.Decided:
		r.Allowed, r.Score = d.flag(), d.f64()
		n := int(d.u8())
		if n > maxZones || n*zoneResSize > len(d.b) {
			return r, fmt.Errorf("reply of %d zones", n)
		}
		for i := range n {
			z := decodeZoneRes(d)
			if i < len(res) {
				res[i] = z
			}
		}
		r.Results = res[:min(n, len(res))]
	case core.MovedTo:
		r.Owner = d.str()
	case core.NotYetMine:
	default:
		if d.err == nil {
			return r, fmt.Errorf("unknown item outcome %d", r.Outcome)
		}
	}
	return r, d.err
}

func encodePeer(e *encoder, p core.Peer) {
	e.str(p.Name)
	e.u64(p.Inc)
}

func decodePeer(d *decoder) core.Peer { return core.Peer{Name: d.str(), Inc: d.u64()} }

// A transfer: its numbers, mode, counters, requests and the runs it names.
func encodeTransfer(e *encoder, t *core.Transfer) {
	e.u64(t.Seq)
	e.u64(t.Floor)
	e.u64(t.To)
	e.u64(t.Epoch)
	e.u8(byte(t.Mode))
	encodeStates(e, t.States)
	encodeReqList(e, t.Reqs)
	e.u64(t.Take)
	encodePeer(e, t.Caller)
	e.u64(t.Was)
	encodePeer(e, t.WasTo)
	if t.Was != 0 { // who sent the transfer replaced, and those it replaced: only when there is one
		encodePeer(e, t.WasFrom)
		e.u32(uint32(len(t.Earlier)))
		for _, m := range t.Earlier {
			encodePeer(e, m.From)
			e.u64(m.Seq)
			encodePeer(e, m.To)
		}
	}
	e.flag(t.Own)
	e.flag(t.Last)
	encodePeer(e, t.CountersOf)
	held := make([]limiter.State, len(t.Holds))
	e.u32(uint32(len(t.Holds)))
	for i := range t.Holds {
		encodePeer(e, t.Holds[i].Run)
		e.u32(t.Holds[i].Gen)
		e.flag(t.Holds[i].Last)
		held[i] = t.Holds[i].State
	}
	encodeStates(e, held)
	// What the counter holds of the records it holds less of (Held.In),
	// each with the position of its record.
	var ins []limiter.State
	for i := range t.Holds {
		if t.Holds[i].In.Kind != 0 {
			ins = append(ins, t.Holds[i].In)
		}
	}
	e.u32(uint32(len(ins)))
	for i := range t.Holds {
		if t.Holds[i].In.Kind != 0 {
			e.u32(uint32(i))
		}
	}
	encodeStates(e, ins)
	encodePeer(e, t.ReplicaOf)
	encodePeer(e, t.Evicted)
	e.u32(uint32(len(t.Applied)))
	for _, a := range t.Applied {
		encodePeer(e, a.From)
		e.u64(a.Seq)
		encodePeer(e, a.By)
	}
	e.u64(uint64(t.At))
	e.u32(uint32(len(t.Cancels)))
	for i := range t.Cancels {
		e.u64(t.Cancels[i].Take)
		encodeReqList(e, t.Cancels[i].Reqs)
		encodePeer(e, t.Cancels[i].To)
		e.u64(uint64(t.Cancels[i].At))
	}
	e.u32(uint32(len(t.Taken)))
	for i := range t.Taken {
		encodePeer(e, t.Taken[i].Caller)
		e.u32(uint32(len(t.Taken[i].Seqs)))
		for _, s := range t.Taken[i].Seqs {
			e.u64(s)
		}
		encodePeer(e, t.Taken[i].By)
		e.u32(uint32(len(t.Taken[i].Waiting)))
		for _, w := range t.Taken[i].Waiting {
			e.u64(w.Take)
			encodeReqList(e, w.Reqs)
			e.u64(uint64(w.At))
		}
	}
	resent := make([]limiter.State, len(t.Resent))
	e.u32(uint32(len(t.Resent)))
	for i := range t.Resent {
		e.u32(uint32(len(t.Resent[i].Marks)))
		for _, m := range t.Resent[i].Marks {
			encodePeer(e, m.From)
			e.u64(m.Seq)
			encodePeer(e, m.To)
		}
		resent[i] = t.Resent[i].State
	}
	encodeStates(e, resent)
	// The units given back that the records name (Resent.Given), each
	// with the position of its record.
	var given int
	for i := range t.Resent {
		if t.Resent[i].Given != nil {
			given++
		}
	}
	e.u32(uint32(given))
	for i := range t.Resent {
		if g := t.Resent[i].Given; g != nil {
			e.u32(uint32(i))
			encodeZoneReq(e, &g.Req)
			e.u64(uint64(g.At))
		}
	}
}

// A list of zone requests: the units a transfer gives back or spends, or
// a cancelled take item asked for.
func encodeReqList(e *encoder, reqs []limiter.Request) {
	e.u32(uint32(len(reqs)))
	for i := range reqs {
		encodeZoneReq(e, &reqs[i])
	}
}

func decodeReqList(d *decoder) []limiter.Request {
	n := d.count32(maxList, zoneReqSize)
	if n == 0 {
		return nil
	}
	reqs := make([]limiter.Request, n)
	for i := range reqs {
		r, err := decodeZoneReq(d)
		if err != nil && d.err == nil {
			d.err = err
		}
		reqs[i] = r
	}
	return reqs
}

func decodeTransfer(d *decoder) core.Transfer {
	t := core.Transfer{Seq: d.u64(), Floor: d.u64(), To: d.u64(), Epoch: d.u64(), Mode: core.Mode(d.u8())}
	if d.err == nil && (t.Mode < core.ModeAdd || t.Mode > core.ModeCharge) {
		d.err = fmt.Errorf("unknown transfer mode %d", t.Mode)
	}
	t.States = decodeStates(d)
	t.Reqs = decodeReqList(d)
	t.Take = d.u64()
	t.Caller = decodePeer(d)
	t.Was = d.u64()
	t.WasTo = decodePeer(d)
	if t.Was != 0 {
		t.WasFrom = decodePeer(d)
		if n := d.count32(maxList, 9+8+9); n > 0 {
			t.Earlier = make([]core.Replaced, n)
			for i := range t.Earlier {
				t.Earlier[i] = core.Replaced{From: decodePeer(d), Seq: d.u64(), To: decodePeer(d)}
			}
		}
	}
	t.Own = d.flag()
	t.Last = d.flag()
	t.CountersOf = decodePeer(d)
	var runs []core.Peer
	var gens []uint32
	var lasts []bool
	if n := d.count32(maxList, 9+4+1); n > 0 {
		runs, gens, lasts = make([]core.Peer, n), make([]uint32, n), make([]bool, n)
		for i := range runs {
			runs[i] = decodePeer(d)
			gens[i] = d.u32()
			lasts[i] = d.flag()
		}
	}
	held := decodeStates(d)
	var inAt []uint32
	if n := d.count32(maxList, 4); n > 0 {
		inAt = make([]uint32, n)
		for i := range inAt {
			inAt[i] = d.u32()
		}
	}
	ins := decodeStates(d)
	if d.err != nil {
		return t // cut short: the reader reports d.err
	}
	switch {
	case len(held) != len(runs):
		d.err = fmt.Errorf("%d counts held for %d runs", len(held), len(runs))
	case len(ins) != len(inAt):
		d.err = fmt.Errorf("%d counts held in part for %d positions", len(ins), len(inAt))
	case len(runs) > 0:
		t.Holds = make([]core.Held, len(runs))
		for i := range runs {
			t.Holds[i] = core.Held{Run: runs[i], Gen: gens[i], State: held[i], Last: lasts[i]}
		}
		for i, at := range inAt {
			if int(at) >= len(runs) || ins[i].Kind == 0 {
				d.err = fmt.Errorf("a count held in part at position %d of %d records, or of no kind", at, len(runs))
				return t
			}
			t.Holds[at].In = ins[i]
		}
	default:
		if len(inAt) > 0 {
			d.err = fmt.Errorf("%d counts held in part of no record", len(inAt))
		}
	}
	t.ReplicaOf = decodePeer(d)
	t.Evicted = decodePeer(d)
	if n := d.count32(maxList, 9+8+9); n > 0 {
		t.Applied = make([]core.Applied, n)
		for i := range t.Applied {
			t.Applied[i] = core.Applied{From: decodePeer(d), Seq: d.u64(), By: decodePeer(d)}
		}
	}
	t.At = int64(d.u64())
	if n := d.count32(maxList, 8+4+9); n > 0 {
		t.Cancels = make([]core.Cancel, n)
		for i := range t.Cancels {
			t.Cancels[i] = core.Cancel{Take: d.u64(), Reqs: decodeReqList(d), To: decodePeer(d), At: int64(d.u64())}
		}
	}
	if n := d.count32(maxList, 9+4+9); n > 0 {
		t.Taken = make([]core.Taken, n)
		for i := range t.Taken {
			t.Taken[i].Caller = decodePeer(d)
			if m := d.count32(maxList, 8); m > 0 {
				t.Taken[i].Seqs = make([]uint64, m)
				for j := range t.Taken[i].Seqs {
					t.Taken[i].Seqs[j] = d.u64()
				}
			}
			t.Taken[i].By = decodePeer(d)
			if m := d.count32(maxList, 8+4); m > 0 {
				t.Taken[i].Waiting = make([]core.Cancel, m)
				for j := range t.Taken[i].Waiting {
					t.Taken[i].Waiting[j] = core.Cancel{Take: d.u64(), Reqs: decodeReqList(d), At: int64(d.u64())}
				}
			}
		}
	}
	var marks [][]core.Replaced
	if n := d.count32(maxList, 4); n > 0 {
		marks = make([][]core.Replaced, n)
		for i := range marks {
			if m := d.count32(maxList, 9+8+9); m > 0 {
				marks[i] = make([]core.Replaced, m)
				for j := range marks[i] {
					marks[i][j] = core.Replaced{From: decodePeer(d), Seq: d.u64(), To: decodePeer(d)}
				}
			}
		}
	}
	resent := decodeStates(d)
	if d.err != nil {
		return t // cut short: the reader reports d.err
	}
	if len(resent) != len(marks) {
		d.err = fmt.Errorf("%d counts sent again for %d records", len(resent), len(marks))
	} else if len(marks) > 0 {
		t.Resent = make([]core.Resent, len(marks))
		for i := range marks {
			t.Resent[i] = core.Resent{Marks: marks[i], State: resent[i]}
		}
	}
	if n := d.count32(maxList, 4+zoneReqSize+8); n > 0 {
		for range n {
			i := d.u32()
			q, err := decodeZoneReq(d)
			at := int64(d.u64())
			if d.err != nil {
				return t
			}
			if err != nil {
				d.err = err
				return t
			}
			if uint64(i) >= uint64(len(t.Resent)) || t.Resent[i].Given != nil {
				d.err = fmt.Errorf("units given back again for record %d of %d records, or twice", i, len(t.Resent))
				return t
			}
			t.Resent[i].Given = &core.GivenAgain{Req: q, At: at}
		}
	}
	return t
}
