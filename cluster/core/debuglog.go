package core

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

// Debug logging of where counts move: a transfer made, sent again,
// acknowledged, refused, given up on, applied or refused by its receiver;
// fallback counts sent to their owners or folded in; what arrived for keys
// moving here taken out and placed anew, or settled; replicas promoted.
// An operator who finds a count missing turns the cluster's logger to
// debug and follows the key's counts from node to node. Each line is
// written only when the logger is enabled at debug: with debug off it
// costs one Enabled check, and nothing here runs for a request decided by
// its owner.

var purposeNames = [...]string{
	purposeHandoff:   "handoff",
	purposeForward:   "forward",
	purposePull:      "pull",
	purposeReconcile: "fallback",
	purposeHeld:      "held",
	purposeReplica:   "replica",
	purposeRefund:    "refund",
	purposeCancel:    "cancel",
}

// String names the purpose, for logs.
func (p purpose) String() string {
	if int(p) < len(purposeNames) && purposeNames[p] != "" {
		return purposeNames[p]
	}
	return "purpose?"
}

// debugOn reports whether the core's logger writes debug lines.
func (c *Core) debugOn() bool { return c.log.Enabled(context.Background(), slog.LevelDebug) }

// debugStates is states as a log value: how many, the sum of their
// current counts, and the first few as key=cur/prev.
type debugStates []limiter.State

// debugShown is how many states a debug line lists one by one.
const debugShown = 8

// LogValue renders the states when the line is written.
func (s debugStates) LogValue() slog.Value {
	var b strings.Builder
	sum := uint64(0)
	for _, st := range s {
		if st.Kind < limiter.KindGrant {
			sum += uint64(st.Cur)
		}
	}
	fmt.Fprintf(&b, "n=%d sum=%d", len(s), sum)
	for i, st := range s {
		if i == debugShown {
			b.WriteString(" …")
			break
		}
		if st.Kind >= limiter.KindGrant {
			fmt.Fprintf(&b, " %016x=kind%d", uint64(st.Key), st.Kind)
			continue
		}
		fmt.Fprintf(&b, " %016x=%d/%d", uint64(st.Key), st.Cur, st.Prev)
	}
	return slog.StringValue(b.String())
}

// debugReqs is requests as a log value: the first few as key=units.
type debugReqs []limiter.Request

// LogValue renders the requests when the line is written.
func (r debugReqs) LogValue() slog.Value {
	var b strings.Builder
	fmt.Fprintf(&b, "n=%d", len(r))
	for i, q := range r {
		if i == debugShown {
			b.WriteString(" …")
			break
		}
		fmt.Fprintf(&b, " %016x=%d", uint64(q.Key), max(q.Cost, 1))
	}
	return slog.StringValue(b.String())
}

// debugTransfer writes a line about transfer t to (or from) peer. Replicas
// are left out: they go every ReplicateEvery and move no count.
func (c *Core) debugTransfer(msg string, peer Peer, t Transfer, p purpose, extra ...any) {
	if t.Mode == ModeReplica || !c.debugOn() {
		return
	}
	args := []any{"node", c.self.Name, "peer", peer.Name, "seq", t.Seq, "mode", t.Mode.String()}
	if p != 0 {
		args = append(args, "purpose", p.String())
	}
	if len(t.States) > 0 {
		args = append(args, "states", debugStates(t.States))
	}
	if len(t.Reqs) > 0 {
		args = append(args, "reqs", debugReqs(t.Reqs))
	}
	if t.Was != 0 {
		args = append(args, "was", t.Was, "was_to", t.WasTo.Name)
		if t.WasFrom.Name != "" {
			args = append(args, "was_from", t.WasFrom.Name)
		}
		if len(t.Earlier) > 0 {
			var earlier []string
			for _, m := range t.Earlier {
				earlier = append(earlier, fmt.Sprintf("%s:%d>%s", m.From.Name, m.Seq, m.To.Name))
			}
			args = append(args, "earlier", earlier)
		}
	}
	if t.Caller.Name != "" {
		args = append(args, "caller", t.Caller.Name)
	}
	if t.CountersOf.Name != "" {
		args = append(args, "counters_of", t.CountersOf.Name)
	}
	if t.Last {
		args = append(args, "last_word", true)
	}
	if t.ReplicaOf.Name != "" {
		args = append(args, "replica_of", t.ReplicaOf.Name)
	}
	if len(t.Holds) > 0 {
		held := make([]string, len(t.Holds))
		for i, h := range t.Holds {
			held[i] = fmt.Sprintf("%s:%016x=%d", h.Run.Name, uint64(h.State.Key), h.State.Cur)
			if h.Gen > 0 {
				held[i] = fmt.Sprintf("%s#%d:%016x=%d", h.Run.Name, h.Gen, uint64(h.State.Key), h.State.Cur)
			}
			if h.Last {
				held[i] += "(last)"
			}
		}
		args = append(args, "holds", held)
	}
	if len(t.Applied) > 0 {
		args = append(args, "applied", len(t.Applied))
	}
	if len(t.Taken) > 0 {
		taken := make([]string, len(t.Taken))
		for i, x := range t.Taken {
			taken[i] = fmt.Sprintf("%s:%d", x.Caller.Name, len(x.Seqs))
			if len(x.Waiting) > 0 {
				taken[i] += fmt.Sprintf("+%dwaiting", len(x.Waiting))
			}
			if x.By.Name != "" {
				taken[i] += "@" + x.By.Name
			}
		}
		args = append(args, "taken", taken)
	}
	if len(t.Cancels) > 0 {
		takes := make([]string, len(t.Cancels))
		for i, x := range t.Cancels {
			takes[i] = fmt.Sprint(x.Take)
			if x.To.Name != "" {
				takes[i] += "@" + x.To.Name
			}
		}
		args = append(args, "cancels", takes)
	}
	c.log.Debug(msg, append(args, extra...)...)
}

// debugCounts writes a line about counts that moved inside this node.
func (c *Core) debugCounts(msg string, states []limiter.State, extra ...any) {
	if len(states) == 0 || !c.debugOn() {
		return
	}
	c.log.Debug(msg, append([]any{"node", c.self.Name, "states", debugStates(states)}, extra...)...)
}

// debugGivenBack writes a line about units given back that wait here.
func (c *Core) debugGivenBack(msg string, reqs []limiter.Request) {
	if len(reqs) == 0 || !c.debugOn() {
		return
	}
	c.log.Debug(msg, "node", c.self.Name, "reqs", debugReqs(reqs))
}
