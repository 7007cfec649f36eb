package limiter

import (
	"reflect"
	"testing"
)

func TestStatesRoundTrip(t *testing.T) {
	in := []State{
		{Key: 1, Kind: kindWindow, Stamp: 100, Expires: 200, Cur: 3, Prev: 4},
		{Key: 2, Kind: KindGrant, Expires: 900, Grant: Grant{Version: [16]byte{7}, Created: 5, Amount: 50, Expires: 900}, Used: 12, UsedVersion: [16]byte{7}},
		{Key: 3, Kind: KindLeases, Expires: 800, Leases: []Lease{{ID: 9, Expires: 700}, {ID: 10, Expires: 800}}},
	}
	b := AppendStates([]byte("head"), in)
	out, rest, err := DecodeStates(b[4:], 10)
	if err != nil || len(rest) != 0 {
		t.Fatalf("decoding: %v, %d bytes left", err, len(rest))
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n%+v\n%+v", in, out)
	}
	for i := range len(b) - 4 {
		if _, _, err := DecodeStates(b[4:4+i], 10); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", i, len(b)-4)
		}
	}
	if _, _, err := DecodeStates(b[4:], 2); err == nil {
		t.Fatal("3 states read with a limit of 2")
	}
}

func FuzzDecodeStates(f *testing.F) {
	f.Add(AppendStates(nil, []State{{Key: 3, Kind: KindLeases, Leases: []Lease{{ID: 1}}}}))
	f.Add([]byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		states, _, err := DecodeStates(b, 1000)
		if err == nil && len(states) > len(b) {
			t.Fatalf("%d states from %d bytes", len(states), len(b))
		}
	})
}
