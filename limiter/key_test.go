package limiter

import (
	"encoding/binary"
	"testing"
)

// The first outputs of the SipHash-2-4 reference vectors (key 00..0f,
// message 00..len-1).
var sipVectors = []uint64{
	0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
	0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
	0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
	0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
	0x3f2acc7f57c29bdb,
}

func TestSiphashReferenceVectors(t *testing.T) {
	var key [16]byte
	for i := range key {
		key[i] = byte(i)
	}
	k0 := binary.LittleEndian.Uint64(key[0:8])
	k1 := binary.LittleEndian.Uint64(key[8:16])
	msg := make([]byte, 0, len(sipVectors))
	for i, want := range sipVectors {
		if got := siphash(k0, k1, string(msg)); got != want {
			t.Errorf("siphash(len %d) = %#x, want %#x", i, got, want)
		}
		msg = append(msg, byte(i))
	}
}

func TestHasherDependsOnSecret(t *testing.T) {
	a, b := NewHasher([]byte("secret one")), NewHasher([]byte("secret two"))
	if a.Sum64("198.51.100.7") == b.Sum64("198.51.100.7") {
		t.Fatal("two secrets hash a key alike")
	}
	if a.Sum64("198.51.100.7") != NewHasher([]byte("secret one")).Sum64("198.51.100.7") {
		t.Fatal("one secret hashes a key differently twice")
	}
}

func TestZoneKeyKeepsRouteAndSeparatesZones(t *testing.T) {
	h := NewHasher([]byte("secret"))
	kh := h.Sum64("client-1")
	a, b := ZoneKey(kh, h.Zone("api")), ZoneKey(kh, h.Zone("login"))
	if a == b {
		t.Fatal("one key in two zones gives one counter")
	}
	if a.Route() != b.Route() || a.Route() != uint32(kh>>32) {
		t.Fatalf("routes differ across zones: %#x %#x", a.Route(), b.Route())
	}
	if ZoneKey(h.Sum64("client-2"), h.Zone("api")) == a {
		t.Fatal("two keys in one zone give one counter")
	}
}

func TestZoneKeysDoNotCollide(t *testing.T) {
	h := NewHasher([]byte("secret"))
	zone := h.Zone("api")
	seen := make(map[Key]int, 200000)
	for i := range 200000 {
		k := ZoneKey(h.Sum64(string(binary.AppendUvarint(nil, uint64(i)))), zone)
		if j, dup := seen[k]; dup {
			t.Fatalf("keys %d and %d collide", i, j)
		}
		seen[k] = i
	}
}

func BenchmarkHasherSum64(b *testing.B) {
	h := NewHasher([]byte("secret"))
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Sum64("2001:db8:1234:5678::1")
	}
}
