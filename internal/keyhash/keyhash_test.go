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
