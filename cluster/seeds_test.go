package cluster

import (
	"testing"
	"time"
)

// A split that outlasts failure detection heals by itself: each side
// declares the other dead, and the nodes with seeds join them again, with
// no operator and no restart.
func TestSplitLongerThanDetectionHealsByItself(t *testing.T) {
	c := newFaultCluster(t, 3, 1)
	c.net.set(func() { c.net.side["n0"] = 1 }) // n0 | n1 n2
	eventually(t, 10*time.Second, "both sides declaring the other dead", func() bool {
		return c.slots[0].node.Ring().Len() == 1 && c.slots[1].node.Ring().Len() == 2 && c.slots[2].node.Ring().Len() == 2
	})
	time.Sleep(time.Second) // well past detection: the dead are forgotten
	c.net.heal()
	eventually(t, 15*time.Second, "one ring of three again, without a manual join", func() bool {
		fp := c.slots[0].node.Ring().Fingerprint()
		for _, s := range c.slots {
			if r := s.node.Ring(); r.Len() != 3 || r.Fingerprint() != fp {
				return false
			}
		}
		return true
	})
}
