package cluster

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

// sharedStore holds the node's copy of every shared value, vets what
// arrives, and hands newer values from other nodes to the handler on its
// own goroutine, in order (memberlist's goroutines must not block).
type sharedStore struct {
	key      []byte // seals values
	log      *slog.Logger
	onChange func() // called when a value changes

	check   atomic.Pointer[func(string, []byte) error]
	handler atomic.Pointer[func(string, SharedValue)]

	mu     sync.Mutex
	values map[string]SharedValue
	dirty  map[string]bool // arrived from others, not yet handed to the handler
	signal chan struct{}
}

func newSharedStore(key []byte, log *slog.Logger, onChange func()) *sharedStore {
	return &sharedStore{
		key: key, log: log, onChange: onChange,
		values: make(map[string]SharedValue),
		dirty:  make(map[string]bool),
		signal: make(chan struct{}, 1),
	}
}

// vet runs the check, if one is set.
func (s *sharedStore) vet(name string, value []byte) error {
	if fn := s.check.Load(); fn != nil {
		return (*fn)(name, value)
	}
	return nil
}

// setCheck sets the function that vets values before they are kept.
func (s *sharedStore) setCheck(check func(name string, value []byte) error) { s.check.Store(&check) }

// setHandler sets the function values from other nodes are handed to.
func (s *sharedStore) setHandler(fn func(name string, v SharedValue)) { s.handler.Store(&fn) }

// publish makes value the shared value called name, published by origin
// now (or just after the value it replaces), and returns it with its
// sealed message for the other members.
func (s *sharedStore) publish(origin, name string, value []byte) (SharedValue, []byte) {
	s.mu.Lock()
	v := SharedValue{Value: slices.Clone(value), Version: time.Now().UnixNano(), Origin: origin}
	if cur, ok := s.values[name]; ok && v.Version <= cur.Version {
		v.Version = cur.Version + 1
	}
	s.values[name] = v
	s.mu.Unlock()
	s.onChange()
	return v, encodeShared(s.key, name, v)
}

// get returns the shared value called name, if there is one.
func (s *sharedStore) get(name string) (SharedValue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[name]
	return v, ok
}

// merge keeps v if it checks and is newer than what the store has; a value
// from another node (fromPeer) is also refused if dated in the future, and
// is handed to the handler.
func (s *sharedStore) merge(name string, v SharedValue, fromPeer bool) {
	if err := s.vet(name, v.Value); err != nil {
		s.log.Warn("dropping a shared value that does not check", "name", name, "origin", v.Origin, "error", err.Error())
		return
	}
	if fromPeer && v.Version > time.Now().Add(maxSharedSkew).UnixNano() {
		s.log.Warn("dropping a shared value dated in the future", "name", name, "origin", v.Origin)
		return
	}
	s.mu.Lock()
	if cur, ok := s.values[name]; ok && !v.newerThan(cur) {
		s.mu.Unlock()
		return
	}
	s.values[name] = v
	if fromPeer {
		s.dirty[name] = true
	}
	s.mu.Unlock()
	s.onChange() // e.g. denials decided under the old value may not hold
	if fromPeer {
		select {
		case s.signal <- struct{}{}:
		default:
		}
	}
}

// deliver hands the values that arrived from others to the handler until
// stop is closed.
func (s *sharedStore) deliver(stop <-chan struct{}) {
	for {
		select {
		case <-s.signal:
		case <-stop:
			return
		}
		s.mu.Lock()
		values := make(map[string]SharedValue, len(s.dirty))
		for name := range s.dirty {
			values[name] = s.values[name]
		}
		clear(s.dirty)
		s.mu.Unlock()
		if fn := s.handler.Load(); fn != nil {
			for name, v := range values {
				(*fn)(name, v)
			}
		}
	}
}

// state encodes every shared value, for memberlist's state sync.
func (s *sharedStore) state() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for name, v := range s.values {
		b = append(b, encodeShared(s.key, name, v)...)
	}
	return b
}

// mergeState merges shared values another node sent, in a state sync or
// as a message.
func (s *sharedStore) mergeState(b []byte) {
	for len(b) > 0 {
		name, v, rest, err := decodeShared(s.key, b)
		if err != nil {
			s.log.Warn("dropping shared values from a peer", "error", err.Error())
			return
		}
		s.merge(name, v, true)
		b = rest
	}
}

// SetSharedCheck sets the function that vets a shared value before the node
// uses it: a value from another node that it refuses is dropped (and not
// passed on); one restored from storage too.
func (n *Node) SetSharedCheck(check func(name string, value []byte) error) {
	n.shared.setCheck(check)
}

// Publish makes value the cluster's shared value called name and sends it
// to every member. Nodes that cannot be reached now get it in the next state
// sync.
func (n *Node) Publish(name string, value []byte) SharedValue {
	v, msg := n.shared.publish(n.Name(), name, value)
	if !n.running.Load() {
		return v // not networked (standalone, or not started): state sync carries it later
	}
	for _, m := range n.members.gossipNodes(n.Name()) {
		if err := n.ml.SendReliable(m, msg); err != nil {
			n.log.Warn("sending a shared value; the next state sync will carry it", "name", name, "to", m.Name, "error", err.Error())
		}
	}
	return v
}

// Shared returns the shared value called name, if there is one.
func (n *Node) Shared(name string) (SharedValue, bool) { return n.shared.get(name) }

// Restore installs a shared value kept from before (in storage), unless a
// newer one is known.
func (n *Node) Restore(name string, v SharedValue) { n.shared.merge(name, v, false) }

// OnShared sets the function called (on its own goroutine, in order) when
// another node's newer shared value arrives. A config reload replaces it.
func (n *Node) OnShared(fn func(name string, v SharedValue)) {
	n.shared.setHandler(fn)
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
