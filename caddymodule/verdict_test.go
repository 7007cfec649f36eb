package caddymodule

import (
	"strings"
	"testing"
)

// TestKeptHeaderTextNeverChanges checks the verdict's own text: the first
// RateLimit value it keeps is backed by the verdict and stays as it was
// after later decisions on the same request (a second tollgate handler),
// whose values are copies; a value too long for the verdict is copied too.
func TestKeptHeaderTextNeverChanges(t *testing.T) {
	v := new(verdict)
	buf := []byte(`"site";r=41;t=60`)
	first := v.keep(buf)
	copy(buf, `"api";r=0;t=9999`) // the caller's scratch, reused
	second := v.keep(buf)
	long := v.keep([]byte(strings.Repeat("x", verdictText+1)))
	if first != `"site";r=41;t=60` || second != `"api";r=0;t=9999` || len(long) != verdictText+1 {
		t.Fatalf("kept %q, %q and %d bytes", first, second, len(long))
	}
	if n := testing.AllocsPerRun(100, func() {
		keptVerdict = new(verdict) // on the heap, as a request's verdict is
		keptText = keptVerdict.keep(buf)
	}); n != 1 {
		t.Errorf("a fresh verdict's first value: %v allocations with the verdict's own; want 1", n)
	}
}

var (
	keptVerdict *verdict
	keptText    string
)
