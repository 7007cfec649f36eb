package core

import (
	"sync"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// Keys noted while the replicator drains the set at the same time are
// each drained once at least: none is lost between the shards and a drain.
func TestDirtyKeysLoseNoKeyToAConcurrentDrain(t *testing.T) {
	var d dirtyKeys
	const writers, each = 8, 5000
	seen := make(map[limiter.Key]bool)
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			for _, k := range d.drain() {
				seen[k] = true
			}
			select {
			case <-stop:
				for _, k := range d.drain() {
					seen[k] = true
				}
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				k := limiter.Key(w*each + i + 1)
				switch i % 3 {
				case 0:
					d.note([]limiter.Request{{Key: k}}, 0)
				case 1:
					d.noteStates([]limiter.State{{Key: k}})
				default:
					d.noteKeys([]limiter.Key{k})
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-drained
	if len(seen) != writers*each {
		t.Fatalf("drained %d distinct keys of %d noted", len(seen), writers*each)
	}
	if d.len() != 0 || d.drain() != nil {
		t.Fatal("the set is not empty after the last drain")
	}
}

// A key noted twice between drains is sent once.
func TestDirtyKeysAreASet(t *testing.T) {
	var d dirtyKeys
	d.note([]limiter.Request{{Key: 7}, {Key: 7}}, 7)
	d.noteKeys([]limiter.Key{7, 9})
	if got := d.drain(); len(got) != 2 {
		t.Fatalf("drained %v, want 7 and 9 once each", got)
	}
}
