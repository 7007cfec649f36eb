package cluster

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Shared values are small documents every node of the cluster holds a copy
// of (the tier settings changed through the admin API, say). Each carries a
// version (when it was published, and where); a node keeps the newest it has
// seen. A change of a shared value voids every denial the node remembers
// (its blocked cache), since limits may have changed. A value is published by sending it to every member over memberlist's
// reliable channel, and exchanged whole in memberlist's periodic state sync,
// so a node that missed it (down, or joining later) catches up.

// SharedValue is one shared document.
type SharedValue struct {
	Value   []byte
	Version int64  // Unix ns of its publication
	Origin  string // the node that published it
}

func (v SharedValue) newerThan(o SharedValue) bool {
	if v.Version != o.Version {
		return v.Version > o.Version
	}
	return v.Origin > o.Origin
}

// sharedMagic starts a shared value message, telling it from others.
const sharedMagic = 'T'

// Publish makes value the cluster's shared value called name and sends it
// to every member. Nodes that cannot be reached now get it in the next state
// sync.
func (n *Node) Publish(name string, value []byte) SharedValue {
	n.sharedMu.Lock()
	v := SharedValue{Value: slices.Clone(value), Version: time.Now().UnixNano(), Origin: n.name}
	if cur, ok := n.shared[name]; ok && v.Version <= cur.Version {
		v.Version = cur.Version + 1
	}
	if n.shared == nil {
		n.shared = make(map[string]SharedValue)
	}
	n.shared[name] = v
	n.sharedMu.Unlock()
	n.forgetAllBlocked()
	if n.standalone {
		return v
	}
	msg := encodeShared(name, v)
	for _, m := range n.gossipMembers() {
		if m.Name != n.name {
			if err := n.ml.SendReliable(m, msg); err != nil {
				n.log.Warn("sending a shared value; the next state sync will carry it", "name", name, "to", m.Name, "error", err.Error())
			}
		}
	}
	return v
}

// Shared returns the shared value called name, if there is one.
func (n *Node) Shared(name string) (SharedValue, bool) {
	n.sharedMu.Lock()
	defer n.sharedMu.Unlock()
	v, ok := n.shared[name]
	return v, ok
}

// Restore installs a shared value kept from before (in storage), unless a
// newer one is known.
func (n *Node) Restore(name string, v SharedValue) {
	n.mergeShared(name, v, false)
}

// OnShared sets the function called (on its own goroutine, in order) when
// another node's newer shared value arrives. A config reload replaces it.
func (n *Node) OnShared(fn func(name string, v SharedValue)) {
	n.sharedHandler.Store(&fn)
}

// mergeShared keeps v if it is newer than what this node has, and tells
// the handler.
func (n *Node) mergeShared(name string, v SharedValue, notify bool) {
	n.sharedMu.Lock()
	cur, ok := n.shared[name]
	if ok && !v.newerThan(cur) {
		n.sharedMu.Unlock()
		return
	}
	if n.shared == nil {
		n.shared = make(map[string]SharedValue)
	}
	n.shared[name] = v
	n.forgetAllBlocked() // denials decided under the old value may not hold
	if notify {
		if n.sharedDirty == nil {
			n.sharedDirty = make(map[string]bool)
		}
		n.sharedDirty[name] = true
	}
	n.sharedMu.Unlock()
	if notify {
		select {
		case n.sharedSignal <- struct{}{}:
		default:
		}
	}
}

// deliverShared calls the handler with the shared values that changed,
// off memberlist's goroutines (which must not block).
func (n *Node) deliverShared() {
	defer n.wg.Done()
	for {
		select {
		case <-n.sharedSignal:
		case <-n.stop:
			return
		}
		n.sharedMu.Lock()
		dirty := n.sharedDirty
		n.sharedDirty = nil
		values := make(map[string]SharedValue, len(dirty))
		for name := range dirty {
			values[name] = n.shared[name]
		}
		n.sharedMu.Unlock()
		if fn := n.sharedHandler.Load(); fn != nil {
			for name, v := range values {
				(*fn)(name, v)
			}
		}
	}
}

func encodeShared(name string, v SharedValue) []byte {
	b := []byte{sharedMagic, byte(len(name))}
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, uint64(v.Version))
	b = append(b, byte(len(v.Origin)))
	b = append(b, v.Origin...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Value)))
	return append(b, v.Value...)
}

var errBadShared = errors.New("malformed shared value")

// decodeShared reads one shared value message and returns the rest.
func decodeShared(b []byte) (string, SharedValue, []byte, error) {
	d := &decoder{b: b}
	if d.u8() != sharedMagic {
		return "", SharedValue{}, nil, errBadShared
	}
	name := d.str()
	v := SharedValue{Version: int64(d.u64())}
	v.Origin = d.str()
	size := int(d.u32())
	if size > maxFrame {
		return "", SharedValue{}, nil, errBadShared
	}
	v.Value = slices.Clone(d.take(size))
	if d.err != nil {
		return "", SharedValue{}, nil, errBadShared
	}
	return name, v, d.b, nil
}

// sharedState encodes every shared value, for memberlist's state sync.
func (n *Node) sharedState() []byte {
	n.sharedMu.Lock()
	defer n.sharedMu.Unlock()
	var b []byte
	for name, v := range n.shared {
		b = append(b, encodeShared(name, v)...)
	}
	return b
}

// mergeSharedState merges shared values received in a state sync or as a
// message.
func (n *Node) mergeSharedState(b []byte) {
	for len(b) > 0 {
		name, v, rest, err := decodeShared(b)
		if err != nil {
			n.log.Warn("dropping a malformed shared value from a peer")
			return
		}
		n.mergeShared(name, v, true)
		b = rest
	}
}

// gossipMembers returns memberlist nodes to send to, built from the node's
// own table (memberlist's Node values change under its feet).
func (n *Node) gossipMembers() []*memberlist.Node {
	n.tableMu.Lock()
	defer n.tableMu.Unlock()
	var out []*memberlist.Node
	for name, addr := range n.addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		out = append(out, &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p)})
	}
	return out
}
