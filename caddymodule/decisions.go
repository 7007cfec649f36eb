package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
)

// An operator's decision blocks a key, or lets it skip the limits, in one
// zone or in every zone, until it expires. Decisions are a cluster's shared
// value like the tier table: made on any node, held by every node, kept in
// storage; the table is replaced whole, the newest version winning.

// opDecision is one decision. Only the key's hash is kept.
type opDecision struct {
	Key     string `json:"key"`            // the key's hashed ID, h:…, or a network's ID, n:…
	Zone    string `json:"zone,omitempty"` // "" for every zone
	Action  string `json:"action"`         // adminapi.ActionBlock or ActionAllow
	Reason  string `json:"reason,omitempty"`
	Created int64  `json:"created"`          // Unix ns
	Expires int64  `json:"expires"`          // Unix ns
	Origin  string `json:"origin,omitempty"` // the node it was made on

	hash    uint64 // Key, parsed when the table is vetted
	network bool   // Key is a network's ID
}

func (d *opDecision) heldAt(now time.Time) bool { return now.UnixNano() < d.Expires }

// decisionKey finds a decision: a key's (or a network's) hash and the
// zone it holds in.
type decisionKey struct {
	hash    uint64
	network bool
	zone    string
}

// decisionTable is the decisions in effect. Immutable once built; replaced
// whole.
type decisionTable struct {
	Records []opDecision `json:"records"`
	Version int64        `json:"version"` // Unix ns of the change
	Origin  string       `json:"origin"`  // the node it was made on

	index    map[decisionKey]int // into Records; built by vet
	networks int                 // records of networks, counted by vet
}

// decisionsSharedName is the name of the table among the cluster's shared
// values, and decisionsStorageKey where each node keeps it.
const (
	decisionsSharedName = "decisions"
	decisionsStorageKey = "tollgate/decisions.json"
)

// vet checks every record and builds the index: what arrives from storage
// or another node is checked as the admin API checks a new decision.
func (t *decisionTable) vet() error {
	if len(t.Records) > adminapi.MaxDecisions {
		return fmt.Errorf("decisions: %d records; at most %d", len(t.Records), adminapi.MaxDecisions)
	}
	t.index = make(map[decisionKey]int, len(t.Records))
	t.networks = 0
	for i := range t.Records {
		d := &t.Records[i]
		h, ok := adminapi.ParseHashedID(d.Key)
		if !ok {
			if h, ok = adminapi.ParseNetworkID(d.Key); ok {
				d.network = true
				t.networks++
			}
		}
		if !ok {
			return fmt.Errorf("decision %d: key %q is not a hashed ID (h: and 16 hex digits) or a network ID (n: and 16 hex digits)", i, d.Key)
		}
		if d.Action != adminapi.ActionBlock && d.Action != adminapi.ActionAllow {
			return fmt.Errorf("decision %d: action %q; must be block or allow", i, d.Action)
		}
		if err := checkDecisionReason(d.Reason); err != nil {
			return fmt.Errorf("decision %d: %w", i, err)
		}
		if d.Expires <= d.Created {
			return fmt.Errorf("decision %d: expires before it was made", i)
		}
		d.hash = h
		k := decisionKey{h, d.network, d.Zone}
		if _, dup := t.index[k]; dup {
			return fmt.Errorf("decision %d: a second decision for key %s in zone %q", i, d.Key, d.Zone)
		}
		t.index[k] = i
	}
	return nil
}

// checkDecisionReason refuses a reason too long to list, or with control
// characters that would break a table or a log line.
func checkDecisionReason(s string) error {
	if n := len([]rune(s)); n > adminapi.MaxDecisionReason {
		return fmt.Errorf("reason of %d characters; at most %d", n, adminapi.MaxDecisionReason)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("reason %q has a control character (%U); write it on one line, in printable characters", s, r)
		}
	}
	return nil
}

// lookup returns the decision that holds at now for a request of a key
// from a network (0: none known) in a zone: a block, of the key or of the
// network, in the zone or in every zone, wins over an allow.
func (t *decisionTable) lookup(hash, network uint64, zone string, now time.Time) *opDecision {
	keys := [4]decisionKey{{hash, false, zone}, {hash, false, ""}, {network, true, zone}, {network, true, ""}}
	n := 2
	if network != 0 && t.networks > 0 {
		n = 4
	}
	var found *opDecision
	for _, k := range keys[:n] {
		i, ok := t.index[k]
		if !ok {
			continue
		}
		d := &t.Records[i]
		if !d.heldAt(now) {
			continue
		}
		if d.Action == adminapi.ActionBlock {
			return d
		}
		found = d
	}
	return found
}

// held returns the records that hold at now, the soonest to expire first.
func (t *decisionTable) held(now time.Time) []opDecision {
	if t == nil {
		return nil
	}
	out := make([]opDecision, 0, len(t.Records))
	for _, d := range t.Records {
		if d.heldAt(now) {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Expires != out[j].Expires {
			return out[i].Expires < out[j].Expires
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// sharedValue returns t as the cluster shares it: the records alone, the
// version and origin being the shared value's.
func (t *decisionTable) sharedValue() cluster.SharedValue {
	raw, _ := json.Marshal(t.Records)
	return cluster.SharedValue{Value: raw, Version: t.Version, Origin: t.Origin}
}

// decisionTableOf returns the table a shared value carries, vetted.
func decisionTableOf(v cluster.SharedValue) (*decisionTable, error) {
	t := &decisionTable{Version: v.Version, Origin: v.Origin}
	if err := json.Unmarshal(v.Value, &t.Records); err != nil {
		return nil, fmt.Errorf("decoding decisions: %w", err)
	}
	return t, t.vet()
}

// decodeDecisionTable reads the table as storage keeps it, and vets it.
func decodeDecisionTable(b []byte) (*decisionTable, error) {
	t := new(decisionTable)
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("decoding decisions: %w", err)
	}
	return t, t.vet()
}

// decisionsHolder is the decision table in effect on this node, kept
// across reloads.
type decisionsHolder struct {
	p atomic.Pointer[decisionTable]
	// mu serialises changes made through the admin API, so a change reads
	// the table and replaces it in one step.
	mu sync.Mutex
}

func (h *decisionsHolder) load() *decisionTable { return h.p.Load() }

// active returns the table if it has a record, else nil: the handler's
// whole cost when no decision was ever made, or all were lifted.
func (h *decisionsHolder) active() *decisionTable {
	if t := h.p.Load(); t != nil && len(t.Records) > 0 {
		return t
	}
	return nil
}

// store replaces the table if t is newer, and reports whether it did.
func (h *decisionsHolder) store(t *decisionTable) bool {
	return storeNewer(&h.p, t, func(t *decisionTable) (int64, string) { return t.Version, t.Origin })
}

// restoreDecisions installs the decisions kept in storage.
func (s *state) restoreDecisions(ctx context.Context, logger *zap.Logger) {
	b, ok := s.loadStored(ctx, logger, decisionsStorageKey, "the operator decisions")
	if !ok {
		return
	}
	t, err := decodeDecisionTable(b)
	if err != nil {
		logger.Error("reading the operator decisions; starting without them", zap.Error(err))
		return
	}
	s.decisions.store(t)
	s.restoreShared(decisionsSharedName, t.sharedValue())
}

// saveDecisions keeps the decision table in storage.
func (s *state) saveDecisions(t *decisionTable) error { return s.storeJSON(decisionsStorageKey, t) }

// decisionsArrived puts a newer decision table from another node in
// effect and keeps it in storage.
func (s *state) decisionsArrived(logger *zap.Logger, v cluster.SharedValue) {
	t, err := decisionTableOf(v)
	if err != nil {
		logger.Error("operator decisions from another node", zap.Error(err))
		return
	}
	if s.decisions.store(t) {
		logger.Info("operator decisions changed on another node", zap.String("origin", t.Origin), zap.Int("records", len(t.Records)))
		if err := s.saveDecisions(t); err != nil {
			logger.Error("keeping the operator decisions", zap.Error(err))
		}
	}
}

// What checkDecisions found for a request.
const (
	decisionsNone    = iota // no decision: the limits decide
	decisionsBlocked        // a block holds: deny, as q's verdict says
	decisionsAllowed        // every zone that matched is allowed: pass on
)

// checkDecisions applies the operators' decisions to a request whose
// batch b is built and not yet decided. A block in any zone that matched
// denies the request, its verdict set for the usual 429 (Retry-After until
// the block expires). An allow drops its zone from b, so those limits do
// not count the request; when no zone is left it is passed on. With no
// decision in effect it costs one atomic load.
func (h *Handler) checkDecisions(w http.ResponseWriter, q *request, now time.Time, b *batch, who *asker) int {
	t := h.app.state.decisions.active()
	if t == nil {
		return decisionsNone
	}
	var network uint64 // the request's network, when a decision names networks
	if t.networks > 0 {
		network = h.app.requestNetwork(who, q)
	}
	allowed := 0
	var allow [8]bool // by zone; more zones than that are rare, and then looked up again
	for zi, z := range b.zones {
		if h.DryRun || z.DryRun {
			continue // a trial zone denies nothing and skips nothing
		}
		d := t.lookup(b.keys[zi], network, z.Name, now)
		if d == nil {
			continue
		}
		if d.Action == adminapi.ActionBlock {
			h.blockedByDecision(w, q, now, z, b.keys[zi], who, d)
			return decisionsBlocked
		}
		allowed++
		if zi < len(allow) {
			allow[zi] = true
		}
	}
	if allowed == 0 {
		return decisionsNone
	}
	if allowed == len(b.zones) {
		return decisionsAllowed
	}
	b.dropZones(func(zi int, z *Zone) bool {
		if zi < len(allow) {
			return allow[zi]
		}
		if h.DryRun || z.DryRun {
			return false
		}
		d := t.lookup(b.keys[zi], network, z.Name, now)
		return d != nil && d.Action == adminapi.ActionAllow
	})
	return decisionsNone
}

// dropZones removes from b the zones drop names, with their keys and
// requests, keeping the order of the rest.
func (b *batch) dropZones(drop func(zi int, z *Zone) bool) {
	newIndex := make([]int, len(b.zones)) // rare: only for a key allowed in some zones
	zones, keys := b.zones[:0], b.keys[:0]
	for zi, z := range b.zones {
		if drop(zi, z) {
			newIndex[zi] = -1
			continue
		}
		newIndex[zi] = len(zones)
		zones, keys = append(zones, z), append(keys, b.keys[zi])
	}
	n := 0
	for i := range b.reqs {
		to := newIndex[b.zoneOf[i]]
		if to < 0 {
			continue
		}
		b.reqs[n], b.zoneOf[n], b.named[n], b.dry[n], b.network[n] = b.reqs[i], to, b.named[i], b.dry[i], b.network[i]
		n++
	}
	b.zones, b.keys = zones, keys
	b.reqs, b.zoneOf, b.named, b.dry, b.network = b.reqs[:n], b.zoneOf[:n], b.named[:n], b.dry[:n], b.network[:n]
}

// blockedByDecision sets the verdict of a request a block denies, counts
// and logs the denial (by hashed IDs only) and sets Retry-After.
func (h *Handler) blockedByDecision(w http.ResponseWriter, q *request, now time.Time, z *Zone, keyHash uint64, who *asker, d *opDecision) {
	v := q.verdict()
	v.identity, v.pressure, v.tier = who.identity, who.pressure, who.tier
	v.identifier, v.vars = h.app.identifier, q.vars
	v.source, v.byDecision = cluster.SourceOwner, true
	v.zone, v.remaining = z, 0
	v.retryAfter = headerSeconds(time.Duration(d.Expires - now.UnixNano()))
	v.reset = v.retryAfter
	v.decision = decisionDeny
	z.denials.incDecision()
	if ce := h.logger.Check(zapcore.InfoLevel, "request denied"); ce != nil {
		ce.Write(
			zap.String("zone", z.Name),
			zap.String("reason", reasonDecision),
			zap.String("client_hash", adminapi.HashedID(who.key)),
			zap.String("key_hash", adminapi.HashedID(keyHash)),
			zap.Bool("network_decision", d.network), // then the decision's key is the request's network
			zap.String("client_kind", v.identity.Kind.String()),
			zap.Int64("retry_after", v.retryAfter),
		)
	}
	h.events.Emit(h.ctx, "tollgate_denied", map[string]any{
		"zone":        z.Name,
		"retry_after": v.retryAfter,
		"source":      reasonDecision,
		"dry_run":     false,
	})
	w.Header().Set("Retry-After", fmt.Sprint(v.retryAfter))
}

// requestNetwork returns the hash of the IP network a request comes from,
// as {http.tollgate.network} renders it: a session's is hashed here, once.
func (a *App) requestNetwork(who *asker, q *request) uint64 {
	if who.identity.Network == 0 && a.identifier != nil {
		who.identity.Network = a.identifier.Network(q.clientIP())
	}
	return who.identity.Network
}
