package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A standalone node is a ring of one: it owns and counts every key, an
// empty batch asks nobody, and it still counts after Leave (there is
// nothing to leave).
func TestStandaloneIsARingOfOne(t *testing.T) {
	n := Standalone(limiter.New(limiter.Config{}))
	t0 := time.Unix(1_700_000_000, 0)
	if ok, src := n.Take(t0, nil, nil); !ok || src != SourceOwner {
		t.Fatalf("empty batch: %v %v; want granted by the owner", ok, src)
	}
	req := []limiter.Request{{Key: 7, Limit: limitOf(2)}}
	res := make([]limiter.Result, 1)
	for i, want := range []bool{true, true, false} {
		if ok, src := n.Take(t0, req, res); ok != want || src != SourceOwner {
			t.Fatalf("take %d: %v %v; want %v by the owner", i, ok, src, want)
		}
	}
	if err := n.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if n.Peek(t0, req, res); res[0].Allowed {
		t.Fatalf("after Leave: %+v; want the count kept (denied)", res[0])
	}
	if st := n.Status(); !st.Standalone || len(st.Members) != 1 || st.Members[0].Share != 1 {
		t.Fatalf("status %+v; want standalone, itself alone", st)
	}
}
