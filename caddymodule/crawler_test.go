package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// fakeResolver answers reverse and forward lookups from tables, and counts
// the lookups it was asked.
type fakeResolver struct {
	mu      sync.Mutex
	ptr     map[string][]string // IP → names, with the trailing dot DNS gives
	forward map[string][]string // name → IPs
	fail    bool
	asked   atomic.Int64
}

func (f *fakeResolver) LookupAddr(_ context.Context, ip string) ([]string, error) {
	f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("no answer")
	}
	return f.ptr[ip], nil
}

func (f *fakeResolver) LookupHost(_ context.Context, name string) ([]string, error) {
	f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("no answer")
	}
	return f.forward[strings.TrimSuffix(name, ".")], nil
}

// crawlerDNS is the fake DNS of the tests: a genuine crawler of each
// engine, and the tricks a fake one tries.
func crawlerDNS() *fakeResolver {
	return &fakeResolver{
		ptr: map[string][]string{
			"66.249.66.1":    {"crawl-66-249-66-1.googlebot.com."},
			"157.55.39.1":    {"msnbot-157-55-39-1.search.msn.com."},
			"17.58.101.1":    {"17-58-101-1.applebot.apple.com."},
			"20.191.45.212":  {"duckduckbot.duckduckgo.com."},
			"5.255.253.1":    {"5-255-253-1.spider.yandex.com."},
			"220.181.108.1":  {"baiduspider-220-181-108-1.crawl.baidu.com."},
			"203.0.113.66":   {"crawl.googlebot.com.evil.example."}, // a suffix trick
			"203.0.113.67":   {"crawl-66-249-66-1.googlebot.com."},  // a PTR the owner of the IP wrote
			"203.0.113.68":   {"evilgooglebot.com."},
			"2001:db8::1":    {"crawl-2001-db8--1.googlebot.com."},
			"198.51.100.200": nil,
		},
		forward: map[string][]string{
			"crawl-66-249-66-1.googlebot.com":           {"66.249.66.1"},
			"msnbot-157-55-39-1.search.msn.com":         {"157.55.39.1"},
			"17-58-101-1.applebot.apple.com":            {"17.58.101.1"},
			"duckduckbot.duckduckgo.com":                {"20.191.45.212"},
			"5-255-253-1.spider.yandex.com":             {"5.255.253.1"},
			"baiduspider-220-181-108-1.crawl.baidu.com": {"220.181.108.1"},
			"crawl.googlebot.com.evil.example":          {"203.0.113.66"},
			"evilgooglebot.com":                         {"203.0.113.68"},
			"crawl-2001-db8--1.googlebot.com":           {"2001:db8::1"},
		},
	}
}

// User-Agents the engines document.
const (
	uaGooglebot  = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
	uaBingbot    = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"
	uaApplebot   = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.1.1 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)"
	uaDuckDuckGo = "DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)"
	uaYandex     = "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)"
	uaBaidu      = "Mozilla/5.0 (compatible; Baiduspider/2.0; +http://www.baidu.com/search/spider.html)"
	uaBrowser    = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
)

// TestCrawlerVerification: a client claiming a crawler is one only when
// its address's reverse name is under its engine's documented domain and
// that name resolves back to the address; every trick around that is an
// ordinary client, and so is a browser at a crawler's address.
func TestCrawlerVerification(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		ua, ip string
		want   string // the engine, or "" for an ordinary client
	}{
		{uaGooglebot, "66.249.66.1", "google"},
		{uaGooglebot, "2001:db8::1", "google"},
		{uaBingbot, "157.55.39.1", "bing"},
		{uaApplebot, "17.58.101.1", "apple"},
		{uaDuckDuckGo, "20.191.45.212", "duckduckgo"},
		{uaYandex, "5.255.253.1", "yandex"},
		{uaBaidu, "220.181.108.1", "baidu"},
		{uaGooglebot, "203.0.113.66", ""},   // googlebot.com.evil.example
		{uaGooglebot, "203.0.113.67", ""},   // the name does not resolve back to it
		{uaGooglebot, "203.0.113.68", ""},   // evilgooglebot.com is not googlebot.com
		{uaGooglebot, "198.51.100.200", ""}, // no reverse name
		{uaBingbot, "66.249.66.1", ""},      // Google's crawler address, Bing's name
		{uaBrowser, "66.249.66.1", ""},      // not a claim: no lookup either
		{"", "66.249.66.1", ""},
	} {
		v := newCrawlerVerifier(crawlerDNS())
		got := v.verify(context.Background(), tc.ua, tc.ip, now)
		if got.engine != tc.want || got.verified != (tc.want != "") {
			t.Errorf("%q from %s: %+v; want engine %q", tc.ua, tc.ip, got, tc.want)
		}
	}
}

// TestCrawlerVerdictsAreCachedForTheirTTL: a verdict is looked up once and
// kept for its TTL, then looked up again; a resolver that fails gives an
// ordinary client, kept only briefly; the cache stays bounded.
func TestCrawlerVerdictsAreCachedForTheirTTL(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	dns := crawlerDNS()
	v := newCrawlerVerifier(dns)
	ctx := context.Background()
	for range 3 {
		if !v.verify(ctx, uaGooglebot, "66.249.66.1", now).verified {
			t.Fatal("a genuine Googlebot was not verified")
		}
	}
	if n := dns.asked.Load(); n != 2 {
		t.Fatalf("%d lookups for 3 requests; want 2 (reverse and forward, once)", n)
	}
	v.verify(ctx, uaGooglebot, "66.249.66.1", now.Add(crawlerTTL-time.Second))
	if n := dns.asked.Load(); n != 2 {
		t.Fatalf("looked up again within the TTL (%d lookups)", n)
	}
	v.verify(ctx, uaGooglebot, "66.249.66.1", now.Add(crawlerTTL+time.Second))
	if n := dns.asked.Load(); n != 4 {
		t.Fatalf("%d lookups after the TTL; want a new verification", n)
	}

	dns.fail = true
	if v.verify(ctx, uaBingbot, "157.55.39.1", now).verified {
		t.Fatal("verified while DNS fails")
	}
	dns.fail = false
	if !v.verify(ctx, uaBingbot, "157.55.39.1", now.Add(crawlerFailureTTL+time.Second)).verified {
		t.Error("a genuine Bingbot stayed unverified after DNS came back")
	}

	for i := range 2 * maxCrawlerCache {
		v.verify(ctx, uaGooglebot, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), now)
	}
	if n := v.cached(); n > maxCrawlerCache {
		t.Errorf("the cache holds %d verdicts; the bound is %d", n, maxCrawlerCache)
	}
}

// TestVerifiedCrawlersPassTheChallenge: with the challenge on, a verified
// Googlebot's page load gets the page, never the challenge, and is still
// counted as its own client; a client only claiming to be Googlebot, and a
// browser, get the challenge. The verified_bot matcher lets the owner
// route verified crawlers.
func TestVerifiedCrawlersPassTheChallenge(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 4
		}
	}`, `
	tollgate {
		zone site {
			limit 3 1h
		}
	}
	@bots verified_bot
	respond @bots "hello crawler"
	respond "hello"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	st, err := currentState()
	if err != nil {
		t.Fatal(err)
	}
	st.crawlers.setResolver(crawlerDNS())

	page := func(ua, ip string) (int, string) {
		return srv.body("/", "User-Agent", ua, "Accept", "text/html,*/*", "X-Forwarded-For", ip)
	}
	for i := range 3 {
		if status, body := page(uaGooglebot, "66.249.66.1"); status != http.StatusOK || body != "hello crawler" {
			t.Fatalf("verified Googlebot, request %d: %d %q; want the page", i+1, status, body)
		}
	}
	if status, _ := page(uaGooglebot, "66.249.66.1"); status != http.StatusTooManyRequests {
		t.Errorf("verified Googlebot past its limit: %d; want 429 (still limited as its own client)", status)
	}
	if status, body := page(uaGooglebot, "203.0.113.67"); status != http.StatusOK || !strings.Contains(body, "<form") {
		t.Errorf("a fake Googlebot: %d %.60q; want the challenge page", status, body)
	}
	if status, body := page(uaBrowser, "66.249.66.2"); status != http.StatusOK || !strings.Contains(body, "<form") {
		t.Errorf("a browser: %d %.60q; want the challenge page", status, body)
	}
}
