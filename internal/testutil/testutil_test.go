package testutil

import (
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, "the third call", func() bool {
		calls++
		return calls == 3
	})
	if calls != 3 {
		t.Errorf("cond called %d times; want 3", calls)
	}
}

func TestClearOfWindowEdgeLeavesTheMarginAhead(t *testing.T) {
	const w, margin = time.Second, 300 * time.Millisecond
	for range 3 {
		ClearOfWindowEdge(w, margin)
		if toEdge := w - time.Duration(time.Now().UnixNano()%int64(w)); toEdge < margin-100*time.Millisecond {
			t.Fatalf("%s left to the edge; want at least about %s", toEdge, margin)
		}
		time.Sleep(400 * time.Millisecond)
	}
}
