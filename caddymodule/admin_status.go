package caddymodule

import (
	"net/http"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
)

// bytesPerKey is what a counter takes, as measured with a million keys.
const bytesPerKey = 80

// handleStatus serves GET /tollgate/status.
func (adminAPI) handleStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := currentState()
	if err != nil {
		return err
	}
	st.mu.Lock()
	node := st.node
	st.mu.Unlock()
	es := st.engine.Stats()
	out := adminapi.Status{
		Keys:   adminapi.KeyStats{Held: es.Keys, Max: es.MaxKeys, Reclaimed: es.Reclaimed, Evicted: es.Evicted, Overflowed: es.Overflowed, Swept: es.Swept},
		Memory: adminapi.MemoryStats{CounterBytes: int64(es.Keys) * bytesPerKey},
	}
	if node != nil {
		out.Cluster = clusterView(node.Status(), time.Now())
		out.Ring = ringAgreement(node, out.Cluster.RingFingerprint)
	}
	return writeJSON(w, out)
}

// ringAgreement asks every node for its ring fingerprint, within the list
// deadline, and compares each with own.
func ringAgreement(node *cluster.Node, own string) adminapi.RingAgreement {
	res := node.Gather(gatherRing, nil, gatherWithin)
	ra := adminapi.RingAgreement{Agreed: len(res.Unanswered) == 0, Fingerprints: map[string]string{}, Unreachable: res.Unanswered}
	for name, fp := range res.Answers {
		ra.Fingerprints[name] = string(fp)
		if string(fp) != own {
			ra.Agreed = false
		}
	}
	return ra
}

// clusterView turns the node's status into the admin API's view; a
// standalone node's has no fallback fields.
func clusterView(s cluster.Status, now time.Time) adminapi.ClusterView {
	v := adminapi.ClusterView{
		Node: s.Node, Standalone: s.Standalone, RingFingerprint: s.RingFingerprint,
		Members: make([]adminapi.MemberView, 0, len(s.Members)), PeersInFallback: s.PeersInFallback,
		HandedOffIn: s.HandedOffIn, Pulled: s.Pulled, PeerFrames: s.PeerFrames, PeerItems: s.PeerItems,
	}
	for _, m := range s.Members {
		v.Members = append(v.Members, adminapi.MemberView{Name: m.Name, PeerAddr: m.PeerAddr, State: m.State, Share: m.Share, Fallback: m.Fallback})
	}
	if v.PeersInFallback == nil {
		v.PeersInFallback = []string{}
	}
	if !s.Standalone {
		v.FallbackMode = s.FallbackMode
		v.FallbackRatio, v.FallbackKeys, v.Activations = &s.FallbackRatio, &s.FallbackKeys, &s.Activations
		if ago, err := time.ParseDuration(s.LastRingChangeAgo); err == nil {
			v.LastRingChange = instant(now.Add(-ago))
		}
	}
	return v
}

// handleReputation serves GET /tollgate/reputation.
func (adminAPI) handleReputation(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return methodNotAllowed(r, "GET")
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	view := adminapi.ReputationView{Buckets: []adminapi.ReputationBucket{}, Unreachable: []string{}}
	if app.reputation == nil {
		return writeJSON(w, view)
	}
	view.Enabled = true
	counts, missing := app.node.ReputationBuckets()
	for i, b := range app.reputation.Buckets {
		rb := adminapi.ReputationBucket{From: b.Min, Factor: b.Factor}
		if i < len(counts) {
			rb.Clients = counts[i]
		}
		view.Buckets = append(view.Buckets, rb)
	}
	if missing != nil {
		view.Unreachable = missing
	}
	return writeJSON(w, view)
}
