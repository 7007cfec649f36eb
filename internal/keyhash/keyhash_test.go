package keyhash

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

func TestReferenceVectors(t *testing.T) {
	var key [16]byte
	for i := range key {
		key[i] = byte(i)
	}
	h := FromKey(binary.LittleEndian.Uint64(key[0:8]), binary.LittleEndian.Uint64(key[8:16]))
	msg := make([]byte, 0, len(sipVectors))
	for i, want := range sipVectors {
		if got := h.Bytes(msg); got != want {
			t.Errorf("Bytes(len %d) = %#x, want %#x", i, got, want)
		}
		if got := h.String(string(msg)); got != want {
			t.Errorf("String(len %d) = %#x, want %#x", i, got, want)
		}
		msg = append(msg, byte(i))
	}
}

func TestUint64HashesItsBytes(t *testing.T) {
	h := New([]byte("secret"), "uint64")
	for _, v := range []uint64{0, 1, 0xff, 1 << 63, 0x0123456789abcdef, ^uint64(0)} {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		if got, want := h.Uint64(v), h.Bytes(b[:]); got != want {
			t.Errorf("Uint64(%#x) = %#x, Bytes of its bytes = %#x", v, got, want)
		}
	}
}

func TestHashingDoesNotAllocate(t *testing.T) {
	h := New([]byte("secret"), "allocs")
	var sink uint64
	if n := testing.AllocsPerRun(100, func() {
		var b [17]byte
		b[3] = byte(sink)
		sink += h.Bytes(b[:]) + h.Uint64(sink) + h.String("2001:db8::1")
	}); n != 0 {
		t.Errorf("%v allocations per hash", n)
	}
}

func TestNewDependsOnSecretAndLabel(t *testing.T) {
	a := New([]byte("secret one"), "a")
	if a.String("x") == New([]byte("secret two"), "a").String("x") {
		t.Error("two secrets hash alike")
	}
	if a.String("x") == New([]byte("secret one"), "b").String("x") {
		t.Error("two labels hash alike")
	}
	if a.String("x") != New([]byte("secret one"), "a").String("x") {
		t.Error("one secret and label hash differently twice")
	}
}

func BenchmarkString(b *testing.B) {
	h := New([]byte("secret"), "bench")
	b.ReportAllocs()
	for b.Loop() {
		_ = h.String("2001:db8:1234:5678::1")
	}
}

// TestLastBlockIsReadByteByByte checks the last block's overlapping loads
// against SipHash's definition, the bytes left read one by one, for every
// length up to 64 and bytes of every value in every position.
func TestLastBlockIsReadByteByByte(t *testing.T) {
	h := New([]byte("secret"), "last block")
	for n := range 65 {
		for seed := range 8 {
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(0x9e*seed + 0x3b*i + 0x80)
			}
			want := referenceSum(h, msg)
			if got := h.Bytes(msg); got != want {
				t.Errorf("Bytes(% x) = %#x, want %#x", msg, got, want)
			}
			if got := h.String(string(msg)); got != want {
				t.Errorf("String(% x) = %#x, want %#x", msg, got, want)
			}
		}
	}
}

// referenceSum is SipHash-2-4 as its paper writes it.
func referenceSum(h Hasher, s []byte) uint64 {
	v0 := h.k0 ^ 0x736f6d6570736575
	v1 := h.k1 ^ 0x646f72616e646f6d
	v2 := h.k0 ^ 0x6c7967656e657261
	v3 := h.k1 ^ 0x7465646279746573
	n := len(s)
	for ; len(s) >= 8; s = s[8:] {
		m := binary.LittleEndian.Uint64(s)
		v3 ^= m
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0 ^= m
	}
	m := uint64(n) << 56
	for i := range s {
		m |= uint64(s[i]) << (8 * i)
	}
	v3 ^= m
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}
