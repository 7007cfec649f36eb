package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// Whatever a peer sends, decoding it never panics, never reads past the
// caller's results and never allocates beyond the bounds.
func FuzzDecodeMessages(f *testing.F) {
	e := &encoder{}
	encodeStates(e, []limiter.State{{Key: 3, Kind: limiter.KindLeases, Leases: []limiter.Lease{{ID: 1}}}})
	f.Add(e.b)
	reply := &encoder{}
	encodeItemReply(reply, &core.ItemReply{Outcome: core.Decided, Allowed: true, Results: make([]limiter.Result, 3)}) // three zones, for a caller that asked two
	f.Add(reply.b)
	t := &encoder{}
	encodeTransfer(t, &core.Transfer{Seq: 1, Mode: core.ModeAdd, States: []limiter.State{{Key: 4, Cur: 2}}, Applied: []core.Applied{{Seq: 3}}})
	f.Add(t.b)
	resent := &encoder{}
	encodeTransfer(resent, &resentTransfer)
	f.Add(resent.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeStates(&decoder{b: b})
		decodeKeys(&decoder{b: b})
		decodeZoneReq(&decoder{b: b})
		decodeItemReply(&decoder{b: b}, make([]limiter.Result, 2))
		decodeTakeItem(&decoder{b: b}, nil)
		for _, k := range []byte{msgTransfer, msgAck, msgPull, msgSeal, msgPing, msgScore} {
			decodeRequest(k, &decoder{b: b})
			decodeReply(k, &decoder{b: b})
		}
	})
}

// resentTransfer carries a counter with the counts it holds of other
// runs (Transfer.Holds, one of them its run's last word), counts sent
// again in place of a transfer and units given back again in place of
// another (Transfer.Resent), the last lists on the wire: each record's
// names, then a list of counts, one for each, then the units given back
// with the position of their record.
var resentTransfer = core.Transfer{Seq: 2, Mode: core.ModeAdd, Own: true, CountersOf: core.Peer{Name: "a", Inc: 1},
	States: []limiter.State{{Key: 4, Cur: 3, Stamp: 1, Expires: 9}},
	Holds: []core.Held{{Run: core.Peer{Name: "d", Inc: 4}, Gen: 2, State: limiter.State{Key: 4, Cur: 2, Stamp: 1, Expires: 9}},
		{Run: core.Peer{Name: "e", Inc: 5}, State: limiter.State{Key: 4, Cur: 1, Stamp: 1, Expires: 9}, Last: true}},
	Resent: []core.Resent{{Marks: []core.Replaced{{From: core.Peer{Name: "b", Inc: 2}, Seq: 5, To: core.Peer{Name: "c", Inc: 3}}}, State: limiter.State{Key: 4, Cur: 1, Stamp: 1, Expires: 9}},
		{Marks: []core.Replaced{{From: core.Peer{Name: "f", Inc: 1}, Seq: 8, To: core.Peer{Name: "c", Inc: 3}}}, Given: &core.GivenAgain{
			Req: limiter.Request{Key: 4, Zone: 1, Cost: 2, Limit: limiter.Limit{Quota: 10, Window: time.Minute}}, At: 7}}}}

// The records of units given back again (Resent.Given) cross the wire
// with their requests and instants, each at the position of its record;
// the records of counts beside them stay counts.
func TestUnitsGivenBackAgainCrossTheWireWithTheirRecords(t *testing.T) {
	e := &encoder{}
	encodeTransfer(e, &resentTransfer)
	m, err := decodeRequest(msgTransfer, &decoder{b: e.b})
	if err != nil {
		t.Fatal(err)
	}
	got := m.(core.Transfer)
	if len(got.Resent) != 2 {
		t.Fatalf("%d records came; want 2", len(got.Resent))
	}
	if got.Resent[0].Given != nil || fmtOf(got.Resent[0]) != fmtOf(resentTransfer.Resent[0]) {
		t.Errorf("the record of counts came as %+v; want %+v", got.Resent[0], resentTransfer.Resent[0])
	}
	want := resentTransfer.Resent[1]
	if g := got.Resent[1]; g.Given == nil || fmtOf(*g.Given) != fmtOf(*want.Given) || fmtOf(g.Marks) != fmtOf(want.Marks) {
		t.Errorf("the record of units given back came as %+v (given %+v); want given %+v", g, g.Given, *want.Given)
	}
	// A record named twice, or one past the list, is refused.
	for _, at := range []uint32{1, 2} {
		forged := resentTransfer
		forged.Resent = slices.Clone(resentTransfer.Resent)
		e := &encoder{}
		encodeTransfer(e, &forged)
		b := slices.Clone(e.b)
		// The last list: its count, then each entry's position.
		pos := len(b) - (8 + zoneReqSizeOf(t, *want.Given)) - 4
		b[pos], b[pos+1], b[pos+2], b[pos+3] = byte(at), 0, 0, 0
		if at == 1 {
			b = append(b[:pos-4], append([]byte{2, 0, 0, 0}, append(b[pos:], b[pos:]...)...)...)
		}
		if _, err := decodeRequest(msgTransfer, &decoder{b: b}); err == nil {
			t.Errorf("units given back again for record %d (twice: %v) decode without an error", at, at == 1)
		}
	}
}

// zoneReqSizeOf returns the size of g's request on the wire.
func zoneReqSizeOf(t *testing.T, g core.GivenAgain) int {
	t.Helper()
	e := &encoder{}
	encodeZoneReq(e, &g.Req)
	return len(e.b)
}

// A transfer cut short anywhere, a frame truncated or forged by a peer,
// is an error to its reader: never a panic of the node.
func TestATransferCutShortIsAnError(t *testing.T) {
	e := &encoder{}
	encodeTransfer(e, &resentTransfer)
	if _, err := decodeRequest(msgTransfer, &decoder{b: e.b}); err != nil {
		t.Fatalf("the whole transfer: %v", err)
	}
	for n := range len(e.b) {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("a transfer cut to %d of %d bytes panics: %v", n, len(e.b), r)
				}
			}()
			if _, err := decodeRequest(msgTransfer, &decoder{b: e.b[:n]}); err == nil {
				t.Errorf("a transfer cut to %d of %d bytes decodes without an error", n, len(e.b))
			}
		}()
	}
}

// Every message of the core crosses the wire unchanged.
func TestCodecRoundTrips(t *testing.T) {
	states := []limiter.State{{Key: 9, Kind: limiter.KindLeases, Cur: 3, Leases: []limiter.Lease{{ID: 5, Expires: 7}}}}
	reqs := []limiter.Request{{Key: 2, Zone: 1, Cost: 1, Limit: limiter.Limit{Quota: 10, Window: 1e9}}}
	transfer := core.Transfer{Seq: 4, Floor: 2, To: 8, Epoch: 3, Mode: core.ModeCancel, States: states, Reqs: reqs, Take: 11, Caller: core.Peer{Name: "i", Inc: 9}, Was: 1,
		WasTo: core.Peer{Name: "b", Inc: 2}, WasFrom: core.Peer{Name: "l", Inc: 3}, Earlier: []core.Replaced{{From: core.Peer{Name: "l", Inc: 3}, Seq: 7, To: core.Peer{Name: "n", Inc: 1}}}, Own: true, CountersOf: core.Peer{Name: "e", Inc: 5}, Last: true,
		Holds: []core.Held{{Run: core.Peer{Name: "f", Inc: 6}, Gen: 2, State: limiter.State{Key: 9, Cur: 4, Stamp: 1, Expires: 3}}}, ReplicaOf: core.Peer{Name: "c", Inc: 3}, Evicted: core.Peer{Name: "d", Inc: 4},
		Applied: []core.Applied{{From: core.Peer{Name: "e", Inc: 5}, Seq: 6, By: core.Peer{Name: "m", Inc: 2}}}, Cancels: []core.Cancel{{Take: 12, Reqs: reqs}, {Take: 13, To: core.Peer{Name: "j", Inc: 4}}},
		Taken:  []core.Taken{{Caller: core.Peer{Name: "g", Inc: 7}, Seqs: []uint64{3, 5, 8}}, {Caller: core.Peer{Name: "h", Inc: 1}, By: core.Peer{Name: "k", Inc: 2}, Waiting: []core.Cancel{{Take: 15, Reqs: reqs}}}},
		Resent: []core.Resent{{Marks: []core.Replaced{{From: core.Peer{Name: "o", Inc: 2}, Seq: 9, To: core.Peer{Name: "p", Inc: 1}}, {From: core.Peer{Name: "o", Inc: 2}, Seq: 11, To: core.Peer{Name: "q", Inc: 3}}}, State: limiter.State{Key: 9, Cur: 1, Stamp: 1, Expires: 3}}}}
	for _, tc := range []struct {
		kind  byte
		req   core.Message
		reply core.Message
	}{
		{msgTransfer, transfer, core.Ack{Seq: 4, Refused: true}},
		// A cancel a leaving owner passes on names itself, and no transfer
		// it replaces: WasFrom goes on the wire only beside a Was.
		{msgTransfer, core.Transfer{Seq: 6, Mode: core.ModeCancel, Reqs: reqs, Take: 14, Caller: core.Peer{Name: "i", Inc: 9}, WasTo: core.Peer{Name: "b", Inc: 2}}, core.Ack{Seq: 6}},
		// A counter handed over by its run, passed on: its run's last word
		// on it, holding another run's last word and a copy of a third's,
		// and less than the last of those (units given back to it).
		{msgTransfer, core.Transfer{Seq: 7, To: 8, Epoch: 1, Mode: core.ModeAdd, States: states, CountersOf: core.Peer{Name: "e", Inc: 5}, Last: true,
			Holds: []core.Held{{Run: core.Peer{Name: "f", Inc: 6}, Gen: 1, State: limiter.State{Key: 9, Cur: 4, Stamp: 1, Expires: 3}, Last: true},
				{Run: core.Peer{Name: "g", Inc: 1}, State: limiter.State{Key: 9, Kind: 1, Cur: 2, Stamp: 1, Expires: 3}, In: limiter.State{Key: 9, Kind: 1, Cur: 1, Stamp: 1, Expires: 3}}}}, core.Ack{Seq: 7}},
		// A snapshot's copy names its run and the transfers the run applied.
		{msgTransfer, core.Transfer{Seq: 5, To: 8, Epoch: 1, Mode: core.ModeCopy, States: states, CountersOf: core.Peer{Name: "e", Inc: 5},
			Applied: []core.Applied{{From: core.Peer{Name: "f", Inc: 6}, Seq: 12}, {From: core.Peer{Name: "g", Inc: 1}, Seq: 3}}}, core.Ack{Seq: 5}},
		// A run's counter sent as it stopped counting, sent on as a copy
		// that is its last word, naming its counter.
		{msgTransfer, core.Transfer{Seq: 6, To: 8, Epoch: 1, Mode: core.ModeCopy, States: states, CountersOf: core.Peer{Name: "e", Inc: 5}, Last: true,
			Holds: []core.Held{{Run: core.Peer{Name: "e", Inc: 5}, Gen: 2, State: limiter.State{Key: 9, Cur: 4, Stamp: 1, Expires: 3}}}}, core.Ack{Seq: 6}},
		{msgPull, core.Pull{To: 3, Keys: []limiter.Key{1, 2}}, core.PullReply{Given: []core.Transfer{transfer}, Moved: []core.KeyOwner{{Key: 3, Owner: "x"}}, Refused: true, Sending: []limiter.Key{4, 5}, Earlier: []limiter.Key{6}}},
		{msgSeal, core.SealQuery{Ring: "abc", To: 7}, core.SealReply{Sealed: true}},
		// Keys out of reach are passed on with a pull's reply or a seal.
		{msgSeal, core.SealQuery{Ring: "abc"}, core.SealReply{Sealed: true, Unreached: []core.Unreached{{
			Ring: []core.Peer{{Name: "a", Inc: 1}, {Name: "b", Inc: 2}, {Name: "c", Inc: 3}}, Dead: []core.Peer{{Name: "a", Inc: 1}, {Name: "b", Inc: 2}}, Within: 4 * time.Second}}}},
		{msgPull, core.Pull{To: 3, Keys: []limiter.Key{1}}, core.PullReply{Unreached: []core.Unreached{{
			Ring: []core.Peer{{Name: "a", Inc: 1}, {Name: "b", Inc: 2}}, Dead: []core.Peer{{Name: "a", Inc: 1}, {Name: "b", Inc: 2}}, Within: time.Second}}}},
		{msgPing, core.Ping{Epoch: 7, Counting: true}, core.Pong{Dead: true}},
		{msgPing, core.Ping{Epoch: 8}, core.Pong{Owed: []uint64{3, 9}, Recovering: true, Run: 4}},
		{msgScore, core.ScoreQuery{Client: 12}, core.ScoreReply{Score: 42.5}},
	} {
		e := &encoder{}
		encodeMessage(e, tc.req)
		got, err := decodeRequest(tc.kind, &decoder{b: e.b})
		if err != nil || fmtOf(got) != fmtOf(tc.req) {
			t.Errorf("request %T: got %+v (%v), want %+v", tc.req, got, err, tc.req)
		}
		e = &encoder{}
		encodeMessage(e, tc.reply)
		got, err = decodeReply(tc.kind, &decoder{b: e.b})
		if err != nil || fmtOf(got) != fmtOf(tc.reply) {
			t.Errorf("reply %T: got %+v (%v), want %+v", tc.reply, got, err, tc.reply)
		}
	}
	item := core.TakeItem{Seq: 3, Op: core.OpTake, Client: 4, Reqs: reqs}
	e := &encoder{}
	encodeTakeItem(e, &item)
	if got, err := decodeTakeItem(&decoder{b: e.b}, nil); err != nil || fmtOf(got) != fmtOf(item) {
		t.Errorf("take item: got %+v (%v)", got, err)
	}
	for _, r := range []core.ItemReply{
		{Outcome: core.Decided, Allowed: true, Score: 90, Results: []limiter.Result{{Allowed: true, Remaining: 3}}},
		{Outcome: core.MovedTo, Owner: "n2"},
		{Outcome: core.NotYetMine},
	} {
		e := &encoder{}
		encodeItemReply(e, &r)
		got, err := decodeItemReply(&decoder{b: e.b}, make([]limiter.Result, 1))
		if err != nil || fmtOf(got) != fmtOf(r) {
			t.Errorf("item reply: got %+v (%v), want %+v", got, err, r)
		}
	}
}
