//go:build race

package core

// raceDetector: the race detector slows the simulation about tenfold;
// TestSimulation plays fewer schedules under it.
const raceDetector = true
