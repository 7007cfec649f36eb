package cluster

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

func FuzzDecodeMessages(f *testing.F) {
	e := &encoder{}
	encodeStates(e, []limiter.State{{Key: 3, Kind: limiter.KindLeases, Leases: []limiter.Lease{{ID: 1}}}})
	f.Add(e.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeStates(&decoder{b: b})
		decodeKeys(&decoder{b: b})
		d := &decoder{b: b}
		decodeZoneReq(d)
	})
}
