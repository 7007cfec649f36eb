package cluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

const poisonKey = limiter.Key(0xDEAD_BEEF_DEAD_BEEF)

// silentServer accepts this node's peer connections, authenticates them,
// reads take frames and never answers, so the writer stays busy batching.
// It records every key it receives; seen(0) reports whether it received any.
func silentServer(t *testing.T, n *Node) (addr string, seen func(limiter.Key) bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	keys := make(map[limiter.Key]bool)
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				conn, _, err := serverHandshake(raw, n.authKey, time.Now().Add(2*time.Second))
				if err != nil {
					return
				}
				for {
					frame, err := conn.readFrame(nil)
					if err != nil {
						return
					}
					d := &decoder{b: frame}
					if d.u8() != msgTake {
						continue
					}
					d.u32()
					count := d.u16()
					for range count {
						d.u64()
						d.u8()
						d.u64()
						zones := int(d.u8())
						for range zones {
							r, err := decodeZoneReq(d)
							if err != nil {
								return
							}
							mu.Lock()
							keys[r.Key] = true
							mu.Unlock()
						}
					}
				}
			}()
		}
	}()
	return l.Addr().String(), func(k limiter.Key) bool {
		mu.Lock()
		defer mu.Unlock()
		if k == 0 { // anything at all
			return len(keys) > 0
		}
		return keys[k]
	}
}

// A caller that gives up on a call may reuse its request memory at once:
// what goes on the wire is what it asked when it asked, never what it wrote
// there afterwards. Callers time out while the writer is busy batching, then
// overwrite their requests with a poison key, which must never be sent.
func TestAbandonedCallsNeverSendReusedMemory(t *testing.T) {
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	addr, seen := silentServer(t, n)
	p := newPeerClient(testDialer(n), "silent", addr, 1)
	defer p.close()
	eventually(t, 2*time.Second, "connected", p.connected.Load)

	var sent atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var reqs [2]limiter.Request
			for i := range 400 {
				for z := range reqs {
					reqs[z] = limiter.Request{Key: limiter.Key(g<<20 | i<<2 | z + 1), Cost: 1, Limit: limitOf(10)}
				}
				c := takeCall(reqs[:])
				p.do(c, time.Now().Add(time.Duration(rand.IntN(400))*time.Microsecond))
				sent.Add(1)
				for z := range reqs {
					reqs[z].Key = poisonKey // the memory is the caller's again
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // let the last frames arrive
	if seen(poisonKey) {
		t.Fatal("a key written after the call was given up on went to the peer")
	}
	if !seen(0) {
		t.Fatal("the server saw nothing; the test tests nothing")
	}
}

// lateServer accepts this node's peer connections, authenticates them, and
// answers every take item after a random delay of up to a millisecond,
// each zone's Remaining set to the zone's key, so a caller can tell which
// item an answer belongs to.
func lateServer(t *testing.T, n *Node) (addr string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				conn, _, err := serverHandshake(raw, n.authKey, time.Now().Add(2*time.Second))
				if err != nil {
					return
				}
				var wmu sync.Mutex
				for {
					frame, err := conn.readFrame(nil)
					if err != nil {
						return
					}
					d := &decoder{b: frame}
					if d.u8() != msgTake {
						continue
					}
					id := d.u32()
					for i := range d.u16() {
						item, err := decodeTakeItem(d, nil)
						if err != nil {
							return
						}
						r := core.ItemReply{Outcome: core.Decided, Allowed: true, Results: make([]limiter.Result, len(item.Reqs))}
						for z, req := range item.Reqs {
							r.Results[z] = limiter.Result{Allowed: true, Remaining: int64(req.Key)}
						}
						time.AfterFunc(time.Duration(rand.IntN(1000))*time.Microsecond, func() {
							e := &encoder{}
							e.u8(msgTake | replyBit)
							e.u32(id)
							e.u8(statusOK)
							e.u16(1)
							e.u16(i)
							encodeItemReply(e, &r)
							wmu.Lock()
							defer wmu.Unlock()
							conn.writeFrame(e.b, time.Now().Add(time.Second))
						})
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// A take driver uses its call again for its next item as soon as the call
// is settled, even by its deadline while its answer is still on its way:
// each use carries what it asked, and gets its own answer or none, never
// the late answer to an earlier use of the same call. Callers give up on
// many calls (deadlines of up to a millisecond, answers within one) and
// check every answer they get against the key they asked for.
func TestACallUsedAgainGetsOnlyItsOwnAnswer(t *testing.T) {
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	p := newPeerClient(testDialer(n), "late", lateServer(t, n), 1)
	defer p.close()
	eventually(t, 2*time.Second, "connected", p.connected.Load)

	var answered, timedOut atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var c call
			var reqs [2]limiter.Request
			for i := range 400 {
				for z := range reqs {
					reqs[z] = limiter.Request{Key: limiter.Key(g<<20 | i<<2 | z + 1), Cost: 1, Limit: limitOf(10)}
				}
				c.takeAgain(&core.TakeItem{Seq: uint64(i + 1), Op: core.OpTake, Reqs: reqs[:]})
				err := p.do(&c, time.Now().Add(time.Duration(rand.IntN(1000))*time.Microsecond))
				switch {
				case errors.Is(err, errTimeout):
					timedOut.Add(1)
				case err != nil:
					t.Errorf("a call: %v", err)
					return
				default:
					answered.Add(1)
					for z := range reqs {
						if got := c.item.Results[z].Remaining; got != int64(reqs[z].Key) {
							t.Errorf("the call for key %#x got the answer for key %#x", reqs[z].Key, got)
							return
						}
					}
				}
				for z := range reqs {
					reqs[z].Key = poisonKey // the memory is the caller's again
				}
			}
		})
	}
	wg.Wait()
	if answered.Load() == 0 || timedOut.Load() == 0 {
		t.Fatalf("%d calls answered, %d timed out: the test wants both", answered.Load(), timedOut.Load())
	}
}
