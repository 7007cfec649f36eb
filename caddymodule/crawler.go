package caddymodule

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/limiter"
)

// searchEngine is a search engine whose crawler can be verified: the
// User-Agent tokens its crawlers send, and the domains its documentation
// says their addresses' reverse names are under.
type searchEngine struct {
	name    string
	tokens  []string // any of them in a User-Agent claims this engine
	domains []string
}

// searchEngines are the engines whose crawlers are verified, each as its
// own documentation describes verifying them (reverse DNS, then a forward
// lookup that must give the address back).
var searchEngines = [...]searchEngine{
	{"google", []string{"Googlebot", "Google-InspectionTool", "GoogleOther", "Storebot-Google", "AdsBot-Google", "Mediapartners-Google"}, []string{"googlebot.com", "google.com", "googleusercontent.com"}},
	{"bing", []string{"bingbot", "BingPreview", "msnbot", "adidxbot"}, []string{"search.msn.com"}},
	{"apple", []string{"Applebot"}, []string{"applebot.apple.com"}},
	{"duckduckgo", []string{"DuckDuckBot", "DuckAssistBot"}, []string{"duckduckgo.com"}},
	{"yandex", []string{"YandexBot", "YandexImages", "YandexMobileBot", "YandexAccessibilityBot"}, []string{"yandex.ru", "yandex.net", "yandex.com"}},
	{"baidu", []string{"Baiduspider"}, []string{"baidu.com", "baidu.jp"}},
}

// claimedEngine returns the index of the engine whose crawler ua claims to
// be, or -1. It allocates nothing.
func claimedEngine(ua string) int {
	for i := range searchEngines {
		for _, t := range searchEngines[i].tokens {
			if strings.Contains(ua, t) {
				return i
			}
		}
	}
	return -1
}

// Bounds of crawler verification.
const (
	// crawlerTTL is how long a verdict is kept: a crawler is looked up
	// again after it, and so is a client whose claim failed.
	crawlerTTL = time.Hour
	// crawlerFailureTTL is how long an address is an ordinary client after
	// DNS failed to answer, before it is looked up again.
	crawlerFailureTTL = time.Minute
	// maxCrawlerCache bounds the verdicts kept, so that claims from many
	// addresses cannot grow memory.
	maxCrawlerCache = 4096
	// maxCrawlerLookups bounds the verifications under way at once; a claim
	// beyond them is an ordinary client for that request.
	maxCrawlerLookups = 16
	// crawlerLookupTimeout bounds one verification, both lookups together.
	crawlerLookupTimeout = 2 * time.Second
)

// resolver is the DNS a crawlerVerifier asks; *net.Resolver is one.
type resolver interface {
	LookupAddr(ctx context.Context, addr string) ([]string, error)
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// crawlerVerdict is what is known of a client that claims a crawler.
type crawlerVerdict struct {
	claimed  string // the engine the User-Agent names; "" for none
	engine   string // the engine DNS confirmed; "" unless verified
	verified bool
}

// crawlerVerifier verifies clients that claim to be a search engine's
// crawler: the reverse name of the client's address must be under one of
// the engine's domains, and that name must resolve back to the address.
// Verdicts are cached by a keyed hash of the address (no raw IP is kept),
// for crawlerTTL, at most maxCrawlerCache of them. It is process-wide, so a
// reload keeps its verdicts. Safe for concurrent use.
type crawlerVerifier struct {
	hasher  limiter.Hasher
	lookups chan struct{} // a slot per verification under way

	mu       sync.Mutex
	resolver resolver
	cache    map[uint64]crawlerEntry
}

// crawlerEntry is a cached verdict.
type crawlerEntry struct {
	verified bool
	expires  int64 // unix ns
}

// newCrawlerVerifier returns a verifier that asks r.
func newCrawlerVerifier(r resolver) *crawlerVerifier {
	key := make([]byte, 32)
	rand.Read(key)
	return &crawlerVerifier{
		hasher:   limiter.NewHasher(key),
		lookups:  make(chan struct{}, maxCrawlerLookups),
		resolver: r,
		cache:    make(map[uint64]crawlerEntry),
	}
}

// setResolver makes v ask r, forgetting what it knew.
func (v *crawlerVerifier) setResolver(r resolver) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.resolver = r
	clear(v.cache)
}

// cached returns how many verdicts v holds.
func (v *crawlerVerifier) cached() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.cache)
}

// verify returns the verdict on a client of address ip sending User-Agent
// ua at now: from the cache, else from DNS (within crawlerLookupTimeout). A
// client that claims no engine is not looked up.
func (v *crawlerVerifier) verify(ctx context.Context, ua, ip string, now time.Time) crawlerVerdict {
	i := claimedEngine(ua)
	if i < 0 {
		return crawlerVerdict{}
	}
	e := &searchEngines[i]
	out := crawlerVerdict{claimed: e.name}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return out
	}
	addr = addr.Unmap().WithZone("")
	key := v.hasher.Sum64(addr.String()) ^ uint64(i+1)*0x9e3779b97f4a7c15
	v.mu.Lock()
	c, ok := v.cache[key]
	r := v.resolver
	v.mu.Unlock()
	if ok && c.expires > now.UnixNano() {
		return v.verdict(out, c.verified)
	}
	select {
	case v.lookups <- struct{}{}:
	default:
		return out // too many under way: an ordinary client this time
	}
	ctx, cancel := context.WithTimeout(ctx, crawlerLookupTimeout)
	verified, answered := confirm(ctx, r, e, addr)
	cancel()
	<-v.lookups
	ttl := crawlerTTL
	if !answered {
		ttl = crawlerFailureTTL
	}
	v.store(key, crawlerEntry{verified: verified, expires: now.Add(ttl).UnixNano()}, now)
	return v.verdict(out, verified)
}

func (v *crawlerVerifier) verdict(out crawlerVerdict, verified bool) crawlerVerdict {
	if verified {
		out.engine, out.verified = out.claimed, true
	}
	return out
}

// store caches a verdict; a full cache drops its expired verdicts, then
// any.
func (v *crawlerVerifier) store(key uint64, e crawlerEntry, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cache[key]; !ok && len(v.cache) >= maxCrawlerCache {
		for k, c := range v.cache {
			if c.expires <= now.UnixNano() {
				delete(v.cache, k)
			}
		}
		for k := range v.cache {
			if len(v.cache) < maxCrawlerCache {
				break
			}
			delete(v.cache, k)
		}
	}
	v.cache[key] = e
}

// confirm asks r whether addr is a crawler of engine e: a reverse name
// under one of its domains that resolves back to addr. answered is false
// when DNS gave no answer at all (an error, a timeout).
func confirm(ctx context.Context, r resolver, e *searchEngine, addr netip.Addr) (verified, answered bool) {
	names, err := r.LookupAddr(ctx, addr.String())
	if err != nil {
		if dnsErr, ok := err.(*net.DNSError); ok && dnsErr.IsNotFound {
			return false, true
		}
		return false, false
	}
	for _, name := range names {
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		if !underDomain(name, e.domains) {
			continue
		}
		ips, err := r.LookupHost(ctx, name)
		if err != nil {
			continue
		}
		for _, s := range ips {
			if got, err := netip.ParseAddr(s); err == nil && got.Unmap() == addr {
				return true, true
			}
		}
	}
	return false, true
}

// underDomain reports whether name is one of domains or under one.
func underDomain(name string, domains []string) bool {
	for _, d := range domains {
		if name == d || strings.HasSuffix(name, "."+d) {
			return true
		}
	}
	return false
}

// verifiedCrawler reports whether r comes from a verified crawler.
func (v *crawlerVerifier) verifiedCrawler(r *http.Request, ip string, now time.Time) bool {
	return v.verify(r.Context(), r.Header.Get("User-Agent"), ip, now).verified
}

// VerifiedBot matches requests from a search engine's crawler verified by
// DNS: the User-Agent claims the engine's crawler, the reverse name of the
// client's address (Caddy's client IP, trusted_proxies applied) is under
// one of the engine's documented domains, and that name resolves back to
// the address. Verdicts are cached for an hour. Engines: google, bing,
// apple, duckduckgo, yandex, baidu.
//
// For the owner's own rules, e.g. a route crawlers take, or a zone that
// counts them:
//
//	@crawlers verified_bot
//	@google verified_bot google
type VerifiedBot struct {
	// Engines narrows the match to these engines' crawlers. Default: any
	// engine's.
	Engines []string `json:"engines,omitempty"`

	verifier *crawlerVerifier
}

// CaddyModule returns the Caddy module information.
func (*VerifiedBot) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.matchers.verified_bot", New: func() caddy.Module { return new(VerifiedBot) }}
}

// Provision finds the verifier of the tollgate app.
func (m *VerifiedBot) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("tollgate")
	if err != nil {
		return fmt.Errorf("loading tollgate app: %w", err)
	}
	m.verifier = appIface.(*App).state.crawlers
	return nil
}

// Validate rejects engines not known.
func (m *VerifiedBot) Validate() error {
	for _, name := range m.Engines {
		if !slices.ContainsFunc(searchEngines[:], func(e searchEngine) bool { return e.name == name }) {
			return fmt.Errorf("verified_bot: engine %q: must be one of %s", name, engineNames())
		}
	}
	return nil
}

// engineNames lists the engines verified_bot knows.
func engineNames() string {
	names := make([]string, len(searchEngines))
	for i, e := range searchEngines {
		names[i] = e.name
	}
	return strings.Join(names, ", ")
}

// MatchWithError reports whether r comes from a verified crawler (of one
// of Engines, if set).
func (m *VerifiedBot) MatchWithError(r *http.Request) (bool, error) {
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	ip, _ := vars[caddyhttp.ClientIPVarKey].(string)
	v := m.verifier.verify(r.Context(), r.Header.Get("User-Agent"), ip, time.Now())
	return v.verified && (len(m.Engines) == 0 || slices.Contains(m.Engines, v.engine)), nil
}

// UnmarshalCaddyfile reads the matcher:
//
//	verified_bot [<engine>...]
func (m *VerifiedBot) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	for d.Next() {
		m.Engines = append(m.Engines, d.RemainingArgs()...)
		if d.NextBlock(0) {
			return d.Err("verified_bot takes no block: verified_bot [<engine>...]")
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner                 = (*VerifiedBot)(nil)
	_ caddy.Validator                   = (*VerifiedBot)(nil)
	_ caddyhttp.RequestMatcherWithError = (*VerifiedBot)(nil)
	_ caddyfile.Unmarshaler             = (*VerifiedBot)(nil)
)
