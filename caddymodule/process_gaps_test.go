package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// These tests try, with real Caddy processes, the gaps between the
// cluster's bound and exactness that an outside run found
// (docs/cluster.md, "Known gaps"): each failed before it was closed.

// answers counts the answers to a key's requests by who decided them (the
// first word of the body: owner, peer, fallback, blocked_cache). It is
// safe for concurrent use.
type answers struct {
	mu      sync.Mutex
	allowed map[string]int
	denied  map[string]int
	failed  []string
}

func newAnswers() *answers {
	return &answers{allowed: map[string]int{}, denied: map[string]int{}}
}

// ask sends a request for key to p and counts the answer. Unlike p.get it
// may be called from any goroutine: a request without an answer is
// counted as failed, not fatal.
func (a *answers) ask(p *proc, key string) {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", p.http), nil)
	req.Header.Set("X-Key", key)
	resp, err := p.client.Do(req)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed = append(a.failed, fmt.Sprintf("%s: %v", p.name, err))
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	source := strings.SplitN(string(body), " ", 2)[0]
	switch resp.StatusCode {
	case http.StatusOK:
		a.allowed[source]++
	case http.StatusTooManyRequests:
		a.denied[source]++
	default:
		a.failed = append(a.failed, fmt.Sprintf("%s: %d %q", p.name, resp.StatusCode, body))
	}
}

// burst sends requests for key to p, concurrency at a time.
func (a *answers) burst(p *proc, key string, requests, concurrency int) {
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for i := w; i < requests; i += concurrency {
				a.ask(p, key)
			}
		})
	}
	wg.Wait()
}

func (a *answers) admitted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.allowed {
		n += c
	}
	return n
}

func (a *answers) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := fmt.Sprintf("allowed by %v, denied by %v", a.allowed, a.denied)
	if len(a.failed) > 0 {
		s += fmt.Sprintf(", %d failed (%s)", len(a.failed), a.failed[0])
	}
	return s
}

// othersThan returns procs without procs[i].
func othersThan(procs []*proc, i int) []*proc {
	return slices.Concat(procs[:i:i], procs[i+1:])
}

// An owner stopped (SIGSTOP) for about as long as failure detection takes
// (memberlist declares a node dead after about 2 s; the owner is stopped
// 0.8, 1.2 and 1.6 s), while both other nodes admit its key in fallback, each
// up to its cap, and requests wait at the owner itself, as a load balancer
// goes on sending them there. Once it runs again, the window admits at
// least the limit and at most the limit and 5 %. The owner decided the
// requests waiting for it from its own count, before the others' fallback
// counts reached it (their next ping, up to a call timeout after it ran
// again): 10 spent, 80 in fallback and the 20 waiting made 110 of 100 in
// 11 freezes of 13. It asks the others first now (see core's standstill).
func TestProcessClusterOwnerFrozenNearDetectionAdmitsAtMostTheLimitAndFivePercent(t *testing.T) {
	const limit, spent, waiting, perSurvivor = 100, 10, 20, 45
	procs := startCluster(t, 3, limit)
	settle()
	for i, freeze := range []time.Duration{800 * time.Millisecond, 1200 * time.Millisecond, 1600 * time.Millisecond} {
		owner := (2 + i) % 3
		key := ownedKeys(t, procs, fmt.Sprintf("frozen-near-detection-%d", i))[owner]
		survivors := othersThan(procs, owner)
		testutil.ClearOfWindowEdge(time.Hour, time.Minute)
		for j := range spent {
			if status, body, _ := survivors[j%2].get("/", key); status != http.StatusOK {
				t.Fatalf("spending beforehand: %d %q", status, body)
			}
		}
		atOwner, fallback := newAnswers(), newAnswers()
		procs[owner].signal(syscall.SIGSTOP)
		frozen := time.Now()
		var queued sync.WaitGroup
		for range waiting {
			queued.Go(func() { atOwner.ask(procs[owner], key) })
		}
		// More than each survivor's share in fallback (half of the 90 the
		// owner said remained, capped at 0.4 × 100): 40 each pass.
		var during sync.WaitGroup
		for _, s := range survivors {
			during.Go(func() { fallback.burst(s, key, perSurvivor, 5) })
		}
		during.Wait()
		if stopped := time.Since(frozen); stopped > freeze {
			t.Logf("the survivors' requests took %s, longer than the freeze of %s", stopped.Round(time.Millisecond), freeze)
		}
		time.Sleep(time.Until(frozen.Add(freeze)))
		procs[owner].signal(syscall.SIGCONT)
		queued.Wait()
		waitClusterConverged(t, procs)
		after := newAnswers()
		for j := range 60 {
			after.ask(procs[j%3], key)
		}
		total := spent + fallback.admitted() + atOwner.admitted() + after.admitted()
		t.Logf("owner node%d stopped %s: %d spent before; while stopped, the survivors: %s; waiting at the owner: %s; after: %s; %d admitted in the window (limit %d)",
			owner, freeze, spent, fallback, atOwner, after, total, limit)
		if total > limit+limit*5/100 {
			t.Errorf("owner stopped %s: %d of a limit of %d admitted in the window (%d spent before, %d by the survivors' fallback, %d by the owner of the %d that waited for it, %d after); want at most %d (the limit and 5 %%)",
				freeze, total, limit, spent, fallback.admitted(), atOwner.admitted(), waiting, after.admitted(), limit+limit*5/100)
		}
		if total < limit {
			t.Errorf("owner stopped %s: %d of a limit of %d admitted in the window: requests under the limit were refused", freeze, total, limit)
		}
	}
	if t.Failed() {
		logBreakers(t, procs)
	}
}

// A node that leaves gracefully and comes back (one step of a rolling
// restart) takes back its keys from their successor, which counted them
// meanwhile. A client of such a key under its limit, whose requests reach
// a third node in the first second after the owner is back, is refused
// nothing: the owner runs, nothing is stopped, and a graceful change
// counts exactly (docs/cluster.md). Each node in turn leaves and returns;
// 30 of each key's 100 are spent before, and a burst of 100 through the
// third node every 80 ms from 0.1 s to 1 s after the return (a key each)
// must each admit the 70 left. The third node's client of the returning
// owner waited out a redial backoff (up to 1 s) left from while the owner
// was away: its first calls were given up on, and the owner's keys were
// decided by the fallback's share (35 to 65 of the 70 admitted, in 13
// returns of 15 measured, the rest refused while the owner had them).
func TestProcessClusterRejoiningOwnersKeysAreNotUnderAdmitted(t *testing.T) {
	const limit, spent, bursts = 100, 30, 12
	procs := startCluster(t, 3, limit)
	settle()
	type burstOf struct {
		key, desc string
		answers   *answers
	}
	var sent []burstOf
	for x := range procs {
		y, z := (x+1)%3, (x+2)%3
		keys := make([]string, bursts)
		for k := range keys {
			keys[k] = keyPlacedOn(t, procs, fmt.Sprintf("rejoin-%d-%d", x, k), x, y)
		}
		testutil.ClearOfWindowEdge(time.Hour, 2*time.Minute)
		for _, key := range keys {
			for j := range spent {
				if status, body, _ := procs[j%3].get("/", key); status != http.StatusOK {
					t.Fatalf("spending beforehand: %d %q", status, body)
				}
			}
		}
		procs[x].stop()
		waitClusterConverged(t, othersThan(procs, x))
		time.Sleep(2 * time.Second) // a restart takes a while
		procs[x].start()
		back := time.Now()
		for k, key := range keys {
			at := 100*time.Millisecond + time.Duration(k)*80*time.Millisecond
			time.Sleep(time.Until(back.Add(at)))
			a := newAnswers()
			a.burst(procs[z], key, 100, 20)
			sent = append(sent, burstOf{key, fmt.Sprintf("node%d's key through node%d at +%s after it came back", x, z, at), a})
		}
		waitClusterConverged(t, procs)
	}
	settle()
	for _, b := range sent {
		after := newAnswers()
		for j := range 40 {
			after.ask(procs[j%3], b.key)
		}
		if got := b.answers.admitted(); got != limit-spent {
			t.Errorf("%s: %d of 100 admitted with %d of %d left (%s; %d more admitted once the cluster settled); want exactly %d",
				b.desc, got, limit-spent, limit, b.answers, after.admitted(), limit-spent)
		}
	}
	if t.Failed() {
		logBreakers(t, procs)
	}
}

// A graceful scale-in from three nodes to one: the node left counts every
// key as its owner, exactly, at once. memberlist (v0.7.0) hands a node's
// "left" to Tollgate as a death (hashicorp/memberlist#293: the Node given
// to NotifyLeave always says alive), and the two that left counted for 30 s
// among the nodes a majority is made of: the last node, one of three, had
// no majority and decided every key by fallback (40 of 100 admitted for
// 30 s after the second leave, then 100).
func TestProcessClusterScaleInToOneNodeCountsExactly(t *testing.T) {
	const limit = 100
	procs := startCluster(t, 3, limit)
	settle()
	procs[2].stop()
	waitClusterConverged(t, procs[:2])
	procs[1].stop()
	waitClusterConverged(t, procs[:1])
	a := newAnswers()
	a.burst(procs[0], "scale-in", 150, 10)
	if got := a.admitted(); got != limit {
		t.Errorf("the last node after a graceful scale-in from three: %d of 150 admitted against a limit of %d (%s); want exactly %d", got, limit, a, limit)
	}
}

// The same with steady load on every node, as a load balancer spreads it:
// each node gets a request for the key every 10 ms (four senders of one
// each 40 ms) from 20 spent until a second after the owner runs again, and
// requests keep coming to the owner while it is stopped. The survivors
// admit in fallback while it is stopped, and go on doing so until what
// they admitted has reached it; the owner waits for that before it counts.
// The window admits at least the limit and at most the limit and 5 %
// (before a stopped owner asked first, and callers waited for their
// fallback counts to reach it: 115 and 124 of 100 here, 105 to 152 in an
// outside run).
func TestProcessClusterOwnerFrozenNearDetectionUnderSteadyLoad(t *testing.T) {
	const limit, spent, senders = 100, 20, 4
	procs := startCluster(t, 3, limit)
	settle()
	for i, freeze := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond} {
		owner := (1 + i) % 3
		key := ownedKeys(t, procs, fmt.Sprintf("frozen-steady-%d", i))[owner]
		testutil.ClearOfWindowEdge(time.Hour, time.Minute)
		for j := range spent {
			if status, body, _ := procs[j%3].get("/", key); status != http.StatusOK {
				t.Fatalf("spending beforehand: %d %q", status, body)
			}
		}
		a := newAnswers()
		stop := make(chan struct{})
		var load sync.WaitGroup
		for _, p := range procs {
			for s := range senders {
				load.Go(func() {
					time.Sleep(time.Duration(s) * 10 * time.Millisecond)
					tick := time.NewTicker(40 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							a.ask(p, key)
						}
					}
				})
			}
		}
		time.Sleep(100 * time.Millisecond)
		procs[owner].signal(syscall.SIGSTOP)
		time.Sleep(freeze)
		procs[owner].signal(syscall.SIGCONT)
		time.Sleep(time.Second)
		close(stop)
		load.Wait()
		waitClusterConverged(t, procs)
		total := spent + a.admitted()
		t.Logf("owner node%d stopped %s under steady load: %d spent before, then %s: %d admitted in the window (limit %d)", owner, freeze, spent, a, total, limit)
		if total > limit+limit*5/100 {
			t.Errorf("owner stopped %s under steady load: %d of a limit of %d admitted in the window (%s); want at most %d (the limit and 5 %%)", freeze, total, limit, a, limit+limit*5/100)
		}
		if total < limit {
			t.Errorf("owner stopped %s under steady load: %d of a limit of %d admitted in the window (%s): requests under the limit were refused", freeze, total, limit, a)
		}
	}
	if t.Failed() {
		logBreakers(t, procs)
	}
}
