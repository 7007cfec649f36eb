package caddymodule

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// settleClusterCaddyfile is a node of a test cluster in front of a login
// upstream: a login zone that counts only 401s, keyed by X-User, and a
// probe that says who decided a key (X-Key), to find its owner.
func settleClusterCaddyfile(p *proc, upstream string) string {
	var join []string
	for _, port := range p.join {
		join = append(join, fmt.Sprintf("127.0.0.1:%d", port))
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s
		level INFO
	}
	tollgate {
		secret %s
		reputation off
		cluster {
			bind 127.0.0.1:%d
			peer_listen 127.0.0.1:%d
			join %s
			peer_timeout 100ms
		}
	}
}
http://127.0.0.1:%d {
	route {
		tollgate {
			zone login {
				limit 5 15m
				key {http.request.header.X-User}
				count_response {
					status 401
				}
				match {
					path /login
				}
			}
			zone probe {
				limit 1000000000 1h
				key {http.request.header.X-Key}
				match {
					path /probe
				}
			}
		}
		respond /probe "{http.tollgate.source} {http.tollgate.remaining}"
		reverse_proxy %s
	}
}
`, p.admin, filepath.Join(p.dir, "storage"), filepath.Join(p.dir, "caddy.log"), processSecret,
		p.gossip, p.peer, strings.Join(join, " "), p.http, upstream)
}

// The three-node login test: the user's key is owned by another
// node than the ones the logins come through. Four failures, then fifty
// successful logins that are never denied, then sixteen failures at
// concurrency 10 of which exactly one more reaches the upstream; a fresh
// user's twenty concurrent failures reach it exactly five times.
func TestProcessClusterCountResponseAtAPeerOwner(t *testing.T) {
	up := newLoginUpstream(t)
	procs := make([]*proc, 3)
	for i := range procs {
		procs[i] = &proc{
			t: t, name: fmt.Sprintf("node%d", i), dir: t.TempDir(),
			http: stablePort(t), admin: stablePort(t), gossip: stablePort(t), peer: stablePort(t),
			client: &http.Client{Timeout: 10 * time.Second},
		}
	}
	for i, p := range procs {
		for j, q := range procs {
			if i != j {
				p.join = append(p.join, q.gossip)
			}
		}
		p.config = settleClusterCaddyfile(p, up.URL)
	}
	for _, p := range procs {
		p.start()
		t.Cleanup(func() {
			p.cmd.Process.Kill()
			<-p.exited
			if t.Failed() {
				t.Logf("%s log:\n%s", p.name, tail(p.logs(), 30))
			}
		})
	}
	waitClusterConverged(t, procs)
	keys := ownedKeys(t, procs, "user")
	alice, carol := keys[2], "" // alice's logins come through node0 and node1
	for i := 0; carol == "" && i < 1000; i++ {
		if k := fmt.Sprintf("carol-%d", i); strings.HasPrefix(probe(t, procs[2], k), "owner ") {
			carol = k
		}
	}
	if carol == "" {
		t.Fatal("no second key of node2")
	}
	via := procs[:2]
	loginVia := func(p *proc, user, password string) int {
		status, _, _ := p.get("/login", "", "X-User", user, "X-Password", password)
		return status
	}
	for i := range 4 {
		if s := loginVia(via[i%2], alice, "wrong"); s != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, s)
		}
	}
	for i := range 50 {
		if s := loginVia(via[i%2], alice, "right"); s != http.StatusOK {
			t.Fatalf("successful login %d after 4 failures, the key owned by node2: %d, want 200", i+1, s)
		}
	}
	statuses := concurrently(16, 10, func() int { return loginVia(via[0], alice, "wrong") })
	if got := up.failures.Load(); got != 5 {
		t.Fatalf("failed logins that reached the upstream: %d, want exactly 5 (statuses of the last 16: %v)", got, statuses)
	}
	statuses = concurrently(20, 10, func() int { return loginVia(via[1], carol, "wrong") })
	if got := up.failures.Load(); got != 10 || statuses[http.StatusUnauthorized] != 5 {
		t.Fatalf("a fresh user's 20 concurrent failures: %d reached the upstream (want 5), statuses %v", got-5, statuses)
	}
}

// probe returns what the probe zone says of key at p: who decided it.
func probe(t *testing.T, p *proc, key string) string {
	t.Helper()
	_, body, _ := p.get("/probe", key)
	return body
}
