//go:build !unix

package cluster

import "time"

// cpuTime cannot tell the process's CPU time on this system.
func cpuTime() (time.Duration, bool) { return 0, false }
