package adminapi

import "time"

// PathHistory answers (GET) this node's counts of the last hour, step by
// step: what the status page charts. With ?nodes=all (QueryNodes =
// NodesAll) a cluster node answers the sum of every node's counts.
const PathHistory = "/tollgate/history"

// QueryNodes asks GET /tollgate/history for the counts of every node
// (NodesAll) instead of this node's.
const (
	QueryNodes = "nodes"
	NodesAll   = "all"
)

// The history a node keeps: HistoryStep apart, HistorySpan long. It is
// kept from the node's start, whether or not a page is open.
const (
	HistoryStep = 10 * time.Second
	HistorySpan = time.Hour
)

// History is what GET /tollgate/history answers: this node's counts over
// the last hour, one number per step and series, oldest first. Every
// series has one number per entry of Ends.
type History struct {
	// StepSeconds is the length of a step.
	StepSeconds int64 `json:"step_seconds"`
	// Ends are the end of each step, in Unix seconds, oldest first.
	Ends []int64 `json:"ends"`
	// Zones are the zones that counted requests, by name, sorted.
	Zones []ZoneHistory `json:"zones"`
	// Challenges counts the proofs of work received, by result (passed,
	// malformed, forged, expired, network, work, replayed).
	Challenges map[string][]int64 `json:"challenges"`
	// Nodes names the nodes whose counts are summed, sorted, when a
	// cluster's history was asked for (?nodes=all); absent for one node's.
	// Each node's steps are counted in the step of the sum that ends at or
	// after theirs.
	Nodes []string `json:"nodes,omitempty"`
	// Unanswered names the nodes that did not answer in time: their counts
	// are missing from the sum.
	Unanswered []string `json:"unanswered,omitempty"`
}

// ZoneHistory is one zone's counts in each step: every zone of that name
// (each scope) together, as the zones' metrics count them.
type ZoneHistory struct {
	// Zone is the zone's name.
	Zone string `json:"zone"`
	// Allowed counts the requests the zone let through (speaking for
	// them: tollgate_decisions_total with outcome allow).
	Allowed []int64 `json:"allowed"`
	// Denied counts the requests denied, dry runs' would-be denials
	// included (tollgate_denials_total): the sum of DeniedBy.
	Denied []int64 `json:"denied"`
	// DeniedBy splits Denied by reason: client, network, ban, decision.
	DeniedBy map[string][]int64 `json:"denied_by"`
}
