package caddymodule

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// listRecords keeps what this node saw that the admin lists show: the keys
// it denied lately and the grants given through it. It is process-wide, so
// a reload keeps it; each node answers for its own through a gather.
type listRecords struct {
	denied deniedRecord
	grants grantRecord
}

// maxRecorded bounds each record, so memory stays bounded under attack.
const maxRecorded = 10000

// recordID is an entry's place in a record: a zone's scope and a key.
type recordID struct {
	scope string
	key   uint64
}

// expiring is an entry of a record, which holds it until it expires.
type expiring interface {
	expiry() int64 // unix ns
}

// keyedRecord holds entries by scope and key until they expire, for the admin
// lists. Its owner bounds it when it adds one, under mu.
type keyedRecord[E expiring] struct {
	mu sync.Mutex
	m  map[recordID]E
}

// dropExpired drops the entries expired at now. Call with mu held.
func (r *keyedRecord[E]) dropExpired(now time.Time) {
	for k, e := range r.m {
		if e.expiry() <= now.UnixNano() {
			delete(r.m, k)
		}
	}
}

// put stores e at id, making the map first if need be. Call with mu held.
func (r *keyedRecord[E]) put(id recordID, e E) {
	if r.m == nil {
		r.m = make(map[recordID]E)
	}
	r.m[id] = e
}

// list returns the entries that hold at now, dropping the others.
func (r *keyedRecord[E]) list(now time.Time) []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropExpired(now)
	out := make([]E, 0, len(r.m))
	for _, e := range r.m {
		out = append(out, e)
	}
	return out
}

// forget drops key in the named scopes (all when scopes is empty).
func (r *keyedRecord[E]) forget(key uint64, scopes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.m {
		if id.key == key && (len(scopes) == 0 || slices.Contains(scopes, id.scope)) {
			delete(r.m, id)
		}
	}
}

// deniedEntry is one key a zone denied, until when, and how often.
type deniedEntry struct {
	Zone    string `json:"zone"`
	Scope   string `json:"scope"`
	Key     uint64 `json:"key"`
	Until   int64  `json:"until"` // unix ns: let through again from then
	Denials uint64 `json:"denials"`
}

func (e deniedEntry) expiry() int64 { return e.Until }

// deniedRecord holds the keys denied lately, each until its denial ends.
type deniedRecord struct {
	keyedRecord[deniedEntry]
	swept int64 // unix ns of the last sweep of a full record
}

// record notes a denial of key in a zone, until the instant it is let
// through again. When the record is full it drops expired entries, then
// any one entry.
func (d *deniedRecord) record(zone, scope string, key uint64, until, now time.Time) {
	id := recordID{scope, key}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.m[id]; ok {
		e.Until = max(e.Until, until.UnixNano())
		e.Denials++
		d.m[id] = e
		return
	}
	if len(d.m) >= maxRecorded {
		// Full: drop the expired entries, at most once a second so that a
		// flood of denials does not scan the record each time, then any
		// one entry.
		if now.UnixNano()-d.swept >= int64(time.Second) {
			d.swept = now.UnixNano()
			d.dropExpired(now)
		}
		for k := range d.m {
			if len(d.m) < maxRecorded {
				break
			}
			delete(d.m, k)
		}
	}
	d.put(id, deniedEntry{Zone: zone, Scope: scope, Key: key, Until: until.UnixNano(), Denials: 1})
}

// grantEntry is one grant given through this node's admin API.
type grantEntry struct {
	Zone    string `json:"zone"`
	Scope   string `json:"scope"`
	Key     uint64 `json:"key"`
	Created int64  `json:"created"`
	Expires int64  `json:"expires"`
}

func (e grantEntry) expiry() int64 { return e.Expires }

// grantRecord holds the grants given through this node, until they expire
// or are revoked.
type grantRecord struct {
	keyedRecord[grantEntry]
}

// record notes a grant given at now. When the record is full it drops
// expired entries; if it is full still, the grant holds but is not listed.
func (g *grantRecord) record(e grantEntry, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.m) >= maxRecorded {
		g.dropExpired(now)
		if len(g.m) >= maxRecorded {
			return
		}
	}
	g.put(recordID{e.Scope, e.Key}, e)
}

// Gather questions the nodes answer from their records.
const (
	gatherDenied       = "tollgate.denied"
	gatherDeniedForget = "tollgate.denied.forget"
	gatherGrants       = "tollgate.grants"
	gatherGrantsForget = "tollgate.grants.forget"
	gatherRing         = "tollgate.ring"
	gatherHistory      = "tollgate.history"
)

// gatherWithin is how long a list waits for the other nodes.
const gatherWithin = 2 * time.Second

// forgetQuestion is the body of the forget questions.
type forgetQuestion struct {
	Key    uint64   `json:"key"`
	Scopes []string `json:"scopes,omitempty"`
}

// answerGather answers another node's (or this node's) list question.
func (s *state) answerGather(name string, body []byte) []byte {
	now := time.Now()
	var v any
	switch name {
	case gatherDenied:
		v = s.lists.denied.list(now)
	case gatherGrants:
		v = s.lists.grants.list(now)
	case gatherHistory:
		v = s.history.view()
	case gatherRing:
		s.mu.Lock()
		node := s.node
		s.mu.Unlock()
		if node == nil {
			return nil
		}
		return []byte(node.Ring().Fingerprint())
	case gatherDeniedForget, gatherGrantsForget:
		var q forgetQuestion
		if json.Unmarshal(body, &q) != nil {
			return nil
		}
		if name == gatherDeniedForget {
			s.lists.denied.forget(q.Key, q.Scopes)
		} else {
			s.lists.grants.forget(q.Key, q.Scopes)
		}
		return nil
	default:
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// gatherEntries asks every node for its record and merges the answers.
func gatherEntries[T any](node *cluster.Node, question string) ([]T, []string) {
	res := node.Gather(question, nil, gatherWithin)
	var all []T
	for _, b := range res.Answers {
		var part []T
		if json.Unmarshal(b, &part) == nil {
			all = append(all, part...)
		}
	}
	return all, res.Unanswered
}

// forgetEverywhere tells every node to drop key from a record, without
// waiting for slow ones longer than a list would.
func forgetEverywhere(node *cluster.Node, question string, key uint64, scopes []string) {
	b, _ := json.Marshal(forgetQuestion{Key: key, Scopes: scopes})
	node.Gather(question, b, gatherWithin)
}

// page reads the limit and cursor of a list request.
type page struct {
	limit int
	after recordCursor
}

// recordCursor is where a page starts: after this scope and key.
type recordCursor struct {
	Scope string `json:"s"`
	Key   uint64 `json:"k"`
	set   bool
}

func (c recordCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c recordCursor) before(scope string, key uint64) bool {
	return !c.set || scope > c.Scope || scope == c.Scope && key > c.Key
}

// readPage reads the limit and cursor of a list request, the limit at
// most maxLimit.
func readPage(r *http.Request, maxLimit int) (page, error) {
	p := page{limit: min(adminapi.DefaultPageSize, maxLimit)}
	q := r.URL.Query()
	if s := q.Get(adminapi.QueryLimit); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return p, badRequest("limit %q: must be a whole number from 1 to %d", s, maxLimit)
		}
		p.limit = n
	}
	if s := q.Get(adminapi.QueryCursor); s != "" {
		raw, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || json.Unmarshal(raw, &p.after) != nil {
			return p, badRequest("cursor %q: not a cursor this API gave; use next_cursor of the previous page as it is", s)
		}
		p.after.set = true
	}
	return p, nil
}

// handleDenied serves GET /tollgate/denied[?zone=][&limit=][&cursor=].
func (adminAPI) handleDenied(w http.ResponseWriter, r *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	entries, next, missing, err := gatherPage(app, r, adminapi.MaxDeniedPage, gatherDenied, func(had, e deniedEntry) deniedEntry {
		had.Until, had.Denials = max(had.Until, e.Until), had.Denials+e.Denials
		return had
	})
	if err != nil {
		return err
	}
	out := adminapi.DeniedList{Items: []adminapi.DeniedKey{}, NextCursor: next, Unreachable: missing}
	now := time.Now()
	for _, e := range entries {
		until := time.Unix(0, e.Until)
		key, budget := adminapi.HashedID(e.Key), adminapi.BudgetClient
		if strings.HasSuffix(e.Scope, adminapi.NetworkScopeSuffix) {
			key, budget = adminapi.NetworkID(e.Key), adminapi.BudgetNetwork
		}
		out.Items = append(out.Items, adminapi.DeniedKey{
			Zone: e.Zone, Scope: e.Scope, Key: key, Budget: budget, Denials: e.Denials,
			RetryAfter: headerSeconds(until.Sub(now)), Until: instantAfter(until),
		})
	}
	return writeJSON(w, out)
}

// listGrants serves GET /tollgate/grants[?zone=][&limit=][&cursor=]: the
// grants given through any node's admin API that still hold, with their
// use as their owners count it.
func (a *App) listGrants(w http.ResponseWriter, r *http.Request) error {
	entries, next, missing, err := gatherPage(a, r, adminapi.MaxGrantsPage, gatherGrants, func(had, e grantEntry) grantEntry {
		if e.Created > had.Created {
			return e // the newer grant replaced the older
		}
		return had
	})
	if err != nil {
		return err
	}
	zones := map[string]*Zone{}
	for _, z := range a.zonesNamed("") {
		zones[z.scope] = z
	}
	out := adminapi.GrantList{Items: []adminapi.GrantView{}, NextCursor: next, Unreachable: missing}
	for _, e := range entries {
		z := zones[e.Scope]
		if z == nil {
			continue // a zone no longer in the config
		}
		g, ok, err := a.node.GetGrant(limiter.ZoneKey(e.Key, z.seed))
		if err != nil || !ok {
			continue // revoked, expired, or its owner cannot be asked now
		}
		out.Items = append(out.Items, grantView(z, adminapi.HashedID(e.Key), g))
	}
	return writeJSON(w, out)
}

// listed is an entry of a list: it has a place, by zone scope and key.
type listed interface {
	place() recordID
}

func (e deniedEntry) place() recordID { return recordID{e.Scope, e.Key} }

func (e grantEntry) place() recordID { return recordID{e.Scope, e.Key} }

// gatherPage answers the list request r from every node's record (the
// gather question): the entries of the zones asked for (?zone=) that come
// after the page's cursor, those of one place merged, in list order (by
// scope, then key). It returns at most the page's limit of them (?limit=,
// at most maxLimit), the cursor of the next page when there are more, and
// the nodes that did not answer.
func gatherPage[E listed](a *App, r *http.Request, maxLimit int, question string, merge func(had, e E) E) (page []E, next string, missing []string, err error) {
	scopes, err := a.listScopes(r.URL.Query().Get(adminapi.QueryZone))
	if err != nil {
		return nil, "", nil, err
	}
	pg, err := readPage(r, maxLimit)
	if err != nil {
		return nil, "", nil, err
	}
	entries, missing := gatherEntries[E](a.node, question)
	merged := map[recordID]E{}
	for _, e := range entries {
		id := e.place()
		if scopes != nil && !scopes[strings.TrimSuffix(id.scope, adminapi.NetworkScopeSuffix)] || !pg.after.before(id.scope, id.key) {
			continue
		}
		if had, ok := merged[id]; ok {
			e = merge(had, e)
		}
		merged[id] = e
	}
	ids := slices.SortedFunc(maps.Keys(merged), func(a, b recordID) int {
		return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.key, b.key))
	})
	if len(ids) > pg.limit {
		last := ids[pg.limit-1]
		next = recordCursor{Scope: last.scope, Key: last.key}.encode()
		ids = ids[:pg.limit]
	}
	page = make([]E, len(ids))
	for i, id := range ids {
		page[i] = merged[id]
	}
	return page, next, missing, nil
}

// listScopes returns the scopes of the zones called name, nil for every
// zone, or a 404 naming the zones there are.
func (a *App) listScopes(name string) (map[string]bool, error) {
	if name == "" {
		return nil, nil
	}
	zones := a.zonesNamed(name)
	if len(zones) == 0 {
		return nil, notFound("no zone %q in the running config; it has %s", name, strings.Join(a.zoneNames(), ", "))
	}
	out := map[string]bool{}
	for _, z := range zones {
		out[z.scope] = true
	}
	return out, nil
}
