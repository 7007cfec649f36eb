package limiter

import (
	"encoding/binary"
	"testing"
)

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
