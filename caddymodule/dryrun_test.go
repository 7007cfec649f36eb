package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

func testReputation() *limiter.ReputationPolicy {
	return &limiter.ReputationPolicy{Penalty: 1, RecoveryPerHour: 10, Buckets: limiter.DefaultReputationBuckets()}
}

// TestDryRunZoneHasNoConsequences decides at fixed instants for a handler
// with an enforced zone, a dry-run rate zone and a dry-run lease zone: the
// trial zone counts and reports, and leaves the client's reputation and
// the leases untouched.
func TestDryRunZoneHasNoConsequences(t *testing.T) {
	engine := limiter.New(limiter.Config{})
	engine.SetReputation(testReputation())
	node := cluster.Standalone(engine)
	zones := testZones(2, time.Hour, func(i int) int64 { return []int64{100, 2}[i] })
	api, trial := zones[0], zones[1]
	trial.DryRun = true
	room := &Zone{Name: "room", Concurrent: 1, DryRun: true}
	room.prepare(testHasher)
	room.setScope(testHasher, "room")
	zones = append(zones, room)
	client := limiter.ZoneKey(7, testHasher.Zone("reputation"))
	t0 := time.Unix(1_700_000_000, 0)

	sc := new(scratch)
	for i := range 5 {
		b := testBatch(sc, zones, 7)
		b.reqs[2].LeaseID = uint64(2*i + 1) // a request's own lease each time
		o := decideAt(t0.Add(time.Duration(i)*time.Second), node, client, b)
		if !o.allowed {
			t.Fatalf("request %d denied: a dry-run zone must never deny", i+1)
		}
		if wantDry := i >= 2; o.dryDenied != wantDry {
			t.Fatalf("request %d: dry-run denial %v; want %v", i+1, o.dryDenied, wantDry)
		}
		if o.dryDenied && b.zoneOfReq(o.speaker) != trial {
			t.Fatalf("request %d: %s speaks for the dry-run denial; want trial", i+1, b.zoneOfReq(o.speaker).Name)
		}
		if h := (&Handler{decider: node}).holdLeases(b); h != nil {
			t.Fatalf("request %d: a dry-run lease zone claimed %d leases", i+1, len(h.reqs))
		}
	}
	now := t0.Add(5 * time.Second)
	if s := engine.Reputation(now, client); s != limiter.FullScore {
		t.Errorf("reputation after 3 dry-run denials = %v; want %v", s, limiter.FullScore)
	}
	if r := engine.Peek(now, limiter.Request{Key: limiter.ZoneKey(7, api.seed), Zone: api.seed, Limit: api.limit}); r.Remaining != 95 {
		t.Errorf("enforced zone: %d left; want 95 (5 spent)", r.Remaining)
	}
	if r := engine.Peek(now, limiter.Request{Key: limiter.ZoneKey(7, trial.seed), Zone: trial.seed, Limit: trial.limit}); r.Allowed || r.Remaining != 0 {
		t.Errorf("trial zone: allowed %v, %d left; want its 2 counted", r.Allowed, r.Remaining)
	}
	if l := engine.Leases(now, limiter.ZoneKey(7, room.seed)); len(l) != 0 {
		t.Errorf("dry-run lease zone holds %d leases; want none", len(l))
	}

	// When an enforced zone denies, the trial is only looked at: nothing
	// is spent in it, and the real denial speaks.
	tight := testZones(1, time.Hour, func(int) int64 { return 1 })[0]
	probe := testZones(1, time.Hour, func(int) int64 { return 10 })[0]
	probe.DryRun = true
	probe.setScope(testHasher, "probe")
	pair := []*Zone{probe, tight} // the dry one first: order must not matter
	decideAt(now, node, client, testBatch(sc, pair, 8))
	b := testBatch(sc, pair, 8)
	o := decideAt(now, node, client, b)
	if o.allowed || b.zoneOfReq(o.speaker) != tight {
		t.Fatalf("second request past an enforced limit of 1: allowed %v, speaker %s", o.allowed, b.zoneOfReq(o.speaker).Name)
	}
	if r := engine.Peek(now, limiter.Request{Key: limiter.ZoneKey(8, probe.seed), Zone: probe.seed, Limit: probe.limit}); r.Remaining != 9 {
		t.Errorf("trial zone beside a real denial: %d left; want 9 (only the allowed request spent)", r.Remaining)
	}
}

// TestDryRunLeavesNoBlockedCacheEntry decides on a node that does not own
// the keys: a trial zone's denial by the owner is not cached, so the next
// request asks the owner again rather than being answered from the cache.
func TestDryRunLeavesNoBlockedCacheEntry(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef-dryrun")
	cfg := func(join ...string) cluster.Config {
		return cluster.Config{
			Bind: "127.0.0.1:0", PeerListen: "127.0.0.1:0", Secret: secret, Join: join,
			Gossip:      cluster.GossipTuning{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, GossipInterval: 20 * time.Millisecond, SuspicionMult: 2},
			CallTimeout: time.Second,
		}
	}
	a, err := cluster.Start(cfg(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := cluster.Start(cfg(a.GossipAddr()), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testutil.Eventually(t, 15*time.Second, "two nodes in one ring", func() bool {
		return a.Ring().Len() == 2 && b.Ring().Len() == 2 && a.Ring().Fingerprint() == b.Ring().Fingerprint()
	})

	trial := testZones(1, time.Hour, func(int) int64 { return 1 })[0]
	trial.DryRun = true
	client := uint64(1) << 32 // the high half routes
	for ; a.Owner(limiter.ZoneKey(client, trial.seed)).Name != b.Name(); client += 1 << 32 {
	}
	sc := new(scratch)
	testutil.Eventually(t, 15*time.Second, "the owner answering", func() bool {
		b := testBatch(sc, []*Zone{trial}, client)
		return a.Peek(time.Now(), b.reqs, make([]limiter.Result, 1)) == cluster.SourcePeer
	})
	decideAt(time.Now(), a, 0, testBatch(sc, []*Zone{trial}, client)) // spends the 1
	// The cache takes its entries a moment after they are set: keep
	// asking for a while; every answer must come from the owner.
	for i := range 40 {
		batch := testBatch(sc, []*Zone{trial}, client)
		o := decideAt(time.Now(), a, 0, batch)
		if !o.allowed || !o.dryDenied {
			t.Fatalf("trial request %d past its limit: allowed %v, dry-run denial %v", i+1, o.allowed, o.dryDenied)
		}
		if o.source != cluster.SourcePeer {
			t.Fatalf("trial request %d answered by %s; want the owner (peer), never the blocked cache", i+1, o.source)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDryRunThroughCaddy: a trial zone on a live site never denies, says
// what it would have done, and leaves the client's reputation as it was; a
// dry-run handler issues no session cookie.
func TestDryRunThroughCaddy(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 100 1h
			key {http.request.header.X-User}
		}
		zone trial {
			limit 2 1h
			key {http.request.header.X-User}
			dry_run
		}
	}
	respond "{http.tollgate.decision} {http.tollgate.zone} {http.tollgate.reputation}"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	var body string
	for i := range 6 {
		var status int
		status, body = srv.body("/", "X-User", "bob")
		if status != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, status)
		}
	}
	if body != "dry_run_deny trial 100.0" {
		t.Errorf("after 6 requests against a trial of 2: %q; want dry_run_deny by trial, reputation still 100.0", body)
	}
	if !strings.Contains(srv.logs(), `"dry_run":true`) {
		t.Error("the trial's would-be denials were not logged")
	}

	srv.reload("", `
	tollgate {
		zone api {
			limit 2 1h
		}
		dry_run
	}
	respond "{http.tollgate.decision}"`)
	for i := range 4 {
		resp := srv.get("/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("dry-run handler, request %d: %d", i+1, resp.StatusCode)
		}
		if c := resp.Header.Get("Set-Cookie"); c != "" {
			t.Fatalf("dry-run handler, request %d: issued a cookie %q", i+1, c)
		}
	}
}

// TestDryRunHandlerFeedsNoIPPressure: many cookie-less fingerprints from
// one network, seen only by a dry-run handler, do not squeeze that
// network's limits in an enforced handler.
func TestDryRunHandlerFeedsNoIPPressure(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		ip_pressure {
			threshold 4 10m
			squeeze 0.34
			duration 1h
		}
	}`, `
	handle /trial/* {
		tollgate {
			zone trial {
				limit 100 1h
			}
			dry_run
		}
		respond "trial"
	}
	handle {
		tollgate {
			zone site {
				limit 3 1h
			}
		}
		respond "site"
	}`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for i := range 8 {
		resp, _ := newClient(t, srv, fmt.Sprintf("Browser/%d", i), "203.0.113.9", false).get("/trial/x")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("trial request %d: %d", i, resp.StatusCode)
		}
	}
	if n := newClient(t, srv, "Browser/new", "203.0.113.9", false).allowed(4); n != 3 {
		t.Fatalf("a new browser of that network got %d of 4 on the enforced site; want 3 (not squeezed)", n)
	}
}
