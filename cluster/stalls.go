package cluster

import (
	"sync"
	"sync/atomic"
	"time"
)

// The process's own stalls. A process that is not running (stopped,
// descheduled on a busy machine, paused by the garbage collector) reads no
// answers: the time it spends so is not a peer's silence, and a caller
// does not give up on a peer for it. A watchdog ticks every stallTick
// and adds up how late its ticks come; the transport moves a call's
// deadline by the stalls the caller had while the call waited.

const (
	stallTick  = 5 * time.Millisecond
	stallSlack = time.Millisecond // a tick later than this: the process did not run
)

// stallClock tells how long, up to now (monotonic ns since epoch), the
// process was seen not running.
type stallClock interface {
	stalled(now int64) int64
}

// processStalls is the watchdog every started node of the process
// shares: it runs while at least one node holds it (hold, release).
var processStalls watchdog

// watchdog measures the process's stalls by the lateness of its ticks.
type watchdog struct {
	mu    sync.Mutex
	users int
	stop  chan struct{}
	done  chan struct{}

	total atomic.Int64 // nanoseconds the process was seen not running
	tick  atomic.Int64 // when the last tick ran (monotonic ns since epoch); 0 while stopped
}

// hold starts the watchdog unless it runs, and counts one more user.
func (w *watchdog) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.users++
	if w.users > 1 {
		return
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	w.tick.Store(monoNanos(time.Now()))
	go w.run(w.stop, w.done)
}

// release counts one user less, and stops the watchdog after the last.
func (w *watchdog) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.users--
	if w.users > 0 {
		return
	}
	close(w.stop)
	<-w.done
	w.tick.Store(0)
}

func (w *watchdog) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(stallTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		}
		now := monoNanos(time.Now())
		if late := now - w.tick.Load() - int64(stallTick); late > int64(stallSlack) {
			w.total.Add(late)
		}
		w.tick.Store(now)
	}
}

// stalled returns how long, up to now, the process was seen not running,
// counting a tick overdue now as a stall under way.
func (w *watchdog) stalled(now int64) int64 {
	total := w.total.Load()
	if t := w.tick.Load(); t != 0 {
		if late := now - t - int64(stallTick); late > int64(stallSlack) {
			total += late
		}
	}
	return total
}
