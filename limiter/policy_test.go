package limiter

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testPolicy = &ReputationPolicy{Penalty: 1, RecoveryPerHour: 10, Buckets: DefaultReputationBuckets()}

func TestReputationDecayRecoveryAndBuckets(t *testing.T) {
	for _, tc := range []struct {
		name       string
		violations int
		after      time.Duration
		score      float64
		factor     float64
	}{
		{"clean", 0, 0, 100, 1},
		{"one mistake", 1, 0, 99, 1},
		{"25 violations: bottom of the full bucket", 25, 0, 75, 1},
		{"26 violations: 60%", 26, 0, 74, 0.6},
		{"50 violations", 50, 0, 50, 0.6},
		{"51 violations: 30%", 51, 0, 49, 0.3},
		{"76 violations: 10%", 76, 0, 24, 0.1},
		{"200 violations: floor at 0", 200, 0, 0, 0.1},
		{"26 violations, 6 minutes later: recovered 1 point", 26, 6 * time.Minute, 75, 1},
		{"60 violations, one minute later: still 30%", 60, time.Minute, 40 + 10.0/60, 0.3},
		{"60 violations, 3h later: 70 (60%)", 60, 3 * time.Hour, 70, 0.6},
		{"60 violations, 6h later: fully back", 60, 6 * time.Hour, 100, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{})
			e.SetReputation(testPolicy)
			client := Key(42)
			deny := Request{Key: 7, Limit: Limit{Quota: 1, Window: time.Hour}}
			e.TakeFor(t0, client, []Request{deny}, make([]Result, 1)) // spends the only unit
			for range tc.violations {
				e.TakeFor(t0, client, []Request{deny}, make([]Result, 1))
			}
			got := e.Reputation(t0.Add(tc.after), client)
			if diff := got - tc.score; diff > 0.001 || diff < -0.001 {
				t.Fatalf("score %.3f; want %.3f", got, tc.score)
			}
			if f := testPolicy.Factor(got); f != tc.factor {
				t.Fatalf("factor %g; want %g", f, tc.factor)
			}
		})
	}
}

func TestReputationScalesLimits(t *testing.T) {
	e := New(Config{})
	e.SetReputation(testPolicy)
	client := Key(42)
	api := Request{Key: 1 << 40, Limit: Limit{Quota: 10, Window: time.Minute}}
	allowed := func(at time.Time, n int) int {
		ok := 0
		for range n {
			if a, _ := e.TakeFor(at, client, []Request{api}, make([]Result, 1)); a {
				ok++
			}
		}
		return ok
	}
	// Hammering: 10 allowed, then 40 denials take the score to 60 (60%).
	if n := allowed(t0, 50); n != 10 {
		t.Fatalf("first window: %d allowed; want 10", n)
	}
	if s := e.Reputation(t0, client); s != 60 {
		t.Fatalf("score after 40 denials: %g", s)
	}
	// Waiting out the window does not restore full limits: 60% of 10.
	next := t0.Add(2 * time.Minute)
	if n := allowed(next, 10); n != 6 {
		t.Fatalf("two windows later: %d of 10 allowed; want 6 (60%%)", n)
	}
	// Other clients are untouched.
	if a, _ := e.TakeFor(next, Key(43), []Request{{Key: 2 << 40, Limit: api.Limit}}, make([]Result, 1)); !a {
		t.Fatal("another client was limited")
	}
}

func TestReputationBucketCounts(t *testing.T) {
	e := New(Config{})
	e.SetReputation(testPolicy)
	deny := func(client Key, times int) {
		for range times + 1 {
			e.TakeFor(t0, client, []Request{{Key: client << 8, Limit: Limit{Quota: 1, Window: time.Hour}}}, make([]Result, 1))
		}
	}
	deny(1, 5)  // 95: recovering, top bucket
	deny(2, 30) // 70
	deny(3, 30) // 70
	deny(4, 90) // 10
	deny(5, 0)  // never penalized: not on record
	got := e.ReputationBuckets(t0)
	want := []int{1, 2, 0, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("buckets %v; want %v", got, want)
		}
	}
}

func TestReputationPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    ReputationPolicy
		want string
	}{
		{ReputationPolicy{Penalty: 0, RecoveryPerHour: 1, Buckets: DefaultReputationBuckets()}, "penalty 0"},
		{ReputationPolicy{Penalty: 1, RecoveryPerHour: 0, Buckets: DefaultReputationBuckets()}, "recovery 0"},
		{ReputationPolicy{Penalty: 1, RecoveryPerHour: 1, Buckets: []Bucket{{50, 1}, {75, 0.5}, {0, 0.1}}}, "from the highest score down"},
		{ReputationPolicy{Penalty: 1, RecoveryPerHour: 1, Buckets: []Bucket{{50, 1}, {10, 0.5}}}, "must start at 0"},
		{ReputationPolicy{Penalty: 1, RecoveryPerHour: 1, Buckets: []Bucket{{50, 0.5}, {0, 0.8}}}, "a lower score cannot get more"},
		{ReputationPolicy{Penalty: 1, RecoveryPerHour: 1, Buckets: []Bucket{{50, 1.5}, {0, 0.5}}}, "factor 1.5"},
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.p, err, tc.want)
		}
	}
	if err := testPolicy.Validate(); err != nil {
		t.Error(err)
	}
}

func version(b byte) [16]byte { var v [16]byte; v[0] = b; return v }

func TestGrantIsSpentAfterTheBaseAllowance(t *testing.T) {
	e := New(Config{})
	key := Key(9)
	req := Request{Key: key, Limit: Limit{Quota: 3, Window: time.Hour}}
	e.PutGrant(t0, key, Grant{Version: version(1), Created: 1, Amount: 2, Expires: t0.Add(time.Hour).UnixNano()})
	var got []bool
	for range 6 {
		got = append(got, e.TakeOne(t0, req).Allowed)
	}
	want := []bool{true, true, true, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("decisions %v; want 3 from the limit, 2 from the grant, then denied", got)
		}
	}
	if g, _ := e.GetGrant(t0, key); g.Used != 2 || g.Remaining() != 0 {
		t.Fatalf("grant %+v; want 2 used", g)
	}
	// A new grant replaces the old and starts fresh; the old counter is ignored.
	e.PutGrant(t0, key, Grant{Version: version(2), Created: 2, Amount: 5, Expires: t0.Add(time.Hour).UnixNano()})
	if g, _ := e.GetGrant(t0, key); g.Used != 0 || g.Remaining() != 5 {
		t.Fatalf("new grant %+v; want all 5 left", g)
	}
	// An older grant arriving late does not replace a newer one.
	if e.PutGrant(t0, key, Grant{Version: version(3), Created: 1, Amount: 100, Expires: t0.Add(time.Hour).UnixNano()}) {
		t.Fatal("an older grant replaced a newer one")
	}
	// Expired grants vanish.
	if _, ok := e.GetGrant(t0.Add(2*time.Hour), key); ok {
		t.Fatal("an expired grant is still there")
	}
	if e.TakeOne(t0.Add(2*time.Hour), Request{Key: key, Limit: Limit{Quota: 1, Window: time.Minute}}).Remaining != 0 {
		t.Fatal("the base limit is not back after the grant expired")
	}
	if !e.DeleteGrant(key) || e.DeleteGrant(key) {
		t.Fatal("DeleteGrant did not report the grant once")
	}
}

func TestConcurrentGrantsAndConsumersAreExact(t *testing.T) {
	e := New(Config{})
	key := Key(11)
	req := Request{Key: key, Limit: Limit{Quota: 10, Window: time.Hour}}
	for range 10 {
		e.TakeOne(t0, req) // the base allowance is spent
	}
	var spent atomic.Int64
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Go(func() {
			// Grants of increasing creation time, racing consumers.
			e.PutGrant(t0, key, Grant{Version: version(byte(g + 1)), Created: int64(g + 1), Amount: 50, Expires: t0.Add(time.Hour).UnixNano()})
		})
		wg.Go(func() {
			for range 20 {
				if e.TakeOne(t0, req).Allowed {
					spent.Add(1)
				}
			}
		})
	}
	wg.Wait()
	g, ok := e.GetGrant(t0, key)
	if !ok || g.Version != version(20) || g.Created != 20 {
		t.Fatalf("grant in effect %+v; want the newest (created 20)", g)
	}
	if g.Used > 50 || g.Used < 0 {
		t.Fatalf("the newest grant shows %d used of 50", g.Used)
	}
	// Whatever was spent before the newest grant landed went to older
	// grants and is ignored; the newest is intact but for its own use.
	more := 0
	for range 100 {
		if e.TakeOne(t0, req).Allowed {
			more++
		}
	}
	if int64(more) != 50-g.Used {
		t.Fatalf("%d more allowed; the newest grant had %d left", more, 50-g.Used)
	}
}

func TestLeases(t *testing.T) {
	e := New(Config{})
	room := Key(5)
	claim := func(id uint64, at time.Duration) bool {
		return e.TakeOne(t0.Add(at), Request{Key: room, LeaseID: id, Limit: Limit{Algorithm: Concurrency, Quota: 2, Window: time.Minute}}).Allowed
	}
	if !claim(1, 0) || !claim(2, 0) {
		t.Fatal("two leases under a cap of 2 denied")
	}
	if claim(3, 0) {
		t.Fatal("a third lease under a cap of 2 allowed")
	}
	if !claim(1, 10*time.Second) {
		t.Fatal("renewing a held lease at the cap was denied")
	}
	if !e.Release(t0, room, 2) || e.Release(t0, room, 2) {
		t.Fatal("release did not report the lease once")
	}
	if !claim(3, 20*time.Second) {
		t.Fatal("a slot freed by a release was not given out")
	}
	// Lease 1 was renewed at 10s, lease 3 claimed at 20s: at 75s only 3 is live.
	if got := len(e.Leases(t0.Add(75*time.Second), room)); got != 1 {
		t.Fatalf("%d live leases at 75s; want 1", got)
	}
	if !claim(4, 75*time.Second) {
		t.Fatal("a slot freed by an expired lease was not given out")
	}
}

func TestConcurrentLeaseClaimsRespectTheCap(t *testing.T) {
	e := New(Config{})
	var held atomic.Int64
	var wg sync.WaitGroup
	for id := range uint64(200) {
		wg.Go(func() {
			if e.TakeOne(t0, Request{Key: 77, LeaseID: id + 1, Limit: Limit{Algorithm: Concurrency, Quota: 5, Window: time.Hour}}).Allowed {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if held.Load() != 5 {
		t.Fatalf("%d leases granted against a cap of 5", held.Load())
	}
}

func TestHandoffCarriesGrantsLeasesAndReputation(t *testing.T) {
	src, dst := New(Config{}), New(Config{})
	src.SetReputation(testPolicy)
	dst.SetReputation(testPolicy)
	client, zoneKey, room := Key(1<<40|1), Key(1<<40|2), Key(1<<40|3)
	src.PutGrant(t0, zoneKey, Grant{Version: version(1), Created: 1, Amount: 5, Expires: t0.Add(time.Hour).UnixNano()})
	req := Request{Key: zoneKey, Limit: Limit{Quota: 1, Window: time.Hour}}
	for range 3 {
		src.TakeFor(t0, client, []Request{req}, make([]Result, 1)) // 1 base, 2 from the grant
	}
	src.TakeOne(t0, Request{Key: room, LeaseID: 9, Limit: Limit{Algorithm: Concurrency, Quota: 1, Window: time.Hour}})
	for range 10 {
		src.TakeFor(t0, client, []Request{{Key: 1<<40 | 4, Limit: Limit{Quota: 1, Window: time.Hour}}}, make([]Result, 2)[:1])
	}
	dst.Merge(t0, src.Extract(t0, func(k Key) bool { return k.Route() == 1<<8 }, 0))
	if g, ok := dst.GetGrant(t0, zoneKey); !ok || g.Used != 2 {
		t.Errorf("grant after the move: %+v %v; want 2 used", g, ok)
	}
	if l := dst.Leases(t0, room); len(l) != 1 || l[0].ID != 9 {
		t.Errorf("leases after the move: %v", l)
	}
	if s := dst.Reputation(t0, client); s != 91 {
		t.Errorf("reputation after the move: %g; want 91", s)
	}

	// A newer grant at the destination: what arrives of the older one, and
	// a count tagged with an older version, are ignored.
	dst.PutGrant(t0, zoneKey, Grant{Version: version(2), Created: 2, Amount: 4, Expires: t0.Add(time.Hour).UnixNano()})
	dst.Merge(t0, []State{
		{Key: zoneKey, Kind: KindGrant, Expires: t0.Add(time.Hour).UnixNano(), Used: 3, UsedVersion: version(1),
			Grant: Grant{Version: version(1), Created: 1, Amount: 5, Expires: t0.Add(time.Hour).UnixNano()}},
		{Key: zoneKey, Kind: KindGrant, Expires: t0.Add(time.Hour).UnixNano(), Used: 3, UsedVersion: version(1),
			Grant: Grant{Version: version(2), Created: 2, Amount: 4, Expires: t0.Add(time.Hour).UnixNano()}},
	})
	if g, ok := dst.GetGrant(t0, zoneKey); !ok || g.Version != version(2) || g.Used != 0 {
		t.Errorf("the newer grant after stale states arrived: %+v %v; want version 2, nothing used", g, ok)
	}
}
