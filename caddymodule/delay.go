package caddymodule

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/limiter"
)

// delayQueue bounds the requests of each key of a delay zone that wait on
// this node at once. A key is on record only while requests of it wait,
// and each waiting request is a live connection, so it stays small.
type delayQueue struct {
	max     int32
	waiting prometheus.Gauge // requests of the zone waiting now; set by setScope

	mu   sync.Mutex
	keys map[limiter.Key]int32
}

func newDelayQueue(n int64) *delayQueue {
	return &delayQueue{max: int32(n), keys: make(map[limiter.Key]int32), waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "unregistered"})}
}

// enter counts a request of key k that may wait, and reports whether it
// may: false when the key's queue is full.
func (q *delayQueue) enter(k limiter.Key) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.keys[k]
	if n >= q.max {
		return false
	}
	q.keys[k] = n + 1
	return true
}

// leave counts off a request of key k that entered.
func (q *delayQueue) leave(k limiter.Key) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.keys[k] - 1; n > 0 {
		q.keys[k] = n
	} else {
		delete(q.keys, k)
	}
}
