package core

import (
	"encoding/hex"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// Peer names one run of a node: its name in the cluster and the incarnation
// it started with. A node that restarts comes back under its name with a
// higher incarnation, and what was addressed to the old one is not its.
type Peer struct {
	Name string
	Inc  uint64
}

// Member is one node as the ring sees it.
type Member struct {
	// Name identifies the node in the cluster (its gossip address by
	// default); owners are picked by name.
	Name string
	// Inc is the incarnation of the node's current run.
	Inc uint64
	// PeerAddr is where the node's peer RPC listens.
	PeerAddr string
}

// Peer returns the run m names.
func (m Member) Peer() Peer { return Peer{Name: m.Name, Inc: m.Inc} }

// Ring maps routes to members by rendezvous hashing: every member gets a
// score for a route, a keyed hash of both, and the highest score owns it.
// Adding or removing one of N members moves about 1/N of the routes, all of
// them to or from that member, and the member that owns a route once its
// owner is gone (its successor) is the one with the second highest score.
// The hash is keyed with the cluster secret, so nobody outside can choose
// keys that all land on one node.
//
// A Ring is immutable: membership changes build a new one, which the node
// swaps in whole. The same members give the same owners on every node.
type Ring struct {
	members []Member
	seeds   []uint64 // per member, keyed hash of its name
	fp      string
}

// NewRing builds the ring of members, keyed by hasher. A name listed twice
// counts once.
func NewRing(hasher keyhash.Hasher, members []Member) *Ring {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.Name == b.Name })
	r := &Ring{members: ms, seeds: make([]uint64, len(ms))}
	acc := uint64(len(ms))
	for i, m := range ms {
		r.seeds[i] = hasher.String(m.Name)
		acc = keyhash.Mix(acc ^ r.seeds[i] ^ keyhash.Mix(m.Inc))
	}
	var b [8]byte
	for i := range b {
		b[i] = byte(acc >> (56 - 8*i))
	}
	r.fp = hex.EncodeToString(b[:])
	return r
}

// Owner returns the member that owns route; ok is false for an empty ring.
func (r *Ring) Owner(route uint32) (m Member, ok bool) {
	i := r.ownerIndex(route)
	if i < 0 {
		return Member{}, false
	}
	return r.members[i], true
}

// Successor returns the member that would own route if its owner were
// gone: the one with the second highest score. ok is false with fewer than
// two members.
func (r *Ring) Successor(route uint32) (m Member, ok bool) {
	_, second := r.top2(route)
	if second < 0 {
		return Member{}, false
	}
	return r.members[second], true
}

// top2 returns the indexes of the owner and the successor of route, -1
// where there is none.
func (r *Ring) top2(route uint32) (first, second int) {
	switch len(r.members) {
	case 0:
		return -1, -1
	case 1:
		return 0, -1 // a single node owns every key: no hashing
	}
	first, second = -1, -1
	var s1, s2 uint64
	x := uint64(route) * 0x9e3779b97f4a7c15
	for i, seed := range r.seeds {
		s := keyhash.Mix(seed ^ x)
		switch {
		case first < 0 || s > s1:
			second, s2 = first, s1
			first, s1 = i, s
		case second < 0 || s > s2:
			second, s2 = i, s
		}
	}
	return first, second
}

// OwnerWithout returns the owner of route in the ring without the member
// named name: the node that counts the key where name does not.
func (r *Ring) OwnerWithout(route uint32, name string) (m Member, ok bool) {
	first, second := r.top2(route)
	if first >= 0 && r.members[first].Name == name {
		first = second
	}
	if first < 0 {
		return Member{}, false
	}
	return r.members[first], true
}

func (r *Ring) ownerIndex(route uint32) int {
	if len(r.members) <= 1 {
		return len(r.members) - 1
	}
	best, bestScore := -1, uint64(0)
	x := uint64(route) * 0x9e3779b97f4a7c15
	for i, seed := range r.seeds {
		if s := keyhash.Mix(seed ^ x); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// index returns the position of the member called name, if it is one.
func (r *Ring) index(name string) (int, bool) {
	return slices.BinarySearchFunc(r.members, name, func(m Member, name string) int { return strings.Compare(m.Name, name) })
}

// Has reports whether the node called name is a member.
func (r *Ring) Has(name string) bool {
	_, ok := r.index(name)
	return ok
}

// member returns the member at index i.
func (r *Ring) member(i int) Member { return r.members[i] }

// Members returns the members, sorted by name.
func (r *Ring) Members() []Member { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Fingerprint identifies the membership the ring was built from, runs
// included: two nodes whose fingerprints match route every key alike.
func (r *Ring) Fingerprint() string { return r.fp }

// Shares estimates each member's share of the routes by sampling.
func (r *Ring) Shares() map[string]float64 {
	const samples = 1 << 14
	counts := make([]int, len(r.members))
	for i := range samples {
		if j := r.ownerIndex(uint32(i) * 262147); j >= 0 {
			counts[j]++
		}
	}
	out := make(map[string]float64, len(r.members))
	for i, m := range r.members {
		out[m.Name] = float64(counts[i]) / samples
	}
	return out
}
