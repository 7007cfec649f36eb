package cluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// do sends c and waits for its outcome: a take driver's call.
func (p *peerClient) do(c *call, deadline time.Time) error {
	p.send(c, deadline)
	return c.wait()
}

// takeCall makes a call taking reqs for nobody's reputation.
func takeCall(reqs []limiter.Request) *call {
	return newTakeCall(&core.TakeItem{Seq: 1, Op: core.OpTake, Reqs: reqs}, nil)
}

// testDialer is the dialer of a node that was never started.
func testDialer(n *Node) *dialer {
	return &dialer{
		self: core.Peer{Name: "tester", Inc: 1}, authKey: n.authKey, timeout: time.Second, silence: n.cfg.CallTimeout,
		log: n.log, observer: noObserver{},
	}
}

// fmtOf prints a message for comparison: empty and nil lists alike.
func fmtOf(m any) string {
	return strings.ReplaceAll(fmt.Sprintf("%+v", m), "[]", "<nil>")
}
