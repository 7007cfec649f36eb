//go:build !race

package caddymodule

// raceDetector: under the race detector, sync.Pool drops some of what is
// put back, so allocation counts are not the program's.
const raceDetector = false
