package cluster

import (
	"slices"
	"strings"
	"time"
)

// MemberStatus is one member as this node sees it.
type MemberStatus struct {
	Name     string  `json:"name"`
	PeerAddr string  `json:"peer_addr,omitempty"`
	State    string  `json:"state"` // self, alive, unreachable, joining or leaving
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
	c := n.core()
	ring := c.Ring()
	self := n.Name()
	s := Status{
		Node:            self,
		Standalone:      n.standalone,
		RingFingerprint: ring.Fingerprint(),
		PeersInFallback: []string{},
	}
	shares := ring.Shares()
	if !n.standalone {
		mode, ratio := c.Fallback()
		st := c.Stats()
		s.FallbackMode = mode.String()
		s.FallbackRatio = ratio
		s.FallbackKeys = c.FallbackKeys()
		s.Activations = st.Activations.Load()
		s.HandedOffIn = st.Received.Load()
		s.Pulled = st.Pulled.Load()
		s.Reconciled = st.Reconciled.Load()
		if at := n.changedAt.Load(); at != 0 {
			s.LastRingChangeAgo = time.Since(time.Unix(0, at)).Round(time.Millisecond).String()
		}
	}
	s.Members = append(s.Members, MemberStatus{Name: self, PeerAddr: n.PeerAddr(), State: "self", Share: shares[self]})
	for _, name := range n.members.names() {
		if name == self {
			continue
		}
		e, ok := n.members.state(name)
		if !ok || !e.dead.IsZero() {
			continue // gossip declared it dead: not a member
		}
		ms := MemberStatus{Name: name, PeerAddr: e.meta.peerAddr, State: "alive", Share: shares[name]}
		switch {
		case e.meta.flags&metaLeaving != 0:
			ms.State = "leaving"
		case e.meta.flags&metaJoining != 0:
			ms.State = "joining"
		case !c.Reachable(name):
			ms.State, ms.Fallback = "unreachable", true
			s.PeersInFallback = append(s.PeersInFallback, name)
		}
		s.Members = append(s.Members, ms)
	}
	for _, p := range n.peers.all() {
		s.PeerFrames += p.frames.Load()
		s.PeerItems += p.items.Load()
	}
	slices.SortFunc(s.Members, func(a, b MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(s.PeersInFallback)
	return s
}
