package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

var testHasher = limiter.NewHasher([]byte("a test secret of at least 32 bytes long"))

// testZones returns n prepared rate zones z0…z(n-1), zone i allowing
// limit(i) requests per window.
func testZones(n int, window time.Duration, limit func(i int) int64) []*Zone {
	zones := make([]*Zone, n)
	for i := range zones {
		z := &Zone{Name: fmt.Sprintf("z%d", i), Limit: limit(i), Window: caddy.Duration(window)}
		z.prepare(testHasher)
		z.setScope(testHasher, z.Name)
		zones[i] = z
	}
	return zones
}

// testBatch builds, in sc, the batch of a request of the client with key
// hash client that every zone matches.
func testBatch(sc *scratch, zones []*Zone, client uint64) *batch {
	b := &sc.batch
	b.reset(sc)
	b.zones = append(b.zones, zones...)
	for zi, z := range zones {
		b.add(zi, limiter.Request{Key: limiter.ZoneKey(client, z.seed), Zone: z.seed, Limit: z.limit}, false, z.DryRun)
	}
	return b
}

// TestDecideAtFixedInstants drives the decision step alone, at fixed
// instants: every zone counts each allowed request, a denial spends nothing
// anywhere, the tightest zone speaks, and the window's end restores it.
func TestDecideAtFixedInstants(t *testing.T) {
	for _, n := range []int{1, 8, 9, 64} {
		t.Run(fmt.Sprint(n, " zones"), func(t *testing.T) {
			const window = time.Minute
			// The last zone is the tightest: 3 per minute; zone i allows 100-i.
			zones := testZones(n, window, func(i int) int64 {
				if i == n-1 {
					return 3
				}
				return int64(100 - i)
			})
			engine := limiter.New(limiter.Config{})
			node := cluster.Standalone(engine)
			t0 := time.Unix(1_700_000_000, 0)
			sc := new(scratch)
			for i := range 3 {
				o := decideAt(t0.Add(time.Duration(i)*time.Second), node, 0, testBatch(sc, zones, 42))
				if !o.allowed {
					t.Fatalf("request %d denied", i+1)
				}
				if z := sc.batch.zoneOfReq(o.speaker); z != zones[n-1] {
					t.Fatalf("request %d: %s speaks; want the tightest, %s", i+1, z.Name, zones[n-1].Name)
				}
			}
			b := testBatch(sc, zones, 42)
			o := decideAt(t0.Add(10*time.Second), node, 0, b)
			if o.allowed {
				t.Fatal("4th request allowed by a zone of 3")
			}
			if z := b.zoneOfReq(o.speaker); z != zones[n-1] {
				t.Fatalf("denial: %s speaks; want %s", z.Name, zones[n-1].Name)
			}
			if got := b.res[o.speaker].RetryAfter; got <= 0 || got > window {
				t.Fatalf("retry after %s; want within the window", got)
			}
			// Every other zone was spent exactly 3 times, not 4.
			for i, z := range zones[:n-1] {
				r := engine.Peek(t0.Add(10*time.Second), limiter.Request{Key: limiter.ZoneKey(42, z.seed), Zone: z.seed, Limit: z.limit})
				if want := int64(100 - i - 3); r.Remaining != want {
					t.Fatalf("zone %s: %d left; want %d", z.Name, r.Remaining, want)
				}
			}
			// Another client is untouched; the window's end restores the first.
			if o := decideAt(t0.Add(10*time.Second), node, 0, testBatch(sc, zones, 43)); !o.allowed {
				t.Fatal("another client denied")
			}
			if o := decideAt(t0.Add(2*window), node, 0, testBatch(sc, zones, 42)); !o.allowed {
				t.Fatal("denied two windows later")
			}
		})
	}
}

// TestBatchStaysInlineUpToEight checks that a batch of up to maxInline
// requests lives in the scratch arrays, and that a larger one spills.
func TestBatchStaysInlineUpToEight(t *testing.T) {
	sc := new(scratch)
	b := testBatch(sc, testZones(maxInline, time.Minute, func(int) int64 { return 5 }), 1)
	b.results()
	if &b.reqs[0] != &sc.reqs[0] || &b.res[0] != &sc.res[0] || &b.zoneOf[0] != &sc.zoneOf[0] {
		t.Fatal("a batch of maxInline requests left the scratch arrays")
	}
	eight := testZones(maxInline, time.Minute, func(int) int64 { return 1 << 30 })
	node := cluster.Standalone(limiter.New(limiter.Config{}))
	t0 := time.Unix(1_700_000_000, 0)
	decideAt(t0, node, 0, testBatch(sc, eight, 1))
	if n := testing.AllocsPerRun(100, func() {
		decideAt(t0, node, 0, testBatch(sc, eight, 1))
	}); n != 0 {
		t.Fatalf("building and deciding %d zones allocates %v times", maxInline, n)
	}
	b = testBatch(sc, testZones(maxInline+1, time.Minute, func(int) int64 { return 5 }), 1)
	b.results()
	if len(b.res) != maxInline+1 || len(b.zoneOf) != maxInline+1 {
		t.Fatalf("a batch of %d: %d results, %d zone indexes", maxInline+1, len(b.res), len(b.zoneOf))
	}
	// The next batch starts inline again.
	b = testBatch(sc, testZones(2, time.Minute, func(int) int64 { return 5 }), 1)
	if &b.reqs[0] != &sc.reqs[0] {
		t.Fatal("after a large batch, a small one did not return to the scratch arrays")
	}
}

// TestHoldLeasesMarksTheNamedOnes builds a batch where lease zones sit past
// the inline size, and checks that each held lease keeps its own "named".
func TestHoldLeasesMarksTheNamedOnes(t *testing.T) {
	zones := testZones(10, time.Minute, func(int) int64 { return 5 })
	own := &Zone{Name: "own", Concurrent: 2}
	own.prepare(testHasher)
	own.setScope(testHasher, "own")
	named := &Zone{Name: "named", Concurrent: 2, Lease: "room"}
	named.prepare(testHasher)
	named.setScope(testHasher, "named")
	zones[7], zones[9] = own, named
	sc := new(scratch)
	b := &sc.batch
	b.reset(sc)
	b.zones = append(b.zones, zones...)
	for zi, z := range zones {
		b.add(zi, limiter.Request{Key: limiter.ZoneKey(1, z.seed), Zone: z.seed, Limit: z.limit, LeaseID: uint64(zi)*2 + 1}, z == named, false)
	}
	h := &Handler{decider: standaloneDecider{engine: limiter.New(limiter.Config{})}}
	held := h.holdLeases(b)
	if held == nil || len(held.reqs) != 2 {
		t.Fatalf("held %v; want the two lease zones' leases", held)
	}
	if held.reqs[0].LeaseID != 15 || held.named[0] || held.reqs[1].LeaseID != 19 || !held.named[1] {
		t.Fatalf("held leases %d (named %v), %d (named %v); want 15 own, 19 named",
			held.reqs[0].LeaseID, held.named[0], held.reqs[1].LeaseID, held.named[1])
	}
}

// TestManyZonesThroughCaddy serves requests through handlers of 1, 8, 9
// and 64 zones: each counts exactly, and the tightest zone denies.
func TestManyZonesThroughCaddy(t *testing.T) {
	for _, n := range []int{1, 8, 9, 64} {
		t.Run(fmt.Sprint(n, " zones"), func(t *testing.T) {
			var site strings.Builder
			site.WriteString("\ttollgate {\n")
			for i := range n {
				limit := 100 - i
				if i == n-1 {
					limit = 3
				}
				fmt.Fprintf(&site, "\t\tzone z%d {\n\t\t\tlimit %d 1h\n\t\t}\n", i, limit)
			}
			site.WriteString("\t}\n\trespond \"{http.tollgate.decision} {http.tollgate.zone}\"")
			srv := startCaddy(t, "", site.String())
			testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

			for i := range 3 {
				resp := srv.get("/")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: %d", i+1, resp.StatusCode)
				}
				if i == 2 {
					want := fmt.Sprintf(`"z%d";r=0;`, n-1)
					if n > 1 {
						want = fmt.Sprintf(`"z0";r=97;`)
					}
					if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
						t.Fatalf("RateLimit after 3: %q; want it to start %s", got, want)
					}
					if parts := strings.Count(resp.Header.Get("RateLimit"), ";r="); parts != n {
						t.Fatalf("RateLimit names %d zones; want %d", parts, n)
					}
				}
			}
			status, _ := srv.body("/")
			if status != http.StatusTooManyRequests {
				t.Fatalf("4th request: %d; want 429", status)
			}
			if resp := srv.get("/"); !strings.Contains(resp.Header.Get("RateLimit"), fmt.Sprintf(`"z%d";r=0;`, n-1)) {
				t.Fatalf("after the denials, RateLimit %q; want z%d at 0", resp.Header.Get("RateLimit"), n-1)
			}
		})
	}
}

// BenchmarkDecideAt decides a request's batch on a single node, for
// handlers of 1, 8 (the most held inline) and 9 zones (spilling to the
// heap), and 8 zones of which one is a dry-run trial.
func BenchmarkDecideAt(b *testing.B) {
	for _, tc := range []struct {
		name  string
		zones int
		trial bool
	}{{"1_zone", 1, false}, {"8_zones", 8, false}, {"9_zones", 9, false}, {"8_zones_one_trial", 8, true}} {
		b.Run(tc.name, func(b *testing.B) {
			zones := testZones(tc.zones, time.Hour, func(int) int64 { return 1 << 30 })
			zones[0].DryRun = tc.trial
			node := cluster.Standalone(limiter.New(limiter.Config{}))
			sc := new(scratch)
			t0 := time.Unix(1_700_000_000, 0)
			b.ReportAllocs()
			for b.Loop() {
				decideAt(t0, node, 0, testBatch(sc, zones, 42))
			}
		})
	}
}
