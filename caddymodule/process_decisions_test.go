package caddymodule

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestProcessClusterDecisionsReachEveryNode blocks a key through one of
// three Caddy processes: every node denies it and lets another key
// through; a node that was down when the block was made denies it once
// it is back; the block lifted through another node, every node lets the
// key through again.
func TestProcessClusterDecisionsReachEveryNode(t *testing.T) {
	procs := startCluster(t, 3, 1000)
	base := func(p *proc) string { return fmt.Sprintf("http://127.0.0.1:%d", p.admin) }
	statusOn := func(p *proc, key string) int {
		status, _, _ := p.get("/", key)
		return status
	}
	everywhere := func(key string, want int) {
		t.Helper()
		for _, p := range procs {
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%s answering %s with %d", p.name, key, want), func() bool {
				return statusOn(p, key) == want
			})
		}
	}

	procs[2].stop()
	waitClusterConverged(t, procs[:2])
	var made adminapi.DecisionMade
	if status, body := adminSend(t, base(procs[0]), http.MethodPost, adminapi.PathDecisions,
		`{"key": "blocked-key", "action": "block", "duration": "1h", "reason": "abuse"}`, &made); status != http.StatusCreated {
		t.Fatalf("POST decision: %d %s", status, body)
	}
	procs[2].start()
	waitClusterConverged(t, procs)
	everywhere("blocked-key", http.StatusTooManyRequests)
	for _, p := range procs {
		if s := statusOn(p, "other-key"); s != http.StatusOK {
			t.Errorf("%s: another key: %d; want 200", p.name, s)
		}
		var list adminapi.DecisionList
		adminDo(t, base(p), http.MethodGet, adminapi.PathDecisions, &list)
		if len(list.Items) != 1 || list.Items[0].Key != made.Decision.Key || list.Items[0].Reason != "abuse" {
			t.Errorf("%s lists %+v; want the one block", p.name, list.Items)
		}
	}

	if status, body := adminDo(t, base(procs[1]), http.MethodDelete, adminapi.PathDecision+made.Decision.Key, nil); status != http.StatusOK {
		t.Fatalf("DELETE decision through node1: %d %s", status, body)
	}
	everywhere("blocked-key", http.StatusOK)
}
