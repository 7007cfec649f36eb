package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/limiter"
)

// Node metadata, gossiped by memberlist: what another node needs to talk
// to this one and to check that it may.
//
//	version u8 | flags u8 | ring settings hash [8] | peer address (u8 length + bytes)
const (
	metaLeaving byte = 1 << 0
	metaJoining byte = 1 << 1 // not in the ring yet: route nothing to it
)

type meta struct {
	version  byte
	flags    byte
	ringHash [8]byte
	peerAddr string
}

func (m meta) encode() []byte {
	b := []byte{m.version, m.flags}
	b = append(b, m.ringHash[:]...)
	b = append(b, byte(len(m.peerAddr)))
	return append(b, m.peerAddr...)
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) < 11 {
		return m, errors.New("metadata too short")
	}
	m.version, m.flags = b[0], b[1]
	copy(m.ringHash[:], b[2:10])
	n := int(b[10])
	if len(b) < 11+n {
		return m, errors.New("metadata truncated")
	}
	m.peerAddr = string(b[11 : 11+n])
	return m, nil
}

func (n *Node) localMeta() meta {
	m := meta{version: ProtocolVersion, ringHash: n.ringHash, peerAddr: n.PeerAddr()}
	if n.leaving.Load() {
		m.flags |= metaLeaving
	}
	if !n.gate.announced.Load() {
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

// delegate answers memberlist for the node. Its methods must not block.
type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	b := d.n.localMeta().encode()
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

// NotifyJoin, NotifyLeave and NotifyUpdate copy what they are told into
// the node's member table (memberlist changes its Node values in place
// later, so they are never read outside these calls) and ask the watcher
// to rebuild the ring. They must not block.
func (d delegate) NotifyJoin(m *memberlist.Node)   { d.n.noteMember(m, true) }
func (d delegate) NotifyUpdate(m *memberlist.Node) { d.n.noteMember(m, true) }
func (d delegate) NotifyLeave(m *memberlist.Node)  { d.n.noteMember(m, false) }

// noteMember records a member's metadata, or its departure.
func (n *Node) noteMember(m *memberlist.Node, present bool) {
	n.members.note(m, present)
	n.requestRebuild()
	if present && m.Name != n.name {
		n.wakeJoin()
	}
}

// NotifyAlive refuses nodes with another protocol version or other ring
// settings, with one clear log line per node.
func (d delegate) NotifyAlive(peer *memberlist.Node) error {
	if peer.Name == d.n.name {
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

func (n *Node) requestRebuild() {
	select {
	case n.rebuild <- struct{}{}:
	default:
	}
}

// startMemberlist creates the memberlist instance and fills in the node's
// name and addresses.
func (n *Node) startMemberlist() error {
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
	n.name = n.cfg.Name
	if n.name == "" {
		host := advHost
		if unspecified(host) {
			host, _ = os.Hostname()
		}
		n.name = net.JoinHostPort(host, strconv.Itoa(mc.AdvertisePort))
	}
	mc.Name = n.name
	if nw := n.cfg.network; nw != nil {
		t, err := nw.gossip(n.name, &memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger,
		})
		if err != nil {
			return fmt.Errorf("bind %s: %w", n.cfg.Bind, err)
		}
		mc.Transport = t
	}
	n.self.Store(&Member{Name: n.name, PeerAddr: n.peerAdvertise(advHost)})

	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("starting gossip on %s: %w", n.cfg.Bind, err)
	}
	n.ml = ml
	n.gossipAddr = ml.LocalNode().Address()
	// Bound to all interfaces: advertise the address memberlist chose.
	if self := n.self.Load(); unspecified(hostOf(self.PeerAddr)) {
		_, port, _ := net.SplitHostPort(self.PeerAddr)
		n.self.Store(&Member{Name: n.name, PeerAddr: net.JoinHostPort(ml.LocalNode().Addr.String(), port)})
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

// join joins the seeds, retrying with backoff until one answers, and
// settles the node in the ring once one has (or once JoinWait has passed
// with none answering). A seed that is this node itself does not count.
func (n *Node) join() {
	defer n.wg.Done()
	if len(n.cfg.Join) == 0 {
		return
	}
	backoff := 200 * time.Millisecond
	started := time.Now()
	settled := false
	for {
		joined, err := n.ml.Join(n.cfg.Join)
		if joined > 0 && n.ml.NumMembers() > 1 {
			n.log.Info("joined cluster", "seeds", strings.Join(n.cfg.Join, ","), "members", n.ml.NumMembers())
			if !settled {
				n.settle(true)
			}
			return
		}
		if !settled && time.Since(started) >= JoinWait {
			settled = true
			n.settle(false)
		}
		n.log.Warn("joining cluster: no seed answered; retrying", "seeds", strings.Join(n.cfg.Join, ","), "retry_in", backoff.String(), "error", fmt.Sprint(err))
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		if !settled {
			wait = min(wait, max(time.Until(started.Add(JoinWait)), 0)+time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-n.gate.wake:
			t.Stop()
		case <-n.stop:
			t.Stop()
			return
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// watch rebuilds the ring on membership events, sweeps the fallback
// counters a shard at a time (all of them each minute), and pings every peer each
// probe interval, so a peer that stops answering (frozen, overloaded, cut
// off) is noticed within a probe interval and a call timeout, and its keys
// go to fallback at once rather than after each caller's own timeout.
func (n *Node) watch() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.Gossip.ProbeInterval)
	defer tick.Stop()
	sweep := time.NewTicker(limiter.SweepEvery)
	defer sweep.Stop()
	rejoin := time.NewTicker(n.rejoinEvery())
	defer rejoin.Stop()
	for {
		select {
		case <-rejoin.C:
			n.rejoinSeeds()
		case <-n.rebuild:
			n.notePeak()
			n.rebuildRing()
		case <-tick.C:
			n.pingPeers()
			if n.reconciling.CompareAndSwap(false, true) {
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					defer n.reconciling.Store(false)
					n.reconcile(time.Now())
				}()
			}
		case now := <-sweep.C:
			n.sweepFallback(now)
		case <-n.stop:
			return
		}
	}
}

// sweepFallback drops one shard's expired fallback counters (the owners'
// engines are swept by whoever owns them).
func (n *Node) sweepFallback(now time.Time) { n.fallback.Sweep(now) }

// pingPeers checks every connected peer whose breaker is closed, or due
// for a probe.
func (n *Node) pingPeers() {
	for _, p := range n.peers.all() {
		if !p.connected.Load() || !p.breaker.allow(time.Now()) {
			continue
		}
		wasOpen := p.breaker.open()
		go func() {
			c := newCall(msgPing)
			if err := n.await(p, c, time.Now()); err != nil {
				p.noteFailure(fmt.Errorf("ping: %w", err))
				return
			}
			if wasOpen {
				// What was counted in fallback reaches the owner before
				// its keys are routed to it again.
				if !n.reconcileWith(p, time.Now()) {
					p.noteFailure(errors.New("sending fallback counts"))
					return
				}
				n.log.Info("peer answers again: counting its keys exactly", "peer", p.member.Name)
				p.breaker.success()
				return
			}
			n.answered(p, false)
		}()
	}
}

// rebuildRing builds the ring from the current members and swaps it in if
// the membership changed, then hands off the keys that moved away.
func (n *Node) rebuildRing() {
	members := n.currentMembers()
	ring := NewRing(n.hasher, members)
	old := n.state.Load()
	changed := ring.Fingerprint() != old.ring.Fingerprint()
	if changed {
		others := slices.DeleteFunc(slices.Clone(members), func(m Member) bool { return m.Name == n.name })
		now := time.Now()
		if len(others) > 0 {
			n.joined.CompareAndSwap(0, now.UnixNano())
		}
		next := &ringState{ring: ring, prev: old.ring, without: NewRing(n.hasher, others), changed: now}
		n.promote(now, old.ring, ring, n.goneSince(next))
		if n.fallback.Stats().Keys > 0 {
			// What was counted in fallback reaches the new owners before
			// they are routed to.
			n.reconcilePeers(members)
			n.reconcileBy(now, ring)
		}
		n.state.Store(next)
		n.log.Info("cluster membership changed", "members", ring.Len(), "ring", ring.Fingerprint())
	}
	n.reconcilePeers(members)
	if changed {
		go n.handOff()
		go n.resync(time.Now(), old.ring, ring)
	}
}

// reconcilePeers keeps a peer connection to every member, and to nodes
// that are leaving (they answer pulls until they are gone).
func (n *Node) reconcilePeers(members []Member) {
	leaving := n.members.leaving()
	others := slices.DeleteFunc(slices.Clone(members), func(m Member) bool { return m.Name == n.name })
	// A leaving node stays reachable for pulls until it is gone.
	gone := n.peers.match(others, func(name string) bool { return leaving[name] }, func(m Member) *peer { return newPeer(n, m) })
	for _, p := range gone {
		go p.close()
	}
}

// currentMembers lists the nodes the ring is made of: the live,
// compatible ones that are neither leaving nor still joining. A leaving
// node, or one that has not joined yet, leaves itself out.
func (n *Node) currentMembers() []Member {
	var out []Member
	if !n.leaving.Load() && n.gate.member.Load() {
		out = append(out, *n.self.Load())
	}
	return append(out, n.members.routable(n.name, n.compatible)...)
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
