package caddymodule

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/testutil"
)

// settle waits out the hand-off window that follows the cluster's forming.
// In it, a new owner that cannot pull a key from the node that owned it
// before (stopped, here) decides the key by fallback caps (cluster/doc.go,
// "Membership changes"). These tests are about a settled cluster.
func settle() { time.Sleep(cluster.DefaultHandoffWindow) }

// These tests check, with real Caddy processes, that an owner that is slow,
// busy or flapping does not turn into over-admission.

// An owner that flaps (stopped and running in turn every 150 ms) while 200
// requests arrive lets at most 105 of a limit of 100 through in the window:
// what the others admit in fallback reaches it each time it comes back.
func TestProcessClusterFlappingOwnerStaysNearTheLimit(t *testing.T) {
	procs := startCluster(t, 3, 100)
	key := ownedKeys(t, procs, "flapping")[2]
	owner, survivors := procs[2], procs[:2]
	stop := make(chan struct{})
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		for frozen := false; ; frozen = !frozen {
			if frozen {
				owner.signal(syscall.SIGSTOP)
			} else {
				owner.signal(syscall.SIGCONT)
			}
			select {
			case <-stop:
				owner.signal(syscall.SIGCONT)
				return
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	admitted := 0
	var seen []string
	for i := range 200 {
		status, body, _ := survivors[i%2].get("/", key)
		if status == http.StatusOK {
			admitted++
		}
		seen = append(seen, fmt.Sprintf("%d:%d:%s", i%2, status, body))
		time.Sleep(5 * time.Millisecond)
	}
	defer func() {
		if t.Failed() {
			t.Logf("answers while flapping: %v", seen)
		}
	}()
	close(stop)
	<-flapped
	testutil.Eventually(t, 15*time.Second, "the owner answering both survivors again", func() bool {
		_, body0, _ := survivors[0].get("/probe", key)
		_, body1, _ := survivors[1].get("/probe", key)
		return strings.HasPrefix(body0, "peer ") && strings.HasPrefix(body1, "peer ")
	})
	for i := range 100 {
		if status, _, _ := survivors[i%2].get("/", key); status == http.StatusOK {
			admitted++
		}
	}
	if admitted > 105 {
		t.Errorf("%d of a limit of 100 admitted with the owner flapping; want at most 105", admitted)
	}
	t.Logf("%d admitted (limit 100)", admitted)
}

// burst sends requests for key spread round-robin over procs, concurrency
// at a time, and returns how many were admitted and, for those, who decided
// (the first word of the answer: owner, peer, fallback).
func burst(procs []*proc, key string, requests, concurrency int) (admitted int, by map[string]int) {
	var mu sync.Mutex
	by = map[string]int{}
	next := 0
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= requests {
					return
				}
				status, body, _ := procs[i%len(procs)].get("/", key)
				mu.Lock()
				if status == http.StatusOK {
					admitted++
					by[strings.SplitN(body, " ", 2)[0]]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return admitted, by
}

// busyMachine keeps the machine's cores busy and, as a busy machine does,
// keeps taking the CPU away from the processes for a while at a time: the
// key's owner for up to 40 ms (well within a peer timeout, even once it
// waits for a core again: it stays up, and answers), the others, which call
// it, for up to 150 ms, until the returned function is called.
func busyMachine(procs []*proc, owner int, seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Go(func() {
			x := seed
			for {
				select {
				case <-done:
					return
				default:
				}
				for range 100_000 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
		})
	}
	for i, p := range procs {
		longest := 150
		if i == owner {
			longest = 40
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(5+rng.IntN(25)) * time.Millisecond):
				}
				p.signal(syscall.SIGSTOP)
				time.Sleep(time.Duration(10+rng.IntN(longest-10)) * time.Millisecond)
				p.signal(syscall.SIGCONT)
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// Three nodes and the load generator sharing the machine's cores, 300
// requests at concurrency 60 for one key with a limit of 100, all nodes up
// though the owner is often descheduled: exactly 100 pass, round after
// round. Peer calls that outlive their deadline while the owner is slow,
// not gone, must be decided once, by the owner: not also, or instead, in
// fallback beside it.
func TestProcessClusterBusyOwnerCountsExactly(t *testing.T) {
	procs := startCluster(t, 3, 100)
	settle()
	for round := range 5 {
		owner := round % 3
		key := ownedKeys(t, procs, fmt.Sprintf("busy-%d", round))[owner]
		stop := busyMachine(procs, owner, uint64(round))
		admitted, by := burst(procs, key, 300, 60)
		stop()
		if admitted != 100 {
			t.Errorf("round %d: %d of 300 admitted against a limit of 100 (decided by %v); want exactly 100", round, admitted, by)
			logBreakers(t, procs)
		}
		t.Logf("round %d: %d admitted, decided by %v", round, admitted, by)
	}
}

// The same busy run with one of the three nodes frozen (SIGSTOP) the whole
// time, the load on the two others. A key of a live owner whose replica is
// live too is counted exactly: 100. (An owner whose replica is the frozen
// node stops counting once its lease runs out: that key is decided in
// fallback, as docs/cluster.md says.) A key of the frozen node is decided
// in fallback, each node within its share of the limit (100 ÷ the two nodes
// that may count it), 0.4 × 100 at a time: 80 pass while it is frozen. On a
// busy machine the burst can outlast failure detection: the frozen node is
// declared dead and the key's new owner decides it in fallback again, for
// the rest of its share, until it counts it on from its replica and what
// was admitted in fallback; so at most the limit passes while the node is
// frozen. Once it runs again and has heard what was admitted, the window's
// total is at most the limit.
func TestProcessClusterBusyWithAFrozenNodeStaysWithinTheBound(t *testing.T) {
	procs := startCluster(t, 3, 100)
	settle()
	keys := ownedKeys(t, procs, "frozen")
	liveKey := keyPlacedOn(t, procs, "frozen-live", 0, 1)
	survivors := procs[:2]
	procs[2].signal(syscall.SIGSTOP)
	stop := busyMachine(survivors, 0, 1)
	live, liveBy := burst(survivors, liveKey, 300, 60)
	frozen, frozenBy := burst(survivors, keys[2], 300, 60)
	stop()
	procs[2].signal(syscall.SIGCONT)
	if live != 100 {
		t.Errorf("a live owner's key: %d of 300 admitted (decided by %v); want exactly 100", live, liveBy)
	}
	if frozen > 100 {
		t.Errorf("the frozen owner's key: %d of 300 admitted (decided by %v); want at most 100", frozen, frozenBy)
	}
	testutil.Eventually(t, 15*time.Second, "the owner answering both others again", func() bool {
		_, body0, _ := survivors[0].get("/probe", keys[2])
		_, body1, _ := survivors[1].get("/probe", keys[2])
		return strings.HasPrefix(body0, "peer ") && strings.HasPrefix(body1, "peer ")
	})
	after, afterBy := burst(procs, keys[2], 150, 10)
	if frozen+after > 100 {
		t.Errorf("the frozen owner's key: %d in fallback and %d after (decided by %v): %d in the window; want at most 100", frozen, after, afterBy, frozen+after)
	}
	t.Logf("live owner's key: %d (%v); frozen owner's key: %d while frozen (%v), %d after (%v)", live, liveBy, frozen, frozenBy, after, afterBy)
}

// keyPlacedOn finds a key that procs[owner] counts and procs[replica] keeps
// the replica of, as the first process's admin API places it.
func keyPlacedOn(t *testing.T, procs []*proc, prefix string, owner, replica int) string {
	t.Helper()
	base := fmt.Sprintf("http://127.0.0.1:%d", procs[0].admin)
	ownerName, replicaName := procs[owner].status().Cluster.Node, procs[replica].status().Cluster.Node
	for i := range 1000 {
		key := fmt.Sprintf("%s-%d", prefix, i)
		var view adminapi.ClientView
		adminDo(t, base, http.MethodGet, "/tollgate/clients/"+key, &view)
		if view.Owner == ownerName && view.Replica == replicaName {
			return key
		}
	}
	t.Fatalf("no key of %s with its replica on %s among 1000", ownerName, replicaName)
	return ""
}

// logBreakers logs what the processes logged of peers given up on and
// found again.
func logBreakers(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		for _, line := range strings.Split(p.logs(), "\n") {
			if strings.Contains(line, "peer unreachable") || strings.Contains(line, "peer answers again") {
				t.Logf("%s: %s", p.name, line)
			}
		}
	}
}
