// Package cluster counts every key in exactly one place across several
// nodes: membership over hashicorp/memberlist, a keyed rendezvous-hash ring
// that names each key's owner, a batched and authenticated peer RPC, a
// fallback for owners that cannot be reached, and the hand-off of counters
// when ownership moves. It knows nothing of Caddy.
//
// # Consistency model
//
// Exact: every key has one owner, and only the owner updates it, under a
// lock (a single writer). Whichever node a request arrives at, it is counted
// by the owner, by the owner's clock, and the answer reflects every request
// counted before it (read-your-writes). While all nodes agree on the
// membership (their ring fingerprints match), a limit of L lets exactly L
// requests through across the whole cluster, however they are spread.
//
// Membership changes. When a node joins or leaves, about 1/N of the keys
// change owner. The old owner pushes their counters to the new one, and a
// new owner that sees a key it does not hold, in the first seconds after
// the change, pulls the key's counter from the old owner before counting.
// Counters merge by adding, so nothing counted on either side is lost, and a
// counter moves at most once (the old owner removes it as it hands it over).
// A node that leaves gracefully first announces it, hands everything over,
// and answers requests that still reach it with the new owner's name: counts
// stay exact through scale-out, scale-in and rolling restarts. In the short
// time (typically well under a second) before all nodes have heard of a
// change, a node that has not may still count a moved key at its old owner;
// the push then adds those counts in, so a key can be over-admitted by at
// most what was counted there in that window.
//
// Slow owners. A slow owner's answer is the decision, however late. A call
// has a deadline, the peer timeout, but it is the deadline of the owner's
// silence, not of the call: a caller gives a call up only when nothing at
// all has come from the owner for a peer timeout while the caller itself
// was running (a watchdog measures the process's own stalls: a caller that
// was descheduled could not have read an answer either). An owner that
// answers other calls is alive but behind, and the caller waits for its
// answer, up to ten peer timeouts. Deciding such a call in fallback would
// let the caller admit beside an owner that goes on admitting for others,
// and would count the request twice (here and at the owner, which received
// it). If a call was given up on and the owner's answer, admitting it,
// arrives after all, the caller gives the units back at the owner (it
// decided the request in fallback, where it is counted and reconciled): the
// request counts once. So as long as every owner answers something within
// each peer timeout, however slowly it answers each call, counting is exact
// (TestProcessClusterBusyOwnerCountsExactly: three processes and the load
// generator on two busy cores, each process stopped again and again, the
// owner for up to 40 ms, the others for up to 150 ms; 300 requests at
// concurrency 60 against 100, five rounds: exactly 100 each). An owner
// that does not run for a peer timeout (stopped, or waiting that long for a
// core) is, to its callers, frozen, and the next paragraph applies: with
// the owner stopped for up to 60 ms on two overloaded cores, about one
// round in twenty admitted 103 to 131.
//
// Unreachable owners. Every node pings every peer each probe interval.
// When a call or a ping is given up on (the owner silent for a peer
// timeout), the peer's breaker opens for a jittered backoff (so a frozen
// peer is not hammered) and, until the owner is heard again, the node
// decides for the peer's keys by its fallback mode: local (default)
// counts on this node with every limit multiplied by the fallback ratio
// (0.4 by default) and by the client's last known reputation factor, and
// never beyond this node's share (divided among the nodes other than the
// owner) of the remaining count the owner last reported for the key, or of
// the whole limit if it reported nothing yet; open admits; closed denies.
// So each node admits at most min(ratio×L, remaining/(N−1)) for a key in
// one outage, and its share, remaining/(N−1), over all the outages until
// the owner answers it again: the fallback counters start afresh once sent
// to the owner, the share does not
// (TestFallbackShareHoldsAcrossOutagesOfAnOwnerThatSaidNothing). While
// the breaker is open, a ping waits on the peer's connection if it is up;
// as soon as the owner answers it, the node sends the owner what it
// admitted in fallback and only then closes the breaker (the probe after
// the backoff, for a connection that had to be redialled, does the same;
// no other call closes an open breaker). The owner adds those counts, once:
// batches carry a sequence number per sending node and a retry is not added
// twice. After an outage the window's total is therefore what an exact
// limiter would allow, plus what the owner admitted for others between its
// return and the arrival of the fallback counts: about one round trip of
// traffic, since the node hears the owner's return from its first answer
// (TestFallbackAdmissionsAreReconciledWithTheOwnerOnce,
// TestFallbackStartsFromWhatTheOwnerLastSaid,
// TestFallbackEndsWhenTheOwnerAnswersAndNotBeforeItHeard; with an owner
// stopped and resumed every 150 ms during 200 requests against 100,
// TestProcessClusterFlappingOwnerStaysNearTheLimit asserts at most 105 and
// measures 100). For token-bucket zones the fallback
// counters spend time at the fallback rate, so reconciling them adds up to
// 1/ratio times what they admitted: again towards denying.
//
// Crashes. An owner sends the counters of the keys it changed to each key's
// successor (the node that owns the key once the owner is gone) every
// ReplicateEvery (5 ms), batched per successor; the successor keeps them as
// a replica, the newer replacing the older. When a key's successor changes
// (a node joined, restarted or left), its owner sends the new successor the
// key's counter afresh. When memberlist declares the
// owner dead (about 2 seconds with the default tuning) and the ring drops
// it, the successor starts the keys it now owns from their replicas and
// collects what the other nodes admitted for them in fallback meanwhile
// (a node that has not seen the death yet hands it over and routes those
// keys to the new owner from then on; one that has sends it before routing
// by its new ring). A node's fallback share is of what the owner last said
// remained, less what it already admitted and sent on. So a crash loses,
// per key, at most the changes its successor had not received: those the
// owner made in its last replication interval (5 ms of traffic, plus a
// batch in flight when it died) while the owner's goroutines run on time;
// on a starved machine, where the replicator itself is held up, what was
// changed since its last batch left. The fallback during detection is bounded by
// the owner's last reported remaining count: with 60 of 100 spent and the
// owner crashed, the survivors admit 40 more
// (TestCrashedOwnersCountsSurviveAtTheSuccessor asserts at most 45). A
// replica is used only when the owner died: a node that leaves gracefully
// hands its counters over instead, and the replica is not added to them. A
// single node, or a one-member ring, replicates nothing.
//
// The bound, under faults. For each key and window with limit L, the
// requests admitted across the cluster are at most
//
//	L + F + C + S
//
// where F is the number admitted by fallback (an owner may admit that many
// before it hears of them; each node's fallback is also capped, as above,
// but the cap starts again when its counters are sent to the owner); C is,
// for each crash of the key's owner, what that owner counted from
// 2×ReplicateEvery before it crashed until it was gone (the last
// replication interval and a batch in flight), or, if more, what its
// successor's replica lacked (a replicator held up on a starved machine);
// and S is, for each split (a
// partition, a frozen node, or links slow or lossy enough for memberlist
// to declare nodes dead) from its start, and for each membership change (a
// node leaving or joining) from its start, until every node routes by the
// same ring again: what was counted by owners other than the key's owner
// on that ring; rings that disagree with no fault under way (a process so
// starved that memberlist declared its peers dead) are such a split too.
// Each side of a split counts on its own and admits at most L
// (one limit per side). Without a fault F is 0 (slow owners are waited
// for, see above), so the bound is L: exact. A process that is stopped or
// starved for longer than a peer timeout is, to the others, a frozen node:
// F counts what they admitted in fallback meanwhile (measured with one of
// three processes frozen during a busy run: see docs/cluster.md). TestFaults plays hundreds of
// random schedules of these faults on three or four nodes and checks
// every key against this bound; every kind of fault holds it: delays,
// loss, freezes, partitions, crashes, restarts with or without a snapshot.
//
// Restarts. A node configured with seeds counts no key as its owner until
// it has joined: its ring holds the other members it knows, not itself, so
// it forwards what has a reachable owner and decides the rest by fallback
// (a request first waits, a bounded while, for the join), and its metadata
// says it is joining, so the others route nothing to it. Once a seed has
// answered (or JoinWait has passed, and it counts alone), it sends what it
// read back from a snapshot (Node.RestoreCounters: only keys it owns or
// keeps replicas of) to the keys' owners, which keep the newer of theirs
// and these, never the sum; then it enters its ring and the others', and
// pulls the keys that move to it like any joining node. A new owner never
// counts a key it could not pull: it decides it by fallback, counted in its
// own engine so the share is not given twice; and a node whose key was
// pulled away routes it to the puller until its own ring changes. So a
// restart, early requests included, stays within the bound above
// (TestFaults: kinds kill, killkeep, restart and their -early variants;
// TestProcessClusterKilledNodeRestoresItsSnapshotWithoutSumming).
//
// Pauses. A node paused long enough that the others may have declared it
// dead (its heartbeat late by three quarters of memberlist's shortest
// suspicion timeout, SuspicionMult probe intervals, and at least a second,
// while the process used next to no CPU: stopped, not merely busy) stops
// counting the moment it runs again, before any request, and joins
// again as a restarted node does, what it held sent to the owners as older
// copies. Its successors started its keys from their replicas meanwhile,
// so its return loses, per key, at most what a crash loses (in the bound
// above such a pause is a crash: C), and counts nothing twice
// (TestPausedOwnerJoinsAgainWithoutCountingTwice;
// TestProcessClusterOwnerFrozenPastDetectionComesBackWithoutOverAdmitting:
// owner frozen 5 s with 90 of 100 admitted meanwhile, a burst at it as it
// returns; the window admits the limit plus what was admitted in fallback
// while it came back). A shorter pause is a frozen node as above.
//
// Known gaps, found from outside with three processes and not closed yet:
// a pause of 1 to 2 seconds, about as long as failure detection, can end
// with the node deciding it was paused while a successor has just started
// its keys from the replica without the survivors' fallback counts, and for
// about 100 ms two nodes count a key as its owner (measured 105 to 141 of
// 100, of which 1 to 19 in fallback after the pause). And in the seconds
// after a membership change (the hand-off window), nodes stopped for up to
// 200 ms at random during a burst of 300 requests at concurrency 60 let 3
// to 4 rounds in 18 admit 148 to 174 of 100 (the owner counting its own
// requests while the others, unable to reach it, counted theirs in
// fallback: within L + F), and others under-admit (a new owner that cannot
// pull a key decides it by fallback caps until the pull succeeds). Both are
// within the bound below and outside the exactness stated above. After a
// split longer than failure detection, each side has declared the other
// dead, and memberlist talks only to members it believes alive: a node with
// seeds that knows fewer members than it once did joins its seeds again
// every ten probe intervals (10 s by default), so the sides meet again
// within that after the split heals
// (TestSplitLongerThanDetectionHealsByItself; TestFaults also joins them
// at once after each split, to keep its schedules short).
//
// Blocked keys. A node remembers keys an owner denied, until the time they
// may pass, and answers them itself without a call. Resetting a key clears
// it from every node's cache.
//
// Security. Gossip is encrypted and authenticated with the gossip key.
// Peer RPC connections are mutually authenticated with a challenge-response
// under the cluster secret and every frame is sealed with AES-GCM, so a
// node without the secret can neither read, add to nor reset counts. The
// ring is keyed with the secret, so nobody outside can aim keys at one node.
// Shared values travel over gossip sealed with an HMAC under the secret, so a
// process holding only the gossip key (memberlist hands over its messages and
// state even when it is refused as a member) changes none of them; each is
// checked before it is used.
package cluster
