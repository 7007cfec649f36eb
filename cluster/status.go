package cluster

import (
	"slices"
	"sync/atomic"
	"time"
)

// MemberStatus is one member as this node sees it.
type MemberStatus struct {
	Name     string  `json:"name"`
	PeerAddr string  `json:"peer_addr,omitempty"`
	State    string  `json:"state"` // self, alive, unreachable or leaving
	Share    float64 `json:"ring_share"`
	Fallback bool    `json:"fallback"` // calls to it go to fallback now
}

// Status is a node's view of the cluster.
type Status struct {
	Node              string         `json:"node"`
	Standalone        bool           `json:"standalone"`
	RingFingerprint   string         `json:"ring_fingerprint"`
	Members           []MemberStatus `json:"members"`
	PeersInFallback   []string       `json:"peers_in_fallback"`
	FallbackMode      string         `json:"fallback_mode"`
	FallbackRatio     float64        `json:"fallback_ratio"`
	FallbackKeys      int            `json:"fallback_keys"`
	Activations       uint64         `json:"fallback_activations"`
	HandedOffIn       uint64         `json:"counters_received"`
	Pulled            uint64         `json:"counters_pulled"`
	Reconciled        uint64         `json:"fallback_counters_reconciled"`
	PeerFrames        uint64         `json:"peer_frames"`
	PeerItems         uint64         `json:"peer_items"`
	LastRingChangeAgo string         `json:"last_ring_change_ago,omitempty"`
}

// Status reports the node's view of the cluster.
func (n *Node) Status() Status {
	st := n.state.Load()
	s := Status{
		Node:            n.name,
		Standalone:      n.standalone,
		RingFingerprint: st.ring.Fingerprint(),
		PeersInFallback: []string{},
	}
	shares := st.ring.Shares()
	if !n.standalone {
		s.FallbackMode = n.fallback.mode().String()
		s.FallbackRatio = n.fallback.ratio()
		s.FallbackKeys = n.fallback.Stats().Keys
		s.Activations = n.fallback.activations.Load()
		s.HandedOffIn = n.stats.handedOff.Load()
		s.Pulled = n.stats.pulled.Load()
		s.Reconciled = n.stats.reconciled.Load()
		s.LastRingChangeAgo = time.Since(st.changed).Round(time.Millisecond).String()
	}
	leaving := n.members.leaving()
	for _, name := range n.members.names(n.name) {
		ms := MemberStatus{Name: name, State: "alive", Share: shares[name]}
		if name == n.name {
			ms.State, ms.PeerAddr = "self", n.PeerAddr()
		}
		if p := n.peers.get(name); p != nil {
			ms.PeerAddr = p.member.PeerAddr
			ms.Fallback = p.breaker.open() || !p.connected.Load()
			if ms.Fallback {
				ms.State = "unreachable"
			}
			s.PeerFrames += p.frames.Load()
			s.PeerItems += p.items.Load()
		}
		if leaving[name] {
			ms.State = "leaving"
		}
		if ms.Fallback {
			s.PeersInFallback = append(s.PeersInFallback, name)
		}
		s.Members = append(s.Members, ms)
	}
	slices.SortFunc(s.Members, func(a, b MemberStatus) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	slices.Sort(s.PeersInFallback)
	return s
}

// nodeStats counts what a node did, for Status and tests.
type nodeStats struct {
	handedOff     atomic.Uint64 // counters received in hand-offs
	pulled        atomic.Uint64 // counters pulled from their previous owners
	pullCalls     atomic.Uint64 // transfer calls made to pull keys
	reconciled    atomic.Uint64 // fallback counters sent to (or merged at) their owners
	replicaBytes  atomic.Uint64 // bytes of replica batches sent
	replicaStates atomic.Uint64 // counters sent to successors
	fromReplica   atomic.Uint64 // counters a new owner started from its replica
}
