package cluster

import (
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/memberlist"
)

// memberTable is what gossip told the node of the other members: each
// one's metadata (decoded once, as it arrives) and gossip address, copied
// out of memberlist's events (memberlist changes its Node values in place
// later), and the nodes refused as members. A memberTable is safe for
// concurrent use.
type memberTable struct {
	mu      sync.Mutex
	members map[string]tableEntry
	refused map[string]bool // nodes refused, logged once each
}

// tableEntry is one member as gossip describes it; ok is false when its
// metadata does not decode.
type tableEntry struct {
	meta   meta
	ok     bool
	gossip string // address
}

func newMemberTable() *memberTable {
	return &memberTable{members: make(map[string]tableEntry), refused: make(map[string]bool)}
}

// note records a member's metadata and address, or, if it is gone, drops
// it.
func (t *memberTable) note(m *memberlist.Node, present bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !present {
		delete(t.members, m.Name)
		return
	}
	md, err := decodeMeta(m.Meta)
	t.members[m.Name] = tableEntry{meta: md, ok: err == nil, gossip: m.Address()}
}

// routable returns the members, other than self, the ring is made of:
// those whose metadata decoded, passes check and announces neither a
// departure nor a join under way.
func (t *memberTable) routable(self string, check func(meta) error) []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Member
	for name, e := range t.members {
		if name == self || !e.ok || check(e.meta) != nil || e.meta.flags&(metaLeaving|metaJoining) != 0 {
			continue
		}
		out = append(out, Member{Name: name, PeerAddr: e.meta.peerAddr})
	}
	return out
}

// leaving returns the members that announced they are leaving.
func (t *memberTable) leaving() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool)
	for name, e := range t.members {
		if e.ok && e.meta.flags&metaLeaving != 0 {
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
	for name := range t.members {
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
	for name, e := range t.members {
		host, port, err := net.SplitHostPort(e.gossip)
		if name == self || err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		out = append(out, &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p)})
	}
	return out
}

// refuse records that the node called name was refused as a member, and
// reports whether it is the first time.
func (t *memberTable) refuse(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := !t.refused[name]
	t.refused[name] = true
	return first
}
