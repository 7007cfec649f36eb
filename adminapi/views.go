package adminapi

import (
	"encoding/json"
	"time"
)

// Times in the answers: a duration is a number of seconds in a field whose
// name ends in _seconds; an instant is an RFC 3339 string in UTC, to the
// second.

// Status is what GET /tollgate/status answers: this node's view of the
// cluster, whether the nodes agree on the ring, and the counters it holds.
type Status struct {
	// Cluster is this node's view of the cluster.
	Cluster ClusterView `json:"cluster"`
	// Ring says whether every node routes keys by the same ring as this one.
	Ring RingAgreement `json:"ring_agreement"`
	// Keys counts the counters this node holds.
	Keys KeyStats `json:"keys"`
	// Memory estimates the memory those counters take.
	Memory MemoryStats `json:"memory"`
}

// ClusterView is a node's view of the cluster. A standalone node has no
// fallback: its fallback fields and LastRingChange are left out.
type ClusterView struct {
	// Node is this node's name; "local" for a single node.
	Node string `json:"node"`
	// Standalone is true for a single node, which has no peers.
	Standalone bool `json:"standalone"`
	// RingFingerprint names the ring this node routes keys by: nodes with
	// equal fingerprints agree on every key's owner.
	RingFingerprint string `json:"ring_fingerprint"`
	// Members are the nodes of the ring, this one included.
	Members []MemberView `json:"members"`
	// PeersInFallback are the peers whose keys this node decides by its
	// fallback now; empty everywhere in a healthy cluster.
	PeersInFallback []string `json:"peers_in_fallback"`
	// FallbackMode is what this node does with a request whose owner it
	// cannot reach: local, open or closed.
	FallbackMode string `json:"fallback_mode,omitempty"`
	// FallbackRatio multiplies limits while counting for an unreachable
	// owner.
	FallbackRatio *float64 `json:"fallback_ratio,omitempty"`
	// FallbackKeys is how many counters the fallback holds now.
	FallbackKeys *int `json:"fallback_keys,omitempty"`
	// Activations counts the times a peer became unreachable and its keys
	// went to fallback.
	Activations *uint64 `json:"fallback_activations,omitempty"`
	// HandedOffIn counts the counters other nodes handed to this one when
	// keys moved to it.
	HandedOffIn uint64 `json:"counters_received"`
	// Pulled counts the counters this node pulled from their old owners.
	Pulled uint64 `json:"counters_pulled"`
	// PeerFrames counts the frames of counting calls this node sent to
	// its peers.
	PeerFrames uint64 `json:"peer_frames"`
	// PeerItems counts the counting calls those frames carried: calls to
	// one peer share a frame.
	PeerItems uint64 `json:"peer_items"`
	// LastRingChange is the instant the membership last changed.
	LastRingChange string `json:"last_ring_change,omitempty"`
}

// MemberView is one member of the ring, as a node sees it.
type MemberView struct {
	// Name identifies the node: its advertised gossip address by default.
	Name string `json:"name"`
	// PeerAddr is where the node answers peer calls; none for a single
	// node.
	PeerAddr string `json:"peer_addr,omitempty"`
	// State is self, alive, unreachable (calls or pings to it fail; its
	// keys are in fallback) or leaving (it announced a graceful stop).
	State string `json:"state"`
	// Share is the fraction of keys the node owns, 0 to 1.
	Share float64 `json:"ring_share"`
	// Fallback is true while calls to the node go to the fallback.
	Fallback bool `json:"fallback"`
}

// RingAgreement says whether every node routes keys by the same ring as the
// one asked: each node's ring fingerprint, asked within the lists' 2
// seconds.
type RingAgreement struct {
	// Agreed is true when every node answered with this node's fingerprint.
	Agreed bool `json:"agreed"`
	// Fingerprints are the nodes' ring fingerprints, by node name.
	Fingerprints map[string]string `json:"fingerprints"`
	// Unreachable are the nodes that did not answer in time.
	Unreachable []string `json:"unreachable_nodes"`
}

// KeyStats counts the counters a node holds and what happened to those it
// dropped.
type KeyStats struct {
	// Held is how many counters the node holds now.
	Held int `json:"held"`
	// Max is the bound on counters held (max_keys).
	Max int `json:"max"`
	// Reclaimed counts expired counters dropped to make room.
	Reclaimed uint64 `json:"reclaimed"`
	// Evicted counts live counters, not exhausted, dropped to make room,
	// least recently used first.
	Evicted uint64 `json:"evicted"`
	// Overflowed counts new keys counted in their zone's shared overflow
	// counter because nothing could be dropped.
	Overflowed uint64 `json:"overflowed"`
	// Swept counts expired counters dropped in the background.
	Swept uint64 `json:"swept"`
}

// MemoryStats estimates the memory a node's counters take.
type MemoryStats struct {
	// CounterBytes is the estimate, in bytes.
	CounterBytes int64 `json:"counter_bytes_estimate"`
}

// ClientView is what GET /tollgate/clients/{id} answers: the client's
// counters in every zone (or the zone asked for), as their owner sees them.
type ClientView struct {
	// ID is the {id} asked for, as given.
	ID string `json:"id"`
	// Owner is the node that counts the key.
	Owner string `json:"owner"`
	// Replica is the node that keeps a copy of the key's counters and
	// counts them if the owner is gone; empty on a node alone.
	Replica string `json:"replica,omitempty"`
	// Zones are the key's counters, one per zone identity.
	Zones []ZoneView `json:"zones"`
	// Reputation is the score of the client with this ID (0 to 100,
	// rounded), when reputation is on.
	Reputation *int `json:"reputation,omitempty"`
	// Tier is the tier the limits are shown for: ?tier= as asked, or ""
	// for the default tier (requests with no tier or an unlisted one).
	Tier string `json:"tier"`
}

// ZoneView is one zone's counter for a key.
type ZoneView struct {
	// Zone is the zone's name.
	Zone string `json:"zone"`
	// Scope is the zone's identity: its name, or, when several handlers
	// declare that name, the name and the handler's place (name@place).
	// A network's budget ends in " network".
	Scope string `json:"scope"`
	// Algorithm is sliding_window, fixed_window, token_bucket or, in a
	// concurrent zone, concurrency.
	Algorithm string `json:"algorithm"`
	// Limit is the key's own limit (its slots, in a concurrent zone): the
	// zone's limit for the tier asked, run-time overrides included, scaled
	// by the reputation of the client with this ID, as the RateLimit
	// headers show it. IP pressure, which depends on the address a request
	// comes from, is not applied. A network's budget is its share of the
	// zone's limit.
	Limit int64 `json:"limit"`
	// ZoneLimit is the zone's configured limit (its slots, in a concurrent
	// zone), whatever the tier and reputation.
	ZoneLimit int64 `json:"zone_limit"`
	// Window is the period of Limit, in seconds (a lease's TTL, in a
	// concurrent zone).
	Window float64 `json:"window_seconds"`
	// Remaining is what the key may still spend now.
	Remaining int64 `json:"remaining"`
	// Reset is the seconds until the quota is fully restored, or, when
	// Exhausted, until a request would pass (the t of a 429's RateLimit
	// header; an allowed response's t is the sooner time until more quota
	// is available).
	Reset int64 `json:"reset_seconds"`
	// Exhausted is true when the key's next request would be denied.
	Exhausted bool `json:"exhausted"`
	// Source says who answered: owner (this node), peer (the owner,
	// another node) or fallback (the owner could not be reached: these are
	// this node's fallback counts).
	Source string `json:"source"`
	// BannedFor is, in a zone with ban, the seconds the key is still
	// banned for (rounded up); 0 or absent when it is not. DELETE on the
	// client lifts the ban.
	BannedFor int64 `json:"banned_seconds,omitempty"`
	// Grant is the key's grant in a limit zone, if it has one.
	Grant *GrantView `json:"grant,omitempty"`
	// Leases are the key's leases in a concurrent zone.
	Leases []LeaseView `json:"leases,omitempty"`
}

// LeaseView is one lease a key holds in a concurrent zone.
type LeaseView struct {
	// ID names the lease, in hex.
	ID string `json:"id"`
	// Expires is the instant the lease frees its slot unless renewed.
	Expires string `json:"expires"`
}

// ResetResult is what DELETE /tollgate/clients/{id} answers.
type ResetResult struct {
	// ID is the {id} reset, as given.
	ID string `json:"id"`
	// ZonesReset are the names of the zones whose counters were dropped.
	ZonesReset []string `json:"zones_reset"`
	// Unreachable are the nodes that could not be told; their blocked
	// caches forget the key when its denial expires.
	Unreachable []string `json:"unreachable_peers"`
}

// Page is a page of a list, in a stable order: the lists are GET
// /tollgate/denied (DeniedList) and GET /tollgate/grants (GrantList).
// Each node keeps what it saw; a list asks every node at once.
type Page[T any] struct {
	// Items are the page's entries, ordered by zone scope, then key, with
	// keys as hashed IDs.
	Items []T `json:"items"`
	// NextCursor, when there are more entries, is what to pass as
	// ?cursor= for the next page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Unreachable are the nodes that did not answer in time: what only
	// they know is missing from the page.
	Unreachable []string `json:"unreachable_nodes"`
}

// DeniedList is what GET /tollgate/denied answers: a page of the keys
// denied now, across the cluster.
type DeniedList = Page[DeniedKey]

// DeniedKey is one key denied now in a zone: a client's key, by its own
// budget, or an IP network, by the budget its requests without a session
// share.
type DeniedKey struct {
	// Zone is the zone's name.
	Zone string `json:"zone"`
	// Scope is the zone's identity (see ZoneView.Scope); a network's
	// budget ends in " network".
	Scope string `json:"scope"`
	// Key is the key's hashed ID (see HashedID), or, for a network, its
	// network ID (see NetworkID).
	Key string `json:"key"`
	// Budget says whose budget denied: BudgetClient (the key's own) or
	// BudgetNetwork (its network's, shared by its requests without a
	// session).
	Budget string `json:"budget"`
	// Denials counts the key's denials the nodes saw.
	Denials uint64 `json:"denials"`
	// RetryAfter is the seconds until the key is let through again,
	// rounded up.
	RetryAfter int64 `json:"retry_after_seconds"`
	// Until is the instant the key is let through again, rounded up to the
	// second: waiting until then is always enough.
	Until string `json:"denied_until"`
}

// The budgets a denial comes from, as DeniedKey.Budget, the denial log's
// budget and the reason label of tollgate_denials_total name them.
const (
	BudgetClient  = "client"
	BudgetNetwork = "network"
)

// NetworkScopeSuffix ends the scope of a zone's network budget.
const NetworkScopeSuffix = " network"

// TiersView is what GET, PUT and DELETE /tollgate/tiers answer, with the
// header ETag: TiersETag(OverridesVersion).
type TiersView struct {
	// Zones are every zone's tier limits, by scope: a zone's name, or
	// name@place when several handlers declare that name, so that each
	// shows with its own default and config tiers.
	Zones map[string]TierView `json:"zones"`
	// OverridesVersion is the version of the run-time overrides (Unix
	// nanoseconds of the change), to send back in If-Match; 0 before any
	// override was set.
	OverridesVersion int64 `json:"overrides_version,omitempty"`
	// OverridesOrigin is the node the overrides were last changed on.
	OverridesOrigin string `json:"overrides_origin,omitempty"`
}

// DefaultTier names, in the tier overrides, the default tier: requests
// with no tier or one the zone does not list. Until it is overridden they
// get the zone's own limit; no config declares a tier of this name.
const DefaultTier = "default"

// TierView is one zone's tier limits.
type TierView struct {
	// Zone is the zone's name, which PUT takes.
	Zone string `json:"zone"`
	// Kind is limit or concurrent.
	Kind string `json:"kind"`
	// Default is the config's limit of requests of no known tier; an
	// override of it is Overrides[DefaultTier].
	Default int64 `json:"default"`
	// Caddyfile are the config's tier limits, tier → limit.
	Caddyfile map[string]int64 `json:"caddyfile"`
	// Overrides are the limits set through the admin API, which win over
	// the config's.
	Overrides map[string]int64 `json:"overrides"`
	// Effective are the limits in effect, tier → limit.
	Effective map[string]int64 `json:"effective"`
}

// TierOverrides is the body of PUT /tollgate/tiers: zone name → tier →
// limit, naming every override to keep. It replaces the overrides whole.
type TierOverrides map[string]map[string]int64

// GrantRequest is the body of POST /tollgate/grants.
type GrantRequest struct {
	// Zone is the name of a limit zone.
	Zone string `json:"zone"`
	// Key is the key as the zone renders it (the client ID by default), or
	// its hashed ID.
	Key string `json:"key"`
	// Amount is the extra quota, a whole number from 1.
	Amount int64 `json:"amount"`
	// Duration is how long the grant holds: a number of seconds, or a
	// duration string such as "168h" or "7d".
	Duration json.RawMessage `json:"duration"`
}

// GrantView is a grant, as POST /tollgate/grants and GET
// /tollgate/grants/{zone}/{key} answer it (an array of them when zones of
// several handlers share the name: one per scope).
type GrantView struct {
	// Zone is the zone's name.
	Zone string `json:"zone"`
	// Scope is the zone's identity (see ZoneView.Scope).
	Scope string `json:"scope"`
	// Key is the key as given, or its hashed ID in a list.
	Key string `json:"key"`
	// Version names the grant (a UUID): a newer grant replaces it.
	Version string `json:"version"`
	// Amount is the extra quota granted.
	Amount int64 `json:"amount"`
	// Used is how much of it was spent, as the key's owner counts it.
	Used int64 `json:"used"`
	// Remaining is Amount less Used.
	Remaining int64 `json:"remaining"`
	// Created is the instant the grant was given.
	Created string `json:"created"`
	// Expires is the instant the grant ends.
	Expires string `json:"expires"`
}

// GrantRevoked is what DELETE /tollgate/grants/{zone}/{key} answers.
type GrantRevoked struct {
	// Zone is the zone's name, as given.
	Zone string `json:"zone"`
	// Key is the key, as given.
	Key string `json:"key"`
	// Revoked is true: a key without a grant gets 404 instead.
	Revoked bool `json:"revoked"`
}

// GrantList is what GET /tollgate/grants answers: a page of the grants
// that hold now, given through any node. A grant whose owner cannot be
// asked is left out.
type GrantList = Page[GrantView]

// ReputationView is what GET /tollgate/reputation answers: how many clients
// are in each reputation bucket, across the cluster.
type ReputationView struct {
	// Enabled is false when reputation is off; then Buckets is empty.
	Enabled bool `json:"enabled"`
	// Buckets are the bands of scores, from the highest down.
	Buckets []ReputationBucket `json:"buckets"`
	// Unreachable are the nodes that could not be asked.
	Unreachable []string `json:"unreachable_nodes"`
}

// StreamUpdate is one event of GET /tollgate/stream, a server-sent event
// stream ("data: " and the JSON of a StreamUpdate, a blank line) with one
// event every StreamInterval, for StreamLifetime: what the status page
// shows, read on one request, so an open page costs Caddy's admin log one
// line a minute instead of several a second. A browser's EventSource opens
// it again when it ends.
type StreamUpdate struct {
	// Status is what GET /tollgate/status answers.
	Status Status `json:"status"`
	// Denied is the first page (MaxDeniedPage) of GET /tollgate/denied.
	Denied DeniedList `json:"denied"`
	// Reputation is what GET /tollgate/reputation answers.
	Reputation ReputationView `json:"reputation"`
	// Decisions is what GET /tollgate/decisions answers.
	Decisions DecisionList `json:"decisions"`
	// Zones is what GET /tollgate/zones answers.
	Zones ZoneList `json:"zones"`
	// History is what GET /tollgate/history answers, in the first event
	// and whenever a new step has ended since the last one sent; absent
	// otherwise.
	History *History `json:"history,omitempty"`
}

// The pace of GET /tollgate/stream.
const (
	StreamInterval = time.Second
	StreamLifetime = time.Minute
)

// ReputationBucket is one band of reputation scores.
type ReputationBucket struct {
	// From is the lowest score of the band.
	From float64 `json:"from"`
	// Factor multiplies the limits of the clients in the band.
	Factor float64 `json:"factor"`
	// Clients counts the clients in the band; those never penalized, or
	// fully recovered, are not counted.
	Clients int `json:"clients"`
}
