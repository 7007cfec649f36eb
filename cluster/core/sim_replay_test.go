package core

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// replaySeeds are schedules TestSimulationReplaysExactly plays again and
// again: a fresh seed that once violated in a sweep and seldom when
// replayed alone (its nodes pinged the peers a standstill waited for in
// the order a map was walked in), and seeds whose logs differed from run
// to run as long as counters left an engine in the order of its maps and
// members that died together were weighed in the order of a map.
var replaySeeds = []uint64{1795816501511164510, 1795816501511161683, 1795794451879950886, 1795776032140129366, 1795767173152764264, 13}

// TestSimulationReplaysExactly plays each of replaySeeds several times and
// compares digests of their whole logs: the cores' debug lines, every
// message sent and every reply. A schedule is a function of its seed, so
// that a failing seed replays exactly: nothing in the simulator or the
// cores may depend on the order maps are walked in, on goroutines or on
// the wall clock.
func TestSimulationReplaysExactly(t *testing.T) {
	const runs = 5
	for _, seed := range replaySeeds {
		sc := newSimSchedule(seed, 0, allFaults)
		var first [sha256.Size]byte
		var firstLines int
		for run := range runs {
			h := sha256.New()
			lines := 0
			runScheduleRecorded(sc, -1, func(line string) {
				h.Write([]byte(line))
				h.Write([]byte{'\n'})
				lines++
			})
			var sum [sha256.Size]byte
			h.Sum(sum[:0])
			if run == 0 {
				first, firstLines = sum, lines
				continue
			}
			if sum != first {
				t.Errorf("seed %d: run %d logged %d lines (digest %x), run 1 %d (digest %x): the schedule does not replay exactly; compare two runs' logs, written by\n  go test -run '^TestSimulation$' ./cluster/core -sim-seed %d -sim-dump FILE",
					seed, run+1, lines, sum[:6], firstLines, first[:6], seed)
				break
			}
		}
	}
	if testing.Verbose() {
		fmt.Printf("%d seeds replayed %d times each\n", len(replaySeeds), runs)
	}
}
