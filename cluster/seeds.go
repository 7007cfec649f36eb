package cluster

import (
	"strings"
	"time"
)

// Meeting again after a split. memberlist exchanges state only with the
// members it believes alive: when a split (a partition, a frozen node, a
// link too slow for the probes) outlasts failure detection, each side
// declares the other dead, and nothing would ever bring the sides
// together again. So a node with seeds joins them again, every
// rejoinEvery, while gossip knows fewer members than it once did. Joining
// a seed that is a member already is one state exchange with it.

// rejoinEvery is how often a node looks for members it lost.
func (n *Node) rejoinEvery() time.Duration {
	return max(10*n.cfg.Gossip.ProbeInterval, time.Second)
}

// notePeak records how many members gossip knows now, if it is the most
// it has known; the watcher calls it on every membership change.
func (n *Node) notePeak() int64 {
	members := int64(n.ml.NumMembers())
	for {
		peak := n.peakMembers.Load()
		if members <= peak || n.peakMembers.CompareAndSwap(peak, members) {
			return members
		}
	}
}

// rejoinSeeds joins the seeds again, in the background and one attempt at
// a time, if gossip knows fewer members than the most it has known.
func (n *Node) rejoinSeeds() {
	if n.notePeak() >= n.peakMembers.Load() {
		return
	}
	if len(n.cfg.Join) == 0 || !n.core().Member() || !n.rejoining.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.rejoining.Store(false)
		joined, err := n.ml.Join(n.cfg.Join)
		if joined > 0 {
			n.log.Info("joined the seeds again after losing members", "seeds", strings.Join(n.cfg.Join, ","), "members", n.ml.NumMembers())
			return
		}
		n.log.Debug("joining the seeds again: none answered", "seeds", strings.Join(n.cfg.Join, ","), "error", errString(err))
	}()
}
