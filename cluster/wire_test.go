package cluster

import (
	"reflect"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

func TestStatesRoundTrip(t *testing.T) {
	in := []limiter.State{
		{Key: 1, Kind: 1, Stamp: 100, Expires: 200, Cur: 3, Prev: 4},
		{Key: 2, Kind: limiter.KindGrant, Expires: 900, Grant: limiter.Grant{Version: [16]byte{7}, Created: 5, Amount: 50, Expires: 900}, Used: 12, UsedVersion: [16]byte{7}},
		{Key: 3, Kind: limiter.KindLeases, Expires: 800, Leases: []limiter.Lease{{ID: 9, Expires: 700}, {ID: 10, Expires: 800}}},
	}
	e := &encoder{}
	encodeStates(e, in)
	d := &decoder{b: e.b}
	out := decodeStates(d)
	if d.err != nil || len(d.b) != 0 {
		t.Fatalf("decoding: %v, %d bytes left", d.err, len(d.b))
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n%+v\n%+v", in, out)
	}
	// Truncated input is an error, never a panic.
	for i := range len(e.b) {
		d := &decoder{b: e.b[:i]}
		decodeStates(d)
		if d.err == nil && i < len(e.b) {
			t.Fatalf("%d of %d bytes decoded without an error", i, len(e.b))
		}
	}
}

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
