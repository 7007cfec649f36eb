package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// deployClients are well-behaved clients: each sends a request every
// clientPeriod for its own key, far below its limit, to a node that is up
// (as a load balancer sends to the nodes that pass its health checks). A
// request the node could not answer (it was going down) is sent again to
// another node, as the balancer would.
type deployClients struct {
	procs   []*proc
	mu      sync.Mutex
	up      []bool
	stop    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	allowed atomic.Int64
	denied  []string // the 429s: never expected
	other   []string // answers neither 200 nor 429
}

const clientPeriod = 400 * time.Millisecond

func startDeployClients(procs []*proc, clients int) *deployClients {
	d := &deployClients{procs: procs, up: make([]bool, len(procs)), stop: make(chan struct{})}
	for i := range d.up {
		d.up[i] = true
	}
	for c := range clients {
		d.wg.Add(1)
		go d.client(c)
	}
	return d
}

// setUp marks a node as taking requests or not.
func (d *deployClients) setUp(i int, up bool) {
	d.mu.Lock()
	d.up[i] = up
	d.mu.Unlock()
}

// pick returns a node that is up, turning with n.
func (d *deployClients) pick(n int) (*proc, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.up {
		j := (n + i) % len(d.up)
		if d.up[j] {
			return d.procs[j], true
		}
	}
	return nil, false
}

func (d *deployClients) client(c int) {
	defer d.wg.Done()
	key := fmt.Sprintf("client-%d", c)
	hc := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(clientPeriod)
	defer tick.Stop()
	// Spread the clients over the period.
	time.Sleep(time.Duration(c) * clientPeriod / 100)
	for n := c; ; n++ {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		for try := 0; try < 3; try++ {
			p, ok := d.pick(n + try)
			if !ok {
				break
			}
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", p.http), nil)
			req.Header.Set("X-Key", key)
			resp, err := hc.Do(req)
			if err != nil {
				continue // the node went down: the balancer tries another
			}
			resp.Body.Close()
			d.sent.Add(1)
			d.mu.Lock()
			switch resp.StatusCode {
			case http.StatusOK:
				d.allowed.Add(1)
			case http.StatusTooManyRequests:
				d.denied = append(d.denied, fmt.Sprintf("%s via %s at %s (retry-after %s)", key, p.name, time.Now().Format("15:04:05.000"), resp.Header.Get("Retry-After")))
			default:
				d.other = append(d.other, fmt.Sprintf("%s via %s: %d", key, p.name, resp.StatusCode))
			}
			d.mu.Unlock()
			break
		}
	}
}

func (d *deployClients) finish() {
	close(d.stop)
	d.wg.Wait()
}

// A rolling deploy of three nodes, first graceful (SIGTERM: each hands its
// counters over and leaves) and then by kill -9, while 100 well-behaved
// clients each send a request every 400 ms for their own key, far below
// its limit: not one of them is refused. A client that did nothing wrong
// must never see a 429 because the cluster changed under it.
func TestProcessClusterRollingDeployRefusesNoWellBehavedClient(t *testing.T) {
	procs := startCluster(t, 3, 1000)
	d := startDeployClients(procs, 100)
	time.Sleep(time.Second)
	restart := func(i int, kill bool) {
		p := procs[i]
		d.setUp(i, false)
		time.Sleep(100 * time.Millisecond) // the balancer's health check has seen it go
		if kill {
			p.signal(syscall.SIGKILL)
			<-p.exited
		} else {
			p.stop()
		}
		others := append(append([]*proc{}, procs[:i]...), procs[i+1:]...)
		waitClusterConverged(t, others)
		p.start()
		waitClusterConverged(t, procs)
		d.setUp(i, true)
		time.Sleep(time.Second)
	}
	for i := range procs {
		restart(i, false)
	}
	for i := range procs {
		restart(i, true)
	}
	time.Sleep(time.Second)
	d.finish()
	t.Logf("%d requests of 100 clients through two rolling deploys: %d allowed, %d refused, %d other answers", d.sent.Load(), d.allowed.Load(), len(d.denied), len(d.other))
	if d.sent.Load() < 100*20 {
		t.Errorf("only %d requests were answered; the clients should have sent about 100 every 400 ms", d.sent.Load())
	}
	if len(d.denied) > 0 {
		t.Errorf("%d requests of well-behaved clients refused during rolling deploys; want 0:\n%s", len(d.denied), strings.Join(d.denied[:min(20, len(d.denied))], "\n"))
	}
	if len(d.other) > 0 {
		t.Errorf("%d answers neither 200 nor 429:\n%s", len(d.other), strings.Join(d.other[:min(20, len(d.other))], "\n"))
	}
}

// A scale-out from two nodes to three while the old owner of the keys that
// move to the newcomer is stopped (SIGSTOP) for a few hundred
// milliseconds, less than failure detection: once it runs again and the
// hand-off is done, every moved key's count is exactly what was spent of
// it, before and while the old owner was stopped, so exactly the rest
// passes — nothing lost in the move, nothing counted twice.
func TestProcessClusterScaleOutWithAStoppedOldOwnerKeepsTotalsExact(t *testing.T) {
	procs := startCluster(t, 2, 10)
	newcomer := &proc{
		t: t, name: "node2", dir: t.TempDir(),
		http: stablePort(t), admin: stablePort(t), gossip: stablePort(t), peer: stablePort(t),
		limit: 10, join: []int{procs[0].gossip, procs[1].gossip},
		client: &http.Client{Timeout: 10 * time.Second},
	}
	all := append(append([]*proc{}, procs...), newcomer)
	const keys, spent, limit = 60, 4, 10
	for k := range keys {
		key := fmt.Sprintf("scale-%d", k)
		for i := range spent {
			if status, _, _ := procs[i%2].get("/", key); status != http.StatusOK {
				t.Fatalf("spending %s beforehand: %d", key, status)
			}
		}
	}
	// The old owner of keys that move stops; the newcomer joins meanwhile.
	oldOwner := procs[0]
	oldOwner.signal(syscall.SIGSTOP)
	stopped := time.Now()
	go func() {
		time.Sleep(400 * time.Millisecond)
		oldOwner.signal(syscall.SIGCONT)
	}()
	// Requests while it is stopped, to the other old node: what they admit
	// (by fallback, for the stopped node's keys) is counted too.
	during := make([]int, keys)
	var sent sync.WaitGroup
	for k := range keys {
		sent.Add(1)
		go func() {
			defer sent.Done()
			if status, _, _ := procs[1].get("/", fmt.Sprintf("scale-%d", k)); status == http.StatusOK {
				during[k] = 1
			}
		}()
	}
	newcomer.start()
	sent.Wait()
	t.Cleanup(func() {
		newcomer.cmd.Process.Kill()
		<-newcomer.exited
		if t.Failed() {
			t.Logf("%s log:\n%s", newcomer.name, tail(newcomer.logs(), 30))
		}
	})
	if since := time.Since(stopped); since < 400*time.Millisecond {
		time.Sleep(400*time.Millisecond - since)
	}
	waitClusterConverged(t, all)
	settle()
	moved, total := 0, 0
	for k := range keys {
		key := fmt.Sprintf("scale-%d", k)
		if _, body, _ := newcomer.get("/probe", key); strings.HasPrefix(body, "owner ") {
			moved++
		}
		allowed := allowedAcross(all, key, limit+5)
		total += allowed
		if want := limit - spent - during[k]; allowed != want {
			t.Errorf("%s: %d more allowed after the scale-out with %d of %d spent before and %d while the old owner was stopped; want exactly %d", key, allowed, spent, limit, during[k], want)
		}
	}
	t.Logf("%d of %d keys moved to the newcomer; %d admitted while the old owner was stopped; %d more allowed after (exact: %d)", moved, keys, sum(during), total, keys*(limit-spent)-sum(during))
	if moved == 0 {
		t.Fatal("no key moved to the newcomer: the scale-out tested nothing")
	}
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}
