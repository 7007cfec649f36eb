package adminapi

import "time"

// PathDecisions lists (GET) and makes (POST) operator decisions;
// PathDecision/{id} lifts (DELETE) a key's decisions, ?zone= and ?action=
// narrowing which.
const (
	PathDecisions = "/tollgate/decisions"
	PathDecision  = "/tollgate/decisions/" // {id}
)

// The actions of a decision: block denies the key's requests in the zone
// with a 429 until the decision expires; allow lets them skip the zone's
// limits.
const (
	ActionBlock = "block"
	ActionAllow = "allow"
)

// QueryAction narrows DELETE /tollgate/decisions/{id} to one action.
const QueryAction = "action"

// Bounds of a decision: its duration (DefaultDecisionDuration when none is
// given), its reason, and how many decisions the cluster holds at once (the
// table travels whole to every node).
const (
	DefaultDecisionDuration = 24 * time.Hour
	MaxDecisionDuration     = 366 * 24 * time.Hour
	MaxDecisionReason       = 200
	MaxDecisions            = 10000
)

// DecisionRequest is the body of POST /tollgate/decisions.
type DecisionRequest struct {
	// Key is the key as the zone renders it (the client ID by default), or
	// its hashed ID (h:…). Only its hash is kept.
	Key string `json:"key"`
	// Zone is the zone the decision holds in; empty: every zone.
	Zone string `json:"zone,omitempty"`
	// Action is block or allow.
	Action string `json:"action"`
	// Duration is how long the decision holds: a duration string such as
	// 1h or 7d, or a number of seconds. Default 24h, at most 366d.
	Duration any `json:"duration,omitempty"`
	// Reason says why, for whoever reads the list later.
	Reason string `json:"reason,omitempty"`
}

// DecisionView is one decision in effect.
type DecisionView struct {
	// Key is the key's hashed ID: no raw key is kept.
	Key string `json:"key"`
	// Zone is the zone the decision holds in; empty: every zone.
	Zone    string `json:"zone,omitempty"`
	Action  string `json:"action"`
	Reason  string `json:"reason,omitempty"`
	Created string `json:"created"` // RFC 3339
	Expires string `json:"expires"` // RFC 3339
	// Origin is the node the decision was made on.
	Origin string `json:"origin,omitempty"`
}

// DecisionList is what GET /tollgate/decisions answers: the decisions in
// effect, the soonest to expire first.
type DecisionList struct {
	Items []DecisionView `json:"items"`
}

// DecisionsLifted is what DELETE /tollgate/decisions/{id} answers.
type DecisionsLifted struct {
	Lifted []DecisionView `json:"lifted"`
}

// DecisionMade is what POST /tollgate/decisions answers (201): the
// decision, and the one it replaced for the same key and zone, if any.
type DecisionMade struct {
	Decision DecisionView  `json:"decision"`
	Replaced *DecisionView `json:"replaced,omitempty"`
}

// PathZones lists (GET) the running config's zones with their settings.
const PathZones = "/tollgate/zones"

// ZoneConfig is one zone of the running config, as GET /tollgate/zones
// lists it: what it limits and how, for the status page and scripts.
type ZoneConfig struct {
	// Zone is the zone's name; Scope its identity (see ZoneView.Scope).
	Zone  string `json:"zone"`
	Scope string `json:"scope"`
	// Kind is rate (Limit per Window) or concurrent (Limit holders at once).
	Kind string `json:"kind"`
	// Limit is the requests per window, or the holders at once.
	Limit int64 `json:"limit"`
	// Window is the rate's period in seconds; for a concurrent zone, a
	// lease's TTL.
	Window float64 `json:"window_seconds"`
	// Algorithm is sliding_window, fixed_window, token_bucket or
	// concurrency.
	Algorithm string `json:"algorithm"`
	// Key is what the zone counts by, as configured; the client ID
	// ({http.tollgate.client_id}) by default.
	Key string `json:"key"`
	// Tiers are the tier limits in effect, by tier name: the config's,
	// with run-time overrides applied; left out when the zone has none.
	Tiers []TierLimit `json:"tiers,omitempty"`
	// Trial is true for a dry_run zone (or one of a dry_run handler): it
	// counts and reports, and denies nothing.
	Trial bool `json:"trial"`
}

// TierLimit is one tier's limit in a zone.
type TierLimit struct {
	Tier  string `json:"tier"`
	Limit int64  `json:"limit"`
}

// ZoneList is what GET /tollgate/zones answers, sorted by scope.
type ZoneList struct {
	Items []ZoneConfig `json:"items"`
}
