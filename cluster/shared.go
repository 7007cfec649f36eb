package cluster

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
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
//
// Gossip is open to anyone holding the gossip key, and memberlist hands
// over messages and state from senders it refuses as members. So a shared
// value travels sealed: its encoding carries a format version and an
// HMAC-SHA256 under a key derived from the cluster secret, and a node drops
// a value whose MAC does not verify, whose format it does not speak, whose
// version lies more than maxSharedSkew in the future (it would pin the value
// for good) or that the node's check refuses (SetSharedCheck) before it
// stores it, passes it on or hands it to its handler.

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

// sharedMagic starts a shared value message, telling it from others;
// sharedFormat is the version of its encoding.
const (
	sharedMagic  = 'T'
	sharedFormat = 1
)

// maxSharedSkew is how far in the future a received value's version may be.
const maxSharedSkew = 5 * time.Minute

// sharedKeyOf derives the key shared values are sealed with.
func sharedKeyOf(secret []byte) []byte { return macOf(secret, []byte("tollgate shared values v1")) }

// SetSharedCheck sets the function that vets a shared value before the node
// uses it: a value from another node that it refuses is dropped (and not
// passed on); one restored from storage too.
func (n *Node) SetSharedCheck(check func(name string, value []byte) error) {
	n.sharedCheck.Store(&check)
}

// checkShared runs the check, if one is set.
func (n *Node) checkShared(name string, value []byte) error {
	if fn := n.sharedCheck.Load(); fn != nil {
		return (*fn)(name, value)
	}
	return nil
}

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
	msg := encodeShared(n.sharedKey, name, v)
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
	if err := n.checkShared(name, v.Value); err != nil {
		n.log.Warn("dropping a shared value that does not check", "name", name, "origin", v.Origin, "error", err.Error())
		return
	}
	if notify && v.Version > time.Now().Add(maxSharedSkew).UnixNano() {
		n.log.Warn("dropping a shared value dated in the future", "name", name, "origin", v.Origin)
		return
	}
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

// encodeShared seals one shared value message with key:
//
//	magic u8 | format u8 | name | version u64 | origin | value (u32 length + bytes) | HMAC-SHA256 [32]
func encodeShared(key []byte, name string, v SharedValue) []byte {
	b := []byte{sharedMagic, sharedFormat, byte(len(name))}
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, uint64(v.Version))
	b = append(b, byte(len(v.Origin)))
	b = append(b, v.Origin...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Value)))
	b = append(b, v.Value...)
	return append(b, macOf(key, b)...)
}

var errBadShared = errors.New("malformed shared value")

// errUnsealed is a shared value not sealed with the cluster secret.
var errUnsealed = errors.New("shared value not sealed with the cluster secret")

// decodeShared opens one shared value message sealed with key and returns
// the rest.
func decodeShared(key, b []byte) (string, SharedValue, []byte, error) {
	d := &decoder{b: b}
	if d.u8() != sharedMagic || d.err != nil {
		return "", SharedValue{}, nil, errBadShared
	}
	if f := d.u8(); d.err == nil && f != sharedFormat {
		return "", SharedValue{}, nil, fmt.Errorf("shared value of format %d; this node speaks %d", f, sharedFormat)
	}
	name := d.str()
	v := SharedValue{Version: int64(d.u64())}
	v.Origin = d.str()
	size := int(d.u32())
	if size > maxFrame {
		return "", SharedValue{}, nil, errBadShared
	}
	v.Value = slices.Clone(d.take(size))
	signed := len(b) - len(d.b)
	mac := d.take(32)
	if d.err != nil {
		return "", SharedValue{}, nil, errBadShared
	}
	if !hmac.Equal(mac, macOf(key, b[:signed])) {
		return "", SharedValue{}, nil, errUnsealed
	}
	return name, v, d.b, nil
}

// sharedState encodes every shared value, for memberlist's state sync.
func (n *Node) sharedState() []byte {
	n.sharedMu.Lock()
	defer n.sharedMu.Unlock()
	var b []byte
	for name, v := range n.shared {
		b = append(b, encodeShared(n.sharedKey, name, v)...)
	}
	return b
}

// mergeSharedState merges shared values received in a state sync or as a
// message.
func (n *Node) mergeSharedState(b []byte) {
	for len(b) > 0 {
		name, v, rest, err := decodeShared(n.sharedKey, b)
		if err != nil {
			n.log.Warn("dropping shared values from a peer", "error", err.Error())
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
