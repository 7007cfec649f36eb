package cluster

import (
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/memberlist"
)

// memberTable is what gossip told the node of the other members: each
// one's metadata and gossip address, copied out of memberlist's events
// (memberlist changes its Node values in place later).
type memberTable struct {
	mu    sync.Mutex
	metas map[string][]byte // name → metadata
	addrs map[string]string // name → gossip address
}

func newMemberTable() *memberTable {
	return &memberTable{metas: make(map[string][]byte), addrs: make(map[string]string)}
}

// note records a member's metadata and address, or, if it is gone, drops
// it.
func (t *memberTable) note(m *memberlist.Node, present bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if present {
		t.metas[m.Name] = append([]byte(nil), m.Meta...)
		t.addrs[m.Name] = m.Address()
	} else {
		delete(t.metas, m.Name)
		delete(t.addrs, m.Name)
	}
}

// routable returns the members, other than self, the ring is made of:
// those whose metadata decodes, passes check and does not announce a
// departure.
func (t *memberTable) routable(self string, check func(meta) error) []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Member
	for name, raw := range t.metas {
		if name == self {
			continue
		}
		md, err := decodeMeta(raw)
		if err != nil || check(md) != nil || md.flags&metaLeaving != 0 {
			continue
		}
		out = append(out, Member{Name: name, PeerAddr: md.peerAddr})
	}
	return out
}

// leaving returns the members that announced they are leaving.
func (t *memberTable) leaving() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool)
	for name, raw := range t.metas {
		if md, err := decodeMeta(raw); err == nil && md.flags&metaLeaving != 0 {
			out[name] = true
		}
	}
	return out
}

// names returns self and the names of the members other than self.
func (t *memberTable) names(self string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := []string{self}
	for name := range t.metas {
		if name != self {
			names = append(names, name)
		}
	}
	return names
}

// gossipNodes returns memberlist nodes to send to, other than self.
func (t *memberTable) gossipNodes(self string) []*memberlist.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*memberlist.Node
	for name, addr := range t.addrs {
		host, port, err := net.SplitHostPort(addr)
		if name == self || err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		out = append(out, &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p)})
	}
	return out
}
