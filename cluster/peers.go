package cluster

import "sync"

// peerSet holds the node's connections to its peers: one per member, and
// per member still leaving. A peerSet is safe for concurrent use.
type peerSet struct {
	mu    sync.Mutex
	peers map[string]*peer
}

func newPeerSet() *peerSet {
	return &peerSet{peers: make(map[string]*peer)}
}

// get returns the peer called name, or nil.
func (s *peerSet) get(name string) *peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peers[name]
}

// all returns every peer.
func (s *peerSet) all() []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, p)
	}
	return out
}

// match keeps one peer for each of members, made by newPeer, replacing
// those whose peer address changed, and drops the peers that are neither
// members nor kept. It returns the peers dropped or replaced, for the
// caller to close. keep and newPeer run under the set's lock and must not
// use the set.
func (s *peerSet) match(members []Member, keep func(name string) bool, newPeer func(Member) *peer) []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[string]bool, len(members))
	var gone []*peer
	for _, m := range members {
		want[m.Name] = true
		if p, ok := s.peers[m.Name]; !ok || p.member.PeerAddr != m.PeerAddr {
			if ok {
				gone = append(gone, p)
			}
			s.peers[m.Name] = newPeer(m)
		}
	}
	for name, p := range s.peers {
		if !want[name] && !keep(name) {
			gone = append(gone, p)
			delete(s.peers, name)
		}
	}
	return gone
}

// takeAll removes and returns every peer.
func (s *peerSet) takeAll() []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, p)
	}
	s.peers = map[string]*peer{}
	return out
}
