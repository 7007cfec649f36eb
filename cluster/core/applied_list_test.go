package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
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

// The records of bare additions the counts of a key hold (keyApplied) grow
// with every fallback transfer a node applies during a long partition; the
// list that goes with the counts keeps the newest, within the protocol's
// limit on a list, or the hand-off's frame would be refused.
func TestKeyAppliedListsTheNewestTransfersWithinTheProtocolsLimit(t *testing.T) {
	var r keyApplied
	by := Peer{Name: "n1", Inc: 1}
	keys := []limiter.Key{11, 12}
	const recorded = 3 * appliedListedMax
	for i := range recorded {
		from := Peer{Name: "n" + string(rune('2'+i%3)), Inc: 1}
		r.keep(int64(i)*int64(time.Millisecond), keys[i%2:i%2+1], []Applied{{From: from, Seq: uint64(i + 1), By: by}})
	}
	got := r.of(keys)
	if len(got) != appliedListedMax {
		t.Fatalf("the counts of two keys list %d transfers; want the newest %d", len(got), appliedListedMax)
	}
	listed := map[uint64]bool{}
	for _, a := range got {
		if a.Seq <= recorded-appliedListedMax {
			t.Errorf("transfer %d, among the oldest, is listed in place of a newer one", a.Seq)
		}
		listed[a.Seq] = true
	}
	if !listed[recorded] || !listed[recorded-1] {
		t.Errorf("the newest transfers of each key, %d and %d, are not both listed", recorded-1, recorded)
	}
	if taken := r.take(keys[:1]); len(taken) != appliedListedMax {
		t.Errorf("taking one key's records lists %d; want the newest %d", len(taken), appliedListedMax)
	}
	if left := r.of(keys[:1]); len(left) != 0 {
		t.Errorf("a key whose records were taken still lists %d", len(left))
	}
}
