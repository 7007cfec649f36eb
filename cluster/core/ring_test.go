package core

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tollgate/tollgate/internal/keyhash"
)

var testHasher = keyhash.New([]byte("cluster test secret"), "ring")

func members(n int) []Member {
	var ms []Member
	for i := range n {
		ms = append(ms, Member{Name: fmt.Sprintf("node-%d", i), PeerAddr: fmt.Sprintf("127.0.0.1:%d", 7000+i)})
	}
	return ms
}

func TestRingIsTheSameForTheSameMembers(t *testing.T) {
	ms := members(5)
	a := NewRing(testHasher, ms)
	reversed := []Member{ms[4], ms[3], ms[2], ms[1], ms[0], ms[2]} // order and duplicates do not matter
	b := NewRing(testHasher, reversed)
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("one membership gave two fingerprints")
	}
	for route := range uint32(10000) {
		x, _ := a.Owner(route * 7919)
		y, _ := b.Owner(route * 7919)
		if x != y {
			t.Fatalf("route %d: owners %s and %s", route, x.Name, y.Name)
		}
	}
	if NewRing(testHasher, ms[:4]).Fingerprint() == a.Fingerprint() {
		t.Fatal("different memberships share a fingerprint")
	}
	if _, ok := NewRing(testHasher, nil).Owner(1); ok {
		t.Fatal("an empty ring has an owner")
	}
}

func TestRingMovesAboutOneNthOnJoinAndLeave(t *testing.T) {
	const routes = 100000
	for _, n := range []int{3, 5, 10} {
		before := NewRing(testHasher, members(n))
		after := NewRing(testHasher, members(n+1)) // node-n joins
		moved, toNewcomer := 0, 0
		for i := range uint32(routes) {
			route := i * 2654435761
			a, _ := before.Owner(route)
			b, _ := after.Owner(route)
			if a != b {
				moved++
				if b.Name == fmt.Sprintf("node-%d", n) {
					toNewcomer++
				}
			}
		}
		share := float64(moved) / routes
		ideal := 1 / float64(n+1)
		t.Logf("%d -> %d nodes: %.3f of routes moved (ideal %.3f)", n, n+1, share, ideal)
		if math.Abs(share-ideal) > 0.02 {
			t.Errorf("%d -> %d nodes moved %.3f of routes; want about %.3f", n, n+1, share, ideal)
		}
		if toNewcomer != moved {
			t.Errorf("%d routes moved between old members on a join", moved-toNewcomer)
		}
	}
}

func TestRingSpreadsRoutesEvenly(t *testing.T) {
	shares := NewRing(testHasher, members(4)).Shares()
	for name, s := range shares {
		if math.Abs(s-0.25) > 0.03 {
			t.Errorf("%s owns %.3f of routes; want about 0.25", name, s)
		}
	}
}

func TestRingDependsOnTheSecret(t *testing.T) {
	a := NewRing(testHasher, members(3))
	b := NewRing(keyhash.New([]byte("another secret"), "ring"), members(3))
	differ := 0
	for route := range uint32(1000) {
		x, _ := a.Owner(route)
		y, _ := b.Owner(route)
		if x != y {
			differ++
		}
	}
	if differ < 500 {
		t.Fatalf("only %d of 1000 routes change owner with the secret", differ)
	}
}

func BenchmarkRingOwner(b *testing.B) {
	r := NewRing(testHasher, members(5))
	b.ReportAllocs()
	var route uint32
	for b.Loop() {
		r.Owner(route)
		route += 2654435761
	}
}

// A key's successor is its owner in the ring without the owner.
func TestSuccessorIsTheOwnerWithoutTheOwner(t *testing.T) {
	h := keyhash.New([]byte("successor"), "test")
	var ms []Member
	for i := range 5 {
		ms = append(ms, Member{Name: fmt.Sprint("node", i)})
	}
	r := NewRing(h, ms)
	for route := uint32(0); route < 2000; route += 7 {
		owner, _ := r.Owner(route)
		succ, ok := r.Successor(route)
		without := NewRing(h, slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.Name == owner.Name }))
		want, _ := without.Owner(route)
		if !ok || succ.Name != want.Name {
			t.Fatalf("route %d: successor %s; the ring without %s names %s", route, succ.Name, owner.Name, want.Name)
		}
	}
}
