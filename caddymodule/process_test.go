package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// These tests run real Caddy processes built from this repository (the same
// main package xcaddy.sh builds) as a cluster on loopback.

const processSecret = "process-test-secret-0123456789abcdef"

// proc is one Caddy process of a test cluster.
type proc struct {
	t                         testing.TB
	name                      string
	dir                       string
	http, admin, gossip, peer int
	join                      []int // gossip ports of the others
	limit                     int
	policy                    bool   // reputation on, a tiered zone /credits
	config                    string // a Caddyfile of its own, instead of the cluster one
	snapshotEvery             string // snapshot_interval, when set
	cmd                       *exec.Cmd
	exited                    chan struct{}
	client                    *http.Client
}

func (p *proc) caddyfile() string {
	if p.config != "" {
		return p.config
	}
	var join []string
	for _, port := range p.join {
		join = append(join, fmt.Sprintf("127.0.0.1:%d", port))
	}
	joinLine := ""
	if len(join) > 0 {
		joinLine = "join " + strings.Join(join, " ")
	}
	// Every request of a test comes from one client: reputation would cut
	// its limits as it is denied, so it is off unless the test is about it.
	reputation, credits, apiPaths, respond := "reputation off", "", "/probe", `{http.tollgate.source} {http.tollgate.remaining}`
	if p.policy {
		reputation, apiPaths = "reputation {\n\t\t\tpenalty 5\n\t\t}", "/probe /credits"
		credits = `tier_from {http.request.header.X-Tier}
		zone credits {
			limit 3 1h
			key {http.request.header.X-Key}
			tier pro 5
			match {
				path /credits
			}
		}`
		respond += " {http.tollgate.client_id}"
	}
	if p.snapshotEvery != "" {
		reputation += "\n\t\tsnapshot_interval " + p.snapshotEvery
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s
		level %s
	}
	tollgate {
		secret %s
		%s
		cluster {
			bind 127.0.0.1:%d
			peer_listen 127.0.0.1:%d
			%s
			peer_timeout 100ms
		}
	}
}
http://127.0.0.1:%d {
	tollgate {
		zone api {
			limit %d 1h
			key {http.request.header.X-Key}
			match {
				not path %s
			}
		}
		zone probe {
			limit 1000000000 1h
			key {http.request.header.X-Key}
			match {
				path /probe
			}
		}
		%s
	}
	respond "%s"
	handle_errors 429 {
		respond "{http.tollgate.source} {http.tollgate.remaining}" 429
	}
}
`, p.admin, filepath.Join(p.dir, "storage"), filepath.Join(p.dir, "caddy.log"), processLogLevel(), processSecret, reputation,
		p.gossip, p.peer, joinLine, p.http, p.limit, apiPaths, credits, respond)
}

// start runs the process and waits until it serves.
func (p *proc) start() {
	p.t.Helper()
	cfgPath := filepath.Join(p.dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(p.caddyfile()), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(testutil.TollgateBinary(p.t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+p.dir, "XDG_CONFIG_HOME="+p.dir)
	out, _ := os.OpenFile(filepath.Join(p.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { p.cmd.Wait(); out.Close(); close(p.exited) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := p.client.Get(fmt.Sprintf("http://127.0.0.1:%d/probe", p.http))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		exited := false
		select {
		case <-p.exited:
			exited = true
		default:
		}
		if exited || time.Now().After(deadline) {
			stderr, _ := os.ReadFile(filepath.Join(p.dir, "stderr.log"))
			p.t.Fatalf("%s not serving (exited: %v):\n%s", p.name, exited, tail(string(stderr), 10))
		}
	}
}

// stop sends SIGTERM (Caddy shuts down gracefully) and waits for the exit.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		p.t.Fatalf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

// allowedAcross sends n requests for key, in turn to each of procs, and
// returns how many were allowed.
func allowedAcross(procs []*proc, key string, n int) int {
	allowed := 0
	for i := range n {
		if status, _, _ := procs[i%len(procs)].get("/", key); status == http.StatusOK {
			allowed++
		}
	}
	return allowed
}

// signal sends sig to the process; for SIGSTOP it returns once the process
// is stopped, as a signal is delivered asynchronously.
func (p *proc) signal(sig syscall.Signal) {
	p.cmd.Process.Signal(sig)
	if sig != syscall.SIGSTOP {
		return
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for range 1000 {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // not on Linux, or gone
		}
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		time.Sleep(time.Millisecond)
	}
	p.t.Fatalf("%s did not stop after SIGSTOP", p.name)
}

// get sends a request for key and returns the status, the body and how long
// the answer took. headers are more header names and values.
func (p *proc) get(path, key string, headers ...string) (int, string, time.Duration) {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.http, path), nil)
	req.Header.Set("X-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("%s: GET %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), time.Since(start)
}

// status reads GET /tollgate/status.
func (p *proc) status() adminapi.Status {
	p.t.Helper()
	var st adminapi.Status
	resp, err := p.client.Get(fmt.Sprintf("http://127.0.0.1:%d/tollgate/status", p.admin))
	if err != nil {
		p.t.Fatalf("%s: status: %v", p.name, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatalf("%s: status: %v", p.name, err)
	}
	return st
}

func (p *proc) logs() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "caddy.log"))
	return string(b)
}

// startCluster starts n Caddy processes that join each other.
func startCluster(t *testing.T, n, limit int) []*proc {
	t.Helper()
	return startClusterOf(t, n, limit, false)
}

// startClusterOf is startCluster, with the policy zones when policy is set.
func startClusterOf(t *testing.T, n, limit int, policy bool) []*proc {
	t.Helper()
	return startClusterWith(t, n, limit, func(p *proc) { p.policy = policy })
}

// startClusterWith is startCluster, with each process's settings changed
// by set before it starts.
func startClusterWith(t *testing.T, n, limit int, set func(*proc)) []*proc {
	t.Helper()
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = &proc{
			t: t, name: fmt.Sprintf("node%d", i), dir: t.TempDir(),
			http: stablePort(t), admin: stablePort(t), gossip: stablePort(t), peer: stablePort(t),
			limit:  limit,
			client: &http.Client{Timeout: 10 * time.Second},
		}
		set(procs[i])
	}
	for i, p := range procs {
		for j, q := range procs {
			if i != j {
				p.join = append(p.join, q.gossip)
			}
		}
	}
	for _, p := range procs {
		p.start()
		t.Cleanup(func() {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.exited
			if t.Failed() {
				stderr, _ := os.ReadFile(filepath.Join(p.dir, "stderr.log"))
				t.Logf("%s log, the cluster's lines:\n%s\n%s stderr:\n%s", p.name, tail(clusterLines(p.logs()), 40), p.name, tail(string(stderr), 10))
				keepProcessLog(t, p)
			}
		})
	}
	waitClusterConverged(t, procs)
	return procs
}

// waitClusterConverged waits until every running process sees all of them
// in one ring.
func waitClusterConverged(t *testing.T, procs []*proc) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d processes agreeing on one ring", len(procs)), func() bool {
		fp := ""
		for _, p := range procs {
			st := p.status().Cluster
			if len(st.Members) != len(procs) || len(st.PeersInFallback) > 0 {
				return false
			}
			if fp == "" {
				fp = st.RingFingerprint
			}
			if st.RingFingerprint != fp {
				return false
			}
		}
		return true
	})
}

// stablePort returns a free loopback port below the kernel's range of
// ephemeral ports, so that a process restarted on it does not find it taken
// by some client's outgoing connection in the meantime.
func stablePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscanf(string(b), "%d", &low)
	}
	for range 1000 {
		port := 10000 + rand.IntN(max(1, low-10000))
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(parts[max(0, len(parts)-lines):], "\n")
}

// processLogsEnv names a directory: when it is set, the processes log at
// debug level (the cluster then logs every movement of counts between
// nodes) and a failed test keeps each process's whole log there.
const processLogsEnv = "TOLLGATE_PROCESS_LOGS"

// processLogLevel is the level the processes log at.
func processLogLevel() string {
	if os.Getenv(processLogsEnv) != "" {
		return "DEBUG"
	}
	return "INFO"
}

// keepProcessLog copies p's log into the directory processLogsEnv names,
// if it names one.
func keepProcessLog(t testing.TB, p *proc) {
	dir := os.Getenv(processLogsEnv)
	if dir == "" {
		return
	}
	name := fmt.Sprintf("%s-%d-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano(), p.name)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(p.logs()), 0o644); err != nil {
		t.Logf("keeping %s's log: %v", p.name, err)
		return
	}
	t.Logf("%s's whole log: %s", p.name, filepath.Join(dir, name))
}

// clusterLines keeps the lines of a process's log that the cluster wrote:
// those that explain a failure, which the requests' lines would drown.
func clusterLines(log string) string {
	var kept []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"logger":"tollgate.cluster`) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// ownedKeys finds, for each process, a key it owns (its probe answer says
// "owner").
func ownedKeys(t *testing.T, procs []*proc, prefix string) []string {
	t.Helper()
	keys := make([]string, len(procs))
	found := 0
	for i := 0; found < len(procs) && i < 1000; i++ {
		key := fmt.Sprintf("%s-%d", prefix, i)
		for j, p := range procs {
			if keys[j] != "" {
				continue
			}
			if _, body, _ := p.get("/probe", key); strings.HasPrefix(body, "owner ") {
				keys[j] = key
				found++
			}
		}
	}
	if found < len(procs) {
		t.Fatalf("found keys for %d of %d processes", found, len(procs))
	}
	return keys
}

func TestProcessClusterCountsExactlyThroughHTTP(t *testing.T) {
	procs := startCluster(t, 3, 100)
	for owner, key := range ownedKeys(t, procs, "exact") {
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for g := range 30 {
			wg.Go(func() {
				for i := range 10 {
					status, _, _ := procs[(g+i)%3].get("/", key) // round-robin
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if statuses[http.StatusOK] != 100 || statuses[http.StatusTooManyRequests] != 200 {
			t.Errorf("key owned by node%d: 300 requests round-robin against 100 gave %v", owner, statuses)
		}
	}
}

func TestProcessClusterFreezeAndKillOfAnOwner(t *testing.T) {
	procs := startCluster(t, 3, 100)
	keys := ownedKeys(t, procs, "freeze")
	owner, survivors := procs[2], procs[:2]
	key := keys[2]
	for range 10 {
		survivors[0].get("/", key) // 10 spent at the owner
	}

	// Frozen: the owner's process still holds its sockets but answers
	// nothing. The others keep answering within the fallback caps.
	owner.signal(syscall.SIGSTOP)
	inFallback := 0
	for _, s := range survivors {
		// 50 requests each: past the fallback cap of 40, and over well
		// before memberlist would declare the owner dead (about 2 s).
		allowed := 0
		for range 50 {
			status, body, took := s.get("/", key)
			if status >= 500 {
				t.Fatalf("%s answered %d while the owner was frozen", s.name, status)
			}
			if took > 2*time.Second {
				t.Fatalf("%s took %s to answer while the owner was frozen", s.name, took)
			}
			if status == http.StatusOK {
				allowed++
				if !strings.HasPrefix(body, "fallback") {
					t.Fatalf("%s allowed by %q while the owner was frozen", s.name, body)
				}
			}
		}
		if allowed == 0 || allowed > 40 {
			t.Errorf("%s allowed %d of 50 while the owner was frozen; want at most 40 (fallback ratio 0.4 of 100)", s.name, allowed)
		}
		inFallback += allowed
	}

	// Thawed: exact again, from the owner's count with what the survivors
	// admitted in fallback added: the window's total is the limit.
	owner.signal(syscall.SIGCONT)
	testutil.Eventually(t, 10*time.Second, "the owner answering again", func() bool {
		_, body0, _ := survivors[0].get("/probe", key)
		_, body1, _ := survivors[1].get("/probe", key)
		return strings.HasPrefix(body0, "peer ") && strings.HasPrefix(body1, "peer ")
	})
	status, body, _ := survivors[1].get("/", key)
	var remaining int
	if status != http.StatusOK || !strings.HasPrefix(body, "peer ") {
		t.Fatalf("after the thaw: %d %q; want allowed by the owner", status, body)
	}
	fmt.Sscanf(strings.TrimPrefix(body, "peer "), "%d", &remaining)
	exact := 100 - 10 - inFallback - 1
	if remaining > exact || remaining < exact-3 {
		t.Errorf("after the thaw the owner has %d left; want %d (10 spent before, %d in fallback, 1 now; a call in flight at the freeze may count twice)", remaining, exact, inFallback)
	}
	allowed := allowedAcross(survivors, key, remaining+20)
	if allowed != remaining {
		t.Errorf("after the thaw %d allowed; the owner said %d were left", allowed, remaining)
	}
	if total := 10 + inFallback + 1 + allowed; total > 100 {
		t.Errorf("%d admitted in the window through the freeze; the limit is 100", total)
	}

	// Killed: the others notice, agree on a ring without it and carry on,
	// counting its keys afresh at their new owners.
	owner.signal(syscall.SIGKILL)
	<-owner.exited
	waitClusterConverged(t, survivors)
	fresh := keys[2] + "-after"
	allowed = 0
	for i := range 150 {
		status, body, _ := survivors[i%2].get("/", fresh)
		if status >= 500 {
			t.Fatalf("%d after the kill", status)
		}
		if status == http.StatusOK {
			allowed++
			if strings.HasPrefix(body, "fallback") {
				t.Fatalf("still in fallback after the ring converged: %q", body)
			}
		}
	}
	if allowed != 100 {
		t.Errorf("after the kill: %d of 150 allowed against 100; want exactly 100", allowed)
	}
}

func TestProcessClusterRollingRestartKeepsCounts(t *testing.T) {
	rollingRestart(t, startCluster(t, 3, 10))
}

// A graceful rolling restart of nodes that have written periodic snapshots
// (as a node up for minutes has) still lets exactly the rest through: the
// shutdown snapshot, written under the node's name after its hand-off,
// replaces the periodic one, so nothing handed over is restored again.
func TestProcessClusterRollingRestartAfterSnapshotsKeepsCounts(t *testing.T) {
	procs := startClusterWith(t, 3, 10, func(p *proc) { p.snapshotEvery = "1s" })
	rollingRestart(t, procs)
}

// rollingRestart spends 4 of 10 on a key per node, restarts the nodes one
// at a time, and checks that exactly 6 more pass for each key.
func rollingRestart(t *testing.T, procs []*proc) {
	t.Helper()
	keys := ownedKeys(t, procs, "rolling")
	for _, key := range keys {
		for i := range 4 {
			if status, _, _ := procs[i%3].get("/", key); status != http.StatusOK {
				t.Fatalf("spending beforehand: %d", status)
			}
		}
	}
	if procs[0].snapshotEvery != "" {
		time.Sleep(1500 * time.Millisecond) // periodic snapshots hold the counts
	}
	for i, p := range procs {
		p.stop() // graceful: hands its counters over, then leaves
		if !strings.Contains(p.logs(), "left the cluster") {
			t.Fatalf("%s exited without leaving the cluster gracefully", p.name)
		}
		others := append(append([]*proc{}, procs[:i]...), procs[i+1:]...)
		waitClusterConverged(t, others)
		p.start()
		waitClusterConverged(t, procs)
	}
	for owner, key := range keys {
		if allowed := allowedAcross(procs, key, 20); allowed != 6 {
			t.Errorf("key first owned by node%d: %d of 20 allowed after a rolling restart with 4 of 10 spent; want 6 (10 in total)", owner, allowed)
		}
	}
}

func TestProcessClusterReloadKeepsMembership(t *testing.T) {
	procs := startCluster(t, 3, 1000)
	before := procs[1].status().Cluster
	changes := func() int {
		return strings.Count(procs[1].logs(), "cluster membership changed") + strings.Count(procs[2].logs(), "cluster membership changed")
	}
	changesBefore := changes()
	stopLoad := make(chan struct{})
	var loadWG sync.WaitGroup
	loadWG.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			p := procs[i%3]
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", p.http), nil)
			req.Header.Set("X-Key", fmt.Sprintf("load-%d", i%50))
			resp, err := p.client.Do(req)
			if err != nil {
				// The reloaded node's old server shares the listener while
				// it drains, and closes unanswered a connection it accepts
				// then; the others serve throughout.
				if p != procs[0] {
					t.Errorf("%s: GET / during node0's reload: %v", p.name, err)
				}
				p.client.CloseIdleConnections()
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	time.Sleep(300 * time.Millisecond)
	// Reload node0 with a changed limit, through its admin API.
	procs[0].limit = 2000
	cfgPath := filepath.Join(procs[0].dir, "Caddyfile")
	os.WriteFile(cfgPath, []byte(procs[0].caddyfile()), 0o644)
	out, err := exec.Command(testutil.TollgateBinary(t), "reload", "--config", cfgPath, "--adapter", "caddyfile",
		"--address", fmt.Sprintf("127.0.0.1:%d", procs[0].admin)).CombinedOutput()
	if err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	time.Sleep(500 * time.Millisecond)
	close(stopLoad)
	loadWG.Wait()

	after := procs[1].status().Cluster
	if after.RingFingerprint != before.RingFingerprint || len(after.Members) != 3 {
		t.Errorf("the ring changed across a reload: %s -> %s", before.RingFingerprint, after.RingFingerprint)
	}
	if n := strings.Count(procs[0].logs(), "cluster node started"); n != 1 {
		t.Errorf("node0 started its cluster node %d times; a reload must keep it", n)
	}
	if n := changes() - changesBefore; n != 0 {
		t.Errorf("the other nodes saw the membership change %d times during the reload", n)
	}
	if _, body, _ := procs[0].get("/", "after-reload"); !strings.Contains(body, "1999") {
		t.Errorf("the new limit does not apply after the reload: %q", body)
	}
}

func TestProcessClusterAdminAPI(t *testing.T) {
	procs := startCluster(t, 3, 5)
	key := ownedKeys(t, procs, "admin")[1] // owned by node1
	for i := range 6 {
		procs[i%3].get("/", key)
	}
	// Each node has now been denied once for the key; the two that asked
	// the owner remember it as blocked.
	for _, p := range procs {
		p.get("/", key)
	}
	for _, p := range procs {
		var view adminapi.ClientView
		adminDo(t, fmt.Sprintf("http://127.0.0.1:%d", p.admin), http.MethodGet, "/tollgate/clients/"+key+"?zone=api", &view)
		if len(view.Zones) != 1 || !view.Zones[0].Exhausted || view.Zones[0].Remaining != 0 {
			t.Errorf("%s's view of the client: %+v; want the owner's: exhausted", p.name, view)
		}
		if view.Owner != procs[1].status().Cluster.Node {
			t.Errorf("%s names %q as the owner; want node1", p.name, view.Owner)
		}
		if r := view.Replica; r == "" || r == view.Owner || (r != procs[0].status().Cluster.Node && r != procs[2].status().Cluster.Node) {
			t.Errorf("%s names %q as the replica; want node0 or node2", p.name, r)
		}
	}
	var reset adminapi.ResetResult
	adminDo(t, fmt.Sprintf("http://127.0.0.1:%d", procs[2].admin), http.MethodDelete, "/tollgate/clients/"+key, &reset)
	if len(reset.Unreachable) != 0 || len(reset.ZonesReset) != 2 {
		t.Fatalf("reset %+v", reset)
	}
	for i, p := range procs {
		status, body, _ := p.get("/", key)
		if want := fmt.Sprint(4 - i); status != http.StatusOK || !strings.HasSuffix(body, " "+want) {
			t.Errorf("after the reset, %s: %d %q; want allowed with %s left", p.name, status, body, want)
		}
	}
	// A node that forwards has peer call metrics.
	m := scrape(t, fmt.Sprintf("http://127.0.0.1:%d", procs[0].admin))
	if m[`tollgate_peer_call_duration_seconds_count{result="ok"}`] == 0 || m[`tollgate_cluster_members`] != 3 {
		t.Errorf("node0 metrics: peer calls %v, members %v", m[`tollgate_peer_call_duration_seconds_count{result="ok"}`], m[`tollgate_cluster_members`])
	}
}

func TestProcessClusterPolicyReachesEveryNodeAndSurvivesRestarts(t *testing.T) {
	procs := startClusterOf(t, 3, 1000, true)
	keys := ownedKeys(t, procs, "policy")
	base := func(p *proc) string { return fmt.Sprintf("http://127.0.0.1:%d", p.admin) }
	credits := func(key string, tries int, headers ...string) (allowed int, clientID string) {
		for i := range tries {
			status, body, _ := procs[i%3].get("/credits", key, headers...)
			if status == http.StatusOK {
				allowed++
			}
			if f := strings.Fields(body); len(f) == 3 {
				clientID = f[2]
			}
		}
		return allowed, clientID
	}

	// A tier limit set through one node's admin API is in effect on all.
	if status, body := adminSend(t, base(procs[0]), http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 7}}`, nil); status != http.StatusOK {
		t.Fatalf("PUT /tollgate/tiers: %d %s", status, body)
	}
	tierEverywhere := func(want int64) {
		t.Helper()
		for _, p := range procs {
			testutil.Eventually(t, 10*time.Second, p.name+" having the run-time tier", func() bool {
				var view adminapi.TiersView
				adminDo(t, base(p), http.MethodGet, "/tollgate/tiers", &view)
				return view.Zones["credits"].Effective["pro"] == want
			})
		}
	}
	tierEverywhere(7)
	allowed, clientID := credits(keys[2], 9, "X-Tier", "pro")
	if allowed != 7 {
		t.Fatalf("%d of 9 allowed for a pro key, with pro set to 7 at run time", allowed)
	}

	// A grant given through node0 for a key node1 owns: the base 3, then
	// the grant's 4.
	var grant adminapi.GrantView
	body := fmt.Sprintf(`{"zone":"credits","key":%q,"amount":4,"duration":"1h"}`, keys[1])
	if status, got := adminSend(t, base(procs[0]), http.MethodPost, "/tollgate/grants", body, &grant); status != http.StatusCreated {
		t.Fatalf("POST /tollgate/grants: %d %s", status, got)
	}
	if allowed, _ := credits(keys[1], 5); allowed != 5 {
		t.Fatalf("%d of 5 allowed with a limit of 3 and a grant of 4", allowed)
	}

	// Two denials so far, 5 points each.
	reputation := func(p *proc) float64 {
		t.Helper()
		var view adminapi.ClientView
		if status, got := adminDo(t, base(p), http.MethodGet, "/tollgate/clients/"+clientID, &view); status != http.StatusOK || view.Reputation == nil {
			t.Fatalf("%s: client view: %d %s", p.name, status, got)
		}
		return float64(*view.Reputation)
	}
	if s := reputation(procs[1]); s < 89.9 || s > 90.1 {
		t.Fatalf("reputation %g after two denials of 5 points; want 90", s)
	}

	// Every node restarts in turn; what they kept moves with ownership
	// and comes back.
	for i, p := range procs {
		p.stop()
		others := append(append([]*proc{}, procs[:i]...), procs[i+1:]...)
		waitClusterConverged(t, others)
		p.start()
		waitClusterConverged(t, procs)
	}
	tierEverywhere(7)
	for _, p := range procs {
		var g adminapi.GrantView
		if status, got := adminDo(t, base(p), http.MethodGet, "/tollgate/grants/credits/"+keys[1], &g); status != http.StatusOK {
			t.Fatalf("%s: the grant after the restarts: %d %s", p.name, status, got)
		}
		if g.Version != grant.Version || g.Used != 2 || g.Remaining != 2 {
			t.Errorf("%s: the grant after the restarts: %+v; want version %s with 2 used", p.name, g, grant.Version)
		}
	}
	if s := reputation(procs[2]); s < 89.9 || s > 90.1 {
		t.Errorf("reputation %g after the restarts; want 90 kept", s)
	}
	var buckets adminapi.ReputationView
	adminDo(t, base(procs[0]), http.MethodGet, "/tollgate/reputation", &buckets)
	if len(buckets.Buckets) != 4 || buckets.Buckets[0].Clients != 1 || len(buckets.Unreachable) != 0 {
		t.Errorf("reputation buckets across the cluster: %+v; want the one client in the top bucket", buckets)
	}
	if allowed, _ := credits(keys[2], 3, "X-Tier", "pro"); allowed != 0 {
		t.Errorf("%d allowed after the restarts for a pro key that had spent its 7", allowed)
	}
}

// TestProcessClusterListsGatherFromEveryNode denies a key through each of
// three Caddy processes: any node lists all three, and with one node
// frozen the list names it as not answering.
func TestProcessClusterListsGatherFromEveryNode(t *testing.T) {
	procs := startCluster(t, 3, 1)
	keys := []string{"list-a", "list-b", "list-c"}
	for i, p := range procs {
		p.get("/", keys[i])
		if status, _, _ := p.get("/", keys[i]); status != http.StatusTooManyRequests {
			t.Fatalf("%s: second request of %s: %d; want 429", p.name, keys[i], status)
		}
	}
	base := func(p *proc) string { return fmt.Sprintf("http://127.0.0.1:%d", p.admin) }
	for _, p := range procs {
		var list adminapi.DeniedList
		if status, body := adminDo(t, base(p), http.MethodGet, "/tollgate/denied?zone=api", &list); status != http.StatusOK {
			t.Fatalf("%s: %d %s", p.name, status, body)
		}
		if len(list.Items) != 3 || len(list.Unreachable) != 0 {
			t.Errorf("%s lists %+v; want the three keys, every node answering", p.name, list)
		}
	}
	for _, p := range procs {
		if ra := p.status().Ring; !ra.Agreed || len(ra.Fingerprints) != 3 || len(ra.Unreachable) != 0 {
			t.Errorf("%s: ring agreement %+v; want three nodes agreeing", p.name, ra)
		}
	}
	addr := strings.TrimPrefix(base(procs[0]), "http://")
	out, errOut, code := testutil.CLI(t, "status", "--address", addr)
	if code != 0 || !regexp.MustCompile(`ring agreement +yes`).MatchString(out) || strings.Count(out, "alive") != 2 ||
		strings.Count(out, "self") != 1 || !regexp.MustCompile(`(?m)^api +3 +0 +3$`).MatchString(out) {
		t.Errorf("caddy tollgate status of a cluster: exit %d\n%s%s", code, out, errOut)
	}
	frozen := procs[2]
	frozenName := frozen.status().Cluster.Node
	frozen.signal(syscall.SIGSTOP)
	t.Cleanup(func() { frozen.signal(syscall.SIGCONT) })
	// The three questions are asked at once: each waits up to its 2 s
	// deadline for the frozen node, and memberlist may declare it dead not
	// long after, when it is no longer a member to wait for.
	var (
		list adminapi.DeniedList
		ra   adminapi.RingAgreement
		wg   sync.WaitGroup
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		adminDo(t, base(procs[0]), http.MethodGet, "/tollgate/denied?zone=api", &list)
	}()
	go func() { defer wg.Done(); ra = procs[0].status().Ring }()
	go func() { defer wg.Done(); out, errOut, code = testutil.CLI(t, "status", "--address", addr) }()
	wg.Wait()
	if len(list.Items) != 2 || !slices.Contains(list.Unreachable, frozenName) {
		t.Errorf("with %s frozen: %+v; want two keys and it named", frozenName, list)
	}
	if ra.Agreed || !slices.Contains(ra.Unreachable, frozenName) {
		t.Errorf("with %s frozen: ring agreement %+v; want not agreed, it named", frozenName, ra)
	}
	if code != 0 || !strings.Contains(out, "NO: "+frozenName+" did not answer") {
		t.Errorf("caddy tollgate status with %s frozen: exit %d\n%s%s", frozenName, code, out, errOut)
	}
}
