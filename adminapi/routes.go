package adminapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The routes under /tollgate/. A path ending in "/" takes what follows it:
// a client's ID, or a grant's zone and key.
const (
	PathStatus     = "/tollgate/status"
	PathClients    = "/tollgate/clients/" // {id}
	PathDenied     = "/tollgate/denied"
	PathTiers      = "/tollgate/tiers"
	PathGrants     = "/tollgate/grants"
	PathGrant      = "/tollgate/grants/" // {zone}/{key}
	PathReputation = "/tollgate/reputation"
	PathUI         = "/tollgate/ui"
	PathHash       = "/tollgate/hash"
	PathStream     = "/tollgate/stream"
)

// Route is one route: its path (see the Path constants) and the methods it
// takes; any other method gets 405 with Allow listing these.
type Route struct {
	Path    string   // one of the Path constants
	Methods []string // the methods it takes, as Allow lists them
}

// Routes returns every route under /tollgate/, in the order a path is
// matched against them.
func Routes() []Route {
	return []Route{
		{PathStatus, []string{http.MethodGet}},
		{PathClients, []string{http.MethodGet, http.MethodDelete}},
		{PathDenied, []string{http.MethodGet}},
		{PathTiers, []string{http.MethodGet, http.MethodPut, http.MethodDelete}},
		{PathGrants, []string{http.MethodGet, http.MethodPost}},
		{PathGrant, []string{http.MethodGet, http.MethodDelete}},
		{PathReputation, []string{http.MethodGet}},
		{PathUI, []string{http.MethodGet}},
		{PathHash, []string{http.MethodPost}},
		{PathStream, []string{http.MethodGet}},
		{PathDecisions, []string{http.MethodGet, http.MethodPost}},
		{PathDecision, []string{http.MethodDelete}},
		{PathZones, []string{http.MethodGet}},
		{PathHistory, []string{http.MethodGet}},
	}
}

// Matches reports whether path is rt's: the path itself, or, for a route
// ending in "/", any path under it.
func (rt Route) Matches(path string) bool {
	return path == rt.Path || strings.HasSuffix(rt.Path, "/") && strings.HasPrefix(path, rt.Path)
}

// ClientPath is the path of a client, GET and DELETE
// /tollgate/clients/{id}: id is a raw key or a hashed ID.
func ClientPath(id string) string { return PathClients + PathSegment(id) }

// GrantPath is the path of a key's grant in a zone, GET and DELETE
// /tollgate/grants/{zone}/{key}: key is a raw key or a hashed ID.
func GrantPath(zone, key string) string {
	return PathGrant + PathSegment(zone) + "/" + PathSegment(key)
}

// PathSegment escapes one segment of an admin path, a key or a zone: "."
// and ".." are escaped too, as the admin endpoint would otherwise take
// them for a move up the path.
func PathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

// The query parameters of the routes: zone narrows GET and DELETE
// /tollgate/clients/{id} and the lists to the zones of one name; tier
// names the tier GET /tollgate/clients/{id} shows the key's limits for;
// limit and cursor page the lists.
const (
	QueryZone   = "zone"
	QueryTier   = "tier"
	QueryLimit  = "limit"
	QueryCursor = "cursor"
)

// Page sizes of the lists (GET /tollgate/denied, GET /tollgate/grants):
// DefaultPageSize without ?limit=, at most MaxDeniedPage and MaxGrantsPage
// (each grant listed is read at its owner).
const (
	DefaultPageSize = 100
	MaxDeniedPage   = 1000
	MaxGrantsPage   = 100
)

// MaxBody bounds the body of a request (PUT /tollgate/tiers, POST
// /tollgate/grants): 1 MiB. A larger one gets 413.
const MaxBody = 1 << 20

// TiersETag renders the version of the tier overrides (overrides_version)
// as the ETag of GET /tollgate/tiers, which a change sends back in
// If-Match to apply only to the table it read.
func TiersETag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// Error is the body of every error answer under /tollgate/: Caddy's admin
// error, with a 4xx or 5xx status.
type Error struct {
	// Message says what went wrong and what to do instead.
	Message string `json:"error"`
}
