package cluster

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

func FuzzDecodeMessages(f *testing.F) {
	e := &encoder{}
	encodeStates(e, []limiter.State{{Key: 3, Kind: limiter.KindLeases, Leases: []limiter.Lease{{ID: 1}}}})
	f.Add(e.b)
	reply := &encoder{}
	reply.u8(itemDone)
	reply.u8(1)
	reply.u32(0)
	reply.u8(3) // three zones, for a caller that asked two
	for range 3 {
		encodeZoneRes(reply, &limiter.Result{Allowed: true, Remaining: 5})
	}
	f.Add(reply.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeStates(&decoder{b: b})
		decodeKeys(&decoder{b: b})
		d := &decoder{b: b}
		decodeZoneReq(d)
		// A take reply's item, read into a caller's two results: never
		// past them, never a panic.
		c := newTakeCall(actTake, 0, nil, make([]limiter.Result, 2))
		readItem(&decoder{b: b}, c)
	})
}
