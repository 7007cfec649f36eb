package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/cluster/core"
)

// The membership adapter: what memberlist believes of the other nodes,
// turned into the lists the core routes by (core.Membership), and this
// node's own standing (joining, member, leaving) announced in its gossip
// metadata.
//
// Node metadata, gossiped by memberlist:
//
//	version u8 | flags u8 | ring settings hash [8] | incarnation u64 | peer address (u8 length + bytes)
//
// The incarnation names the node's run: it grows across restarts (the
// run's start time in nanoseconds), so what was meant for an earlier run
// is not taken by a later one.
const (
	metaLeaving byte = 1 << 0
	metaJoining byte = 1 << 1 // not in its ring: route nothing to it
)

type meta struct {
	version  byte
	flags    byte
	ringHash [8]byte
	inc      uint64
	peerAddr string
}

const metaHead = 1 + 1 + 8 + 8 + 1

func (m meta) encode() []byte {
	b := []byte{m.version, m.flags}
	b = append(b, m.ringHash[:]...)
	b = binary.LittleEndian.AppendUint64(b, m.inc)
	b = append(b, byte(len(m.peerAddr)))
	return append(b, m.peerAddr...)
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) < 2 {
		return m, errors.New("metadata too short")
	}
	m.version, m.flags = b[0], b[1]
	if m.version != ProtocolVersion {
		return m, nil // compatible says why it is refused
	}
	if len(b) < metaHead {
		return m, errors.New("metadata too short")
	}
	copy(m.ringHash[:], b[2:10])
	m.inc = binary.LittleEndian.Uint64(b[10:18])
	n := int(b[18])
	if len(b) < metaHead+n {
		return m, errors.New("metadata truncated")
	}
	m.peerAddr = string(b[metaHead : metaHead+n])
	return m, nil
}

// localMeta is this node's metadata now.
func (n *Node) localMeta() meta {
	self := n.self.Load()
	m := meta{version: ProtocolVersion, ringHash: n.ringHash, inc: self.Inc, peerAddr: self.PeerAddr}
	switch {
	case n.leaving.Load():
		m.flags |= metaLeaving
	case !n.core().Member():
		m.flags |= metaJoining
	}
	return m
}

// compatible reports why a node must be refused, if it must.
func (n *Node) compatible(m meta) error {
	if m.version != ProtocolVersion {
		return fmt.Errorf("it speaks protocol version %d, this node %d", m.version, ProtocolVersion)
	}
	if m.ringHash != n.ringHash {
		return errors.New("its ring settings differ (another secret?)")
	}
	return nil
}

// memberTable is what gossip told this node of the others: each one's
// metadata (decoded once, as it arrives), gossip address and state. A node
// declared dead stays (as dead) until deadMemory has passed or a later run
// of it appears; a node that left is dropped. A memberTable is safe for
// concurrent use.
type memberTable struct {
	mu      sync.Mutex
	members map[string]*tableEntry
	refused map[string]bool // nodes refused, logged once each
}

type tableEntry struct {
	meta   meta
	gossip string    // address
	dead   time.Time // when it was declared dead; zero while alive
}

// deadMemory is how long a node declared dead is remembered: while it is,
// it counts among the nodes a majority is made of, so a node cut off from
// most of the cluster does not count as an owner.
const deadMemory = 30 * time.Second

func newMemberTable() *memberTable {
	return &memberTable{members: make(map[string]*tableEntry), refused: make(map[string]bool)}
}

// note records what memberlist said of m: alive (with its metadata), dead,
// or left.
func (t *memberTable) note(m *memberlist.Node, alive bool, now time.Time) {
	md, err := decodeMeta(m.Meta)
	t.mu.Lock()
	defer t.mu.Unlock()
	if alive {
		if err != nil {
			delete(t.members, m.Name)
			return
		}
		t.members[m.Name] = &tableEntry{meta: md, gossip: m.Address()}
		return
	}
	e := t.members[m.Name]
	if e == nil {
		return
	}
	if m.State == memberlist.StateLeft {
		delete(t.members, m.Name)
		return
	}
	if err == nil && md.inc != e.meta.inc && md.version == ProtocolVersion {
		e.meta = md // the run that died
	}
	if e.dead.IsZero() {
		e.dead = now
	}
}

// membership returns the core's lists for this node (called self), the
// nodes in them by name (each with its run and peer address), and a
// string that changes when the lists do.
func (t *memberTable) membership(self string, check func(meta) error, now time.Time) (core.Membership, map[string]core.Member, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.members))
	for name, e := range t.members {
		if !e.dead.IsZero() && now.Sub(e.dead) > deadMemory {
			delete(t.members, name)
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var m core.Membership
	nodes := make(map[string]core.Member, len(names))
	var key strings.Builder
	for _, name := range names {
		e := t.members[name]
		if name == self || check(e.meta) != nil {
			continue
		}
		mem := core.Member{Name: name, Inc: e.meta.inc, PeerAddr: e.meta.peerAddr}
		nodes[name] = mem
		state := "m"
		switch {
		case !e.dead.IsZero():
			m.Dead, state = append(m.Dead, mem.Peer()), "d"
		case e.meta.flags&metaLeaving != 0:
			m.Leaving, state = append(m.Leaving, mem), "l"
		case e.meta.flags&metaJoining != 0:
			m.Joining, state = append(m.Joining, mem), "j"
		default:
			m.Members = append(m.Members, mem)
		}
		fmt.Fprintf(&key, "%s/%d/%s/%s ", name, mem.Inc, mem.PeerAddr, state)
	}
	return m, nodes, key.String()
}

// state returns what the table says of the node called name.
func (t *memberTable) state(name string) (e tableEntry, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.members[name]; p != nil {
		return *p, true
	}
	return tableEntry{}, false
}

// names returns the names of the nodes in the table.
func (t *memberTable) names() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.members))
	for name := range t.members {
		out = append(out, name)
	}
	return out
}

// gossipNodes returns memberlist nodes to send to: the live ones other
// than self.
func (t *memberTable) gossipNodes(self string) []*memberlist.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*memberlist.Node
	for name, e := range t.members {
		host, port, err := net.SplitHostPort(e.gossip)
		if name == self || err != nil || !e.dead.IsZero() {
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

// delegate answers memberlist for the node. Its methods must not block.
type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	m := d.n.localMeta()
	d.n.toldMember.Store(m.flags&(metaJoining|metaLeaving) == 0)
	b := m.encode()
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg receives shared values sent by other nodes.
func (d delegate) NotifyMsg(b []byte) {
	if len(b) > 0 && b[0] == sharedMagic {
		d.n.shared.mergeState(slices.Clone(b))
	}
}

func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState and MergeRemoteState exchange every shared value in
// memberlist's periodic state sync.
func (d delegate) LocalState(join bool) []byte { return d.n.shared.state() }
func (d delegate) MergeRemoteState(buf []byte, join bool) {
	d.n.shared.mergeState(slices.Clone(buf))
}

// NotifyJoin, NotifyUpdate and NotifyLeave copy what they are told into
// the member table (memberlist changes its Node values in place later, so
// they are never read outside these calls) and ask the loop to give the
// core the new lists.
func (d delegate) NotifyJoin(m *memberlist.Node)   { d.n.noteMember(m, true) }
func (d delegate) NotifyUpdate(m *memberlist.Node) { d.n.noteMember(m, true) }
func (d delegate) NotifyLeave(m *memberlist.Node)  { d.n.noteMember(m, false) }

func (n *Node) noteMember(m *memberlist.Node, alive bool) {
	if m.Name == n.Name() {
		return
	}
	n.members.note(m, alive, time.Now())
	signal(n.memberCh)
}

// NotifyAlive refuses nodes with another protocol version or other ring
// settings, with one clear log line per node.
func (d delegate) NotifyAlive(peer *memberlist.Node) error {
	if peer.Name == d.n.Name() {
		return nil
	}
	m, err := decodeMeta(peer.Meta)
	if err == nil {
		err = d.n.compatible(m)
	}
	if err != nil {
		if d.n.members.refuse(peer.Name) {
			d.n.log.Error("refusing node", "node", peer.Name, "address", peer.Address(), "reason", err.Error())
		}
		return fmt.Errorf("refusing %s: %w", peer.Name, err)
	}
	return nil
}

// updateMembership gives the core the lists the member table makes, if
// they changed, and keeps a client of every node in them.
func (n *Node) updateMembership(now time.Time) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	m, nodes, key := n.members.membership(n.Name(), n.compatible, now)
	if key == n.lastMembers {
		return
	}
	n.lastMembers = key
	n.changedAt.Store(now.UnixNano())
	for _, p := range n.peers.match(nodes, func(m core.Member) *peerClient { return newPeerClient(n.dialer, m.Name, m.PeerAddr, m.Inc) }) {
		go p.close()
	}
	n.coreMu.Lock()
	n.core().SetMembership(now, m)
	n.coreMu.Unlock()
}

// startMemberlist creates the memberlist instance and fills in the node's
// name and addresses.
func (n *Node) startMemberlist(inc uint64) error {
	bindHost, bindPort, _ := splitHostPort("bind", n.cfg.Bind)
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = bindHost, bindPort
	if n.cfg.Advertise != "" {
		host, port, _ := splitHostPort("advertise", n.cfg.Advertise)
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	mc.SecretKey = n.cfg.GossipKey
	mc.ProbeInterval = n.cfg.Gossip.ProbeInterval
	mc.ProbeTimeout = n.cfg.Gossip.ProbeTimeout
	mc.GossipInterval = n.cfg.Gossip.GossipInterval
	mc.SuspicionMult = n.cfg.Gossip.SuspicionMult
	mc.Logger = log.New(&logWriter{n: n}, "", 0)
	mc.Delegate = delegate{n}
	mc.Events = delegate{n}
	mc.Alive = delegate{n}
	// A node that restarts comes back under its name at its address.
	mc.DeadNodeReclaimTime = time.Second
	// The full exchange of states with one other node, which mends a view
	// that missed a refutation (a node that joined while another was
	// briefly taken for dead keeps it dead until then, out of its ring):
	// every ten probe intervals, 5 s by default, not memberlist's 30 s.
	mc.PushPullInterval = max(10*mc.ProbeInterval, 2*time.Second)

	// The name and the peer address must be known before memberlist
	// starts gossiping the metadata, but the bound ports only after.
	// Bind the gossip port first when it is 0.
	if bindPort == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(bindHost, "0"))
		if err != nil {
			return fmt.Errorf("bind %s: %w", n.cfg.Bind, err)
		}
		mc.BindPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	if n.cfg.Advertise == "" {
		mc.AdvertiseAddr, mc.AdvertisePort = "", mc.BindPort
	}
	advHost := mc.AdvertiseAddr
	if advHost == "" {
		advHost = bindHost
	}
	name := n.cfg.Name
	if name == "" {
		host := advHost
		if unspecified(host) {
			host, _ = os.Hostname()
		}
		name = net.JoinHostPort(host, strconv.Itoa(mc.AdvertisePort))
	}
	mc.Name = name
	if nw := n.cfg.network; nw != nil {
		t, err := nw.gossip(name, &memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger,
		})
		if err != nil {
			return fmt.Errorf("bind %s: %w", n.cfg.Bind, err)
		}
		mc.Transport = t
	}
	n.self.Store(&core.Member{Name: name, Inc: inc, PeerAddr: n.peerAdvertise(advHost)})
	n.startCore(time.Now())

	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("starting gossip on %s: %w", n.cfg.Bind, err)
	}
	n.ml = ml
	n.gossipAddr = ml.LocalNode().Address()
	// Bound to all interfaces: advertise the address memberlist chose.
	if self := n.self.Load(); unspecified(hostOf(self.PeerAddr)) {
		_, port, _ := net.SplitHostPort(self.PeerAddr)
		s := *self
		s.PeerAddr = net.JoinHostPort(ml.LocalNode().Addr.String(), port)
		n.self.Store(&s)
		ml.UpdateNode(time.Second)
	}
	return nil
}

func unspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

func hostOf(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// peerAdvertise is the peer RPC address others use.
func (n *Node) peerAdvertise(advHost string) string {
	if n.cfg.PeerAdvertise != "" {
		return n.cfg.PeerAdvertise
	}
	host, port, _ := net.SplitHostPort(n.listener.Addr().String())
	if unspecified(host) {
		host = advHost
	}
	return net.JoinHostPort(host, port)
}

// announce gossips the node's metadata now (the core's Member hook, and
// Leave, ask for it). One announcement at a time: memberlist's UpdateNode
// is not safe for concurrent use.
func (n *Node) announce(timeout time.Duration) {
	n.announceMu.Lock()
	defer n.announceMu.Unlock()
	if err := n.ml.UpdateNode(timeout); err != nil {
		n.log.Debug("announcing this node's state", "error", err.Error())
	}
}

// logWriter passes memberlist's log lines to the node's logger.
type logWriter struct{ n *Node }

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case strings.Contains(line, "[ERR]"):
		w.n.log.Error("gossip: " + line)
	case strings.Contains(line, "[WARN]"):
		w.n.log.Warn("gossip: " + line)
	default:
		w.n.log.Debug("gossip: " + line)
	}
	return len(p), nil
}
