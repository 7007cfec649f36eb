package cluster

import "github.com/tollgate/tollgate/cluster/core"

// The ring lives in the cluster's core, which decides who owns a key; the
// node routes by the same one.

// Member is one node as the ring sees it (see core.Member).
type Member = core.Member

// Ring maps routes to members by rendezvous hashing (see core.Ring).
type Ring = core.Ring

// NewRing builds the ring of members, keyed by hasher (see core.NewRing).
var NewRing = core.NewRing
