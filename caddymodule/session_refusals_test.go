package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// countingDecider counts what is asked of the decider it wraps.
type countingDecider struct {
	decider
	takes, peeks int
}

func (c *countingDecider) Take(now time.Time, reqs []limiter.Request, res []limiter.Result) (bool, cluster.Source) {
	c.takes++
	return c.decider.Take(now, reqs, res)
}

func (c *countingDecider) Peek(now time.Time, reqs []limiter.Request, res []limiter.Result) cluster.Source {
	c.peeks++
	return c.decider.Peek(now, reqs, res)
}

// newTestSessions returns sessions issuing always, issueLimit new sessions
// per network an hour, deciding with d.
func newTestSessions(t *testing.T, issueLimit int64, d decider) *sessions {
	t.Helper()
	id, err := fingerprint.NewIdentifier(fingerprint.Config{Secrets: [][]byte{[]byte(processSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	return &sessions{
		identifier: id,
		decider:    d,
		logger:     zap.NewNop(),
		issue:      issueAlways,
		budget:     limiter.Limit{Algorithm: limiter.SlidingWindow, Quota: issueLimit, Window: time.Hour},
		zone:       testHasher.Zone("\x00tollgate cookie issuance"),
		refusals:   newSessionRefusals(),
	}
}

// cookieless returns the verdict of an allowed request from the client with
// fingerprint fp on network net, with no session.
func cookieless(fp, net uint64) *verdict {
	return &verdict{
		decision: decisionAllow,
		identity: fingerprint.Identity{Kind: fingerprint.KindFingerprint, Fingerprint: fp, Network: net, Digest: fp*31 + net},
		pressure: fingerprint.Reading{Factor: 1},
	}
}

// TestARefusedClientIsNotAskedAgainWithinTheWindow is the hostile side: a
// client without cookies that never keeps the one it is given (wrk, curl, a
// script) gets its fingerprint's sessions, is refused once, and from
// then on costs the minting budget nothing until the refusal runs out;
// then it is offered a session again.
func TestARefusedClientIsNotAskedAgainWithinTheWindow(t *testing.T) {
	d := &countingDecider{decider: standaloneDecider{engine: limiter.New(limiter.Config{})}}
	s := newTestSessions(t, 30, d)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	v := cookieless(1, 100)
	t0 := time.Unix(1_700_000_000, 0)

	issued := 0
	for i := range 1000 {
		if s.cookie(r, v, t0.Add(time.Duration(i)*time.Second)) != "" {
			issued++
		}
	}
	perFingerprint := int(fingerprintSessions(30))
	if issued != perFingerprint {
		t.Fatalf("%d sessions for one fingerprint; want %d", issued, perFingerprint)
	}
	if want := perFingerprint + 1; d.takes != want {
		t.Fatalf("the minting budget was asked %d times in 1000 requests; want %d (the fingerprint's sessions, then one refusal)", d.takes, want)
	}
	offeredOnceFree(t, s, r, v, t0.Add(1000*time.Second))
}

// offeredOnceFree steps through time from t until the minting budget
// would give v's client a session, checking that it is refused until then
// and offered one within a second of it.
func offeredOnceFree(t *testing.T, s *sessions, r *http.Request, v *verdict, from time.Time) {
	t.Helper()
	limiterSays := func(now time.Time) bool { // asked directly, nothing remembered
		reqs := s.mintingBudget(&v.identity, 1)
		var res [2]limiter.Result
		s.decider.Peek(now, reqs[:], res[:])
		return res[0].Allowed && res[1].Allowed
	}
	for now := from; now.Before(from.Add(3 * time.Hour)); now = now.Add(10 * time.Second) {
		if !limiterSays(now) {
			if s.cookie(r, v, now) != "" {
				t.Fatalf("at %s: a session the minting budget refuses", now.Sub(from))
			}
			continue
		}
		if s.cookie(r, v, now.Add(time.Second)) == "" {
			t.Fatalf("at %s: the minting budget gives a session again, the client was not offered one", now.Sub(from))
		}
		return
	}
	t.Fatal("the minting budget never gave the client a session again")
}

// TestRefusalsKeepOtherClientsSessions is the other side: a refusal
// remembered for one client refuses no one else, and the minting bounds
// hold exactly: a network is given issue_limit sessions per window, however
// many fingerprints it shows, and one refused for the network costs the
// budget nothing more.
func TestRefusalsKeepOtherClientsSessions(t *testing.T) {
	d := &countingDecider{decider: standaloneDecider{engine: limiter.New(limiter.Config{})}}
	s := newTestSessions(t, 5, d)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	t0 := time.Unix(1_700_000_000, 0)
	const home, away = 100, 200

	// One fingerprint of home spends its sessions and is refused.
	for i := range 5 {
		s.cookie(r, cookieless(1, home), t0.Add(time.Duration(i)*time.Second))
	}
	// Another fingerprint on the same network still gets one.
	if s.cookie(r, cookieless(2, home), t0.Add(10*time.Second)) == "" {
		t.Fatal("a fingerprint was refused because another one on its network was")
	}
	// Rotating fingerprints on home: the network has what the first two
	// fingerprints left of its 5.
	left := 5 - int(fingerprintSessions(5)) - 1
	issued := 0
	for fp := uint64(3); fp < 50; fp++ {
		if s.cookie(r, cookieless(fp, home), t0.Add(20*time.Second)) != "" {
			issued++
		}
	}
	if issued != left {
		t.Fatalf("rotating fingerprints were given %d more sessions; want %d (issue_limit 5, %d spent)", issued, left, 5-left)
	}
	asked := d.takes
	for fp := uint64(50); fp < 100; fp++ {
		if s.cookie(r, cookieless(fp, home), t0.Add(30*time.Second)) != "" {
			t.Fatal("a network out of sessions gave one more")
		}
	}
	if d.takes != asked {
		t.Errorf("a network refused for its budget was asked %d more times; want 0", d.takes-asked)
	}
	// Another network is not refused.
	if s.cookie(r, cookieless(50, away), t0.Add(30*time.Second)) == "" {
		t.Fatal("a network was refused because another one was")
	}
	// Once home's sessions leave the window, a fingerprint there refused
	// for the network gets one again.
	offeredOnceFree(t, s, r, cookieless(99, home), t0.Add(30*time.Second))
}

// TestChallengeAsksNothingOfARefusedClient checks that the challenge's
// question (may this client start a session?) is answered from the
// remembered refusal too, and still asked for a client that may.
func TestChallengeAsksNothingOfARefusedClient(t *testing.T) {
	d := &countingDecider{decider: standaloneDecider{engine: limiter.New(limiter.Config{})}}
	s := newTestSessions(t, 30, d)
	t0 := time.Unix(1_700_000_000, 0)
	v := cookieless(1, 100)
	for i := range int(fingerprintSessions(30)) + 1 {
		s.mint(&v.identity, 1, t0.Add(time.Duration(i)*time.Second))
	}
	if s.mayMint(&v.identity, 1, t0.Add(time.Minute)) || d.peeks != 0 {
		t.Fatalf("a refused client: may mint, or the budget was peeked at %d times", d.peeks)
	}
	other := cookieless(2, 100)
	if !s.mayMint(&other.identity, 1, t0.Add(time.Minute)) || d.peeks != 1 {
		t.Fatalf("another client on the network: may not mint, or peeked %d times; want one peek and yes", d.peeks)
	}
}

// TestSessionRefusalsPushOutRatherThanMisanswer fills both slots a key may
// use: a third refusal pushes out the one ending first, which is then
// asked of the limiter again (not refused); a key never refused is never
// answered as refused, even one sharing the slots; and a key refused again
// keeps its own slot.
func TestSessionRefusalsPushOutRatherThanMisanswer(t *testing.T) {
	m := newSessionRefusals()
	base := uint64(0x1234_5678) // the same two slots for each key below
	k1, k2, k3, never := base|1<<32, base|2<<32, base|3<<32, base|4<<32
	at := func(sec int64) time.Time { return time.Unix(sec, 0) }
	m.put(k2, at(200))
	m.put(k1, at(100))
	m.put(k3, at(300)) // pushes out k1, which ends first
	for key, want := range map[uint64]bool{k1: false, k2: true, k3: true, never: false} {
		if got := m.has(key, 50); got != want {
			t.Errorf("key %#x refused at 50: %v; want %v", key, got, want)
		}
	}
	m.put(k2, at(400)) // k2 again: its own slot, k3 stays
	if !m.has(k2, 350) || !m.has(k3, 250) || m.has(k3, 300) {
		t.Error("refusing a key again moved another one, or a refusal outlived its end")
	}
}
