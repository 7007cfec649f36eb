package caddymodule

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// TestStandaloneDeciderAnswersAsAStandaloneNode drives the same requests
// through a standalone cluster node and through the engine-only decider, each
// on an engine of its own with reputation on: every answer (results,
// decisions, sources, scores, peeks, lease claims and releases) is the same.
func TestStandaloneDeciderAnswersAsAStandaloneNode(t *testing.T) {
	policy := &limiter.ReputationPolicy{Penalty: 10, RecoveryPerHour: 10, Buckets: limiter.DefaultReputationBuckets()}
	newEngine := func() *limiter.Engine {
		e := limiter.New(limiter.Config{})
		e.SetReputation(policy)
		return e
	}
	node := cluster.Standalone(newEngine())
	node.SetReputation(policy)
	deciders := []decider{node, standaloneDecider{engine: newEngine()}}

	rate := limiter.Limit{Algorithm: limiter.SlidingWindow, Quota: 3, Window: time.Minute}
	lease := limiter.Limit{Algorithm: limiter.Concurrency, Quota: 1, Window: time.Minute}
	client := limiter.ZoneKey(99, 7)
	reqs := func() []limiter.Request {
		return []limiter.Request{
			{Key: limiter.ZoneKey(1, 1), Zone: 1, Limit: rate},
			{Key: limiter.ZoneKey(2, 2), Zone: 2, Limit: rate, Network: 5},
		}
	}
	t0 := time.Unix(1_700_000_000, 0)
	type answer struct {
		decision cluster.Decision
		res      string
	}
	var got [2][]answer
	for i, d := range deciders {
		for step := range 6 { // three granted, then denials that lower the score
			now := t0.Add(time.Duration(step) * time.Second)
			res := make([]limiter.Result, 2)
			dec := d.TakeFor(now, client, reqs(), res)
			got[i] = append(got[i], answer{dec, fmt.Sprint(res)})
		}
		res := make([]limiter.Result, 2)
		src := d.Peek(t0.Add(10*time.Second), reqs(), res)
		got[i] = append(got[i], answer{cluster.Decision{Source: src}, fmt.Sprint(res)})
		ok, src := d.Take(t0.Add(11*time.Second), reqs()[:1], res[:1])
		got[i] = append(got[i], answer{cluster.Decision{Allowed: ok, Source: src}, fmt.Sprint(res[:1])})

		claim := []limiter.Request{{Key: limiter.ZoneKey(3, 3), Zone: 3, Limit: lease, LeaseID: 41}}
		other := []limiter.Request{{Key: limiter.ZoneKey(3, 3), Zone: 3, Limit: lease, LeaseID: 43}}
		for _, r := range [][]limiter.Request{claim, other} {
			ok, src := d.Take(t0.Add(12*time.Second), r, res[:1])
			got[i] = append(got[i], answer{cluster.Decision{Allowed: ok, Source: src}, fmt.Sprint(res[:1])})
		}
		if err := d.Release(t0.Add(13*time.Second), claim[0].Key, 41); err != nil {
			t.Fatalf("decider %d: releasing: %v", i, err)
		}
		ok, src = d.Take(t0.Add(14*time.Second), other, res[:1])
		got[i] = append(got[i], answer{cluster.Decision{Allowed: ok, Source: src}, fmt.Sprint(res[:1])})
	}
	if len(got[0]) != len(got[1]) {
		t.Fatalf("%d answers against %d", len(got[0]), len(got[1]))
	}
	for k := range got[0] {
		if got[0][k] != got[1][k] {
			t.Errorf("answer %d: standalone node %+v, engine decider %+v", k, got[0][k], got[1][k])
		}
	}
	if last := got[1][5].decision; last.Allowed || !last.ScoreKnown || last.Score >= limiter.FullScore {
		t.Errorf("after the denials: %+v; want a denial with a lowered, known score", last)
	}
}

// TestStandaloneNodeDecidesOnItsEngine checks the choice made at Provision:
// without a cluster block, the handlers and the sessions decide on the
// engine itself and never on the cluster node; with one, on the node.
func TestStandaloneNodeDecidesOnItsEngine(t *testing.T) {
	site := `tollgate {
		zone site {
			limit 2 1h
		}
	}
	respond "ok"`
	tc := startCaddy(t, "", site)
	app := activeTollgateApp(t)
	d, ok := app.decider.(standaloneDecider)
	if !ok || d.engine != app.state.engine {
		t.Fatalf("single node decides with %T; want the engine itself", app.decider)
	}
	if app.sessions.decider != app.decider || app.handlers[0].decider != app.decider {
		t.Fatal("the sessions or the handler decide with something else than the app's decider")
	}
	for i, want := range []int{200, 200, 429} {
		if got := tc.status("/", "User-Agent", "one client"); got != want {
			t.Fatalf("request %d: %d; want %d", i+1, got, want)
		}
	}

	tc.reload(fmt.Sprintf(`tollgate {
		secret %s
		cluster {
			bind 127.0.0.1:%d
			peer_listen 127.0.0.1:%d
		}
	}`, processSecret, freePort(t), freePort(t)), site)
	app = activeTollgateApp(t)
	if node, ok := app.decider.(*cluster.Node); !ok || node != app.node {
		t.Fatalf("cluster node decides with %T; want its node", app.decider)
	}
	if app.handlers[0].decider != app.decider {
		t.Fatal("the handler decides with something else than the app's decider")
	}
}

// activeTollgateApp returns the tollgate app of the running config.
func activeTollgateApp(t testing.TB) *App {
	t.Helper()
	a, err := caddy.ActiveContext().App("tollgate")
	if err != nil {
		t.Fatal(err)
	}
	return a.(*App)
}
