package core

import (
	"testing"
	"time"
)

// TestAppliedOfListsTheNewestTransfersWithinTheProtocolsLimit: a run
// that applied fallback counts of many callers through a long fault has
// more transfers on record than a list on the wire may hold; a counter
// handed on lists the newest, which their senders may still send again,
// and never so many that its receiver refuses the frame.
func TestAppliedOfListsTheNewestTransfersWithinTheProtocolsLimit(t *testing.T) {
	r := newReplicaStore(0)
	run := Peer{Name: "n1", Inc: 1}
	const recorded = 3 * appliedListedMax
	for i := range recorded {
		from := Peer{Name: "n" + string(rune('2'+i%3)), Inc: 1}
		r.noteApplied(int64(i)*int64(time.Millisecond), run, []Applied{{From: from, Seq: uint64(i + 1)}})
	}
	got := r.appliedOf(run)
	if len(got) != appliedListedMax {
		t.Fatalf("a counter lists %d transfers its run applied; want the newest %d", len(got), appliedListedMax)
	}
	newest := map[uint64]bool{}
	for _, a := range got {
		if a.By != run {
			t.Fatalf("a listed transfer names %v as the run that applied it; want %v", a.By, run)
		}
		if a.Seq <= recorded-appliedListedMax {
			t.Errorf("transfer %d, among the oldest, is listed in place of a newer one", a.Seq)
		}
		newest[a.Seq] = true
	}
	if !newest[recorded] {
		t.Errorf("the newest transfer, %d, is not listed", recorded)
	}
	if few := r.appliedOf(Peer{Name: "n9", Inc: 1}); len(few) != 0 {
		t.Errorf("a run with nothing on record lists %v", few)
	}
}
