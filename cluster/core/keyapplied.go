package core

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/tollgate/tollgate/limiter"
)

// keyApplied records, per key, transfers of bare additions (what other
// nodes admitted in fallback) whose counts the counts of the key held here
// hold, each naming the run that applied it (Applied.By): one applied
// here that did not join this run's counters at once (kept in fallback
// for want of a majority, or passed on), or one such record that came
// with counts. The record goes with the counts wherever they go (see
// Transfer.Applied), so that the sender's counts sent again in place of
// the transfer (Transfer.Was), once the run that applied it is gone, are
// skipped where they come. Without it the counts went on naming nothing
// and were added twice. It is safe for concurrent use; the zero value is
// empty.
type keyApplied struct {
	mu   sync.Mutex
	keys map[limiter.Key]map[Applied]int64 // key → transfer → mono when recorded
}

// appliedMarks are a run's records of the transfers of bare additions its
// counts hold: those in its counters (held) and those in its fallback
// counts (fallback).
type appliedMarks struct {
	held, fallback keyApplied
}

// keep records that the counts of keys held here hold the transfers of
// list, at mono m.
func (r *keyApplied) keep(m int64, keys []limiter.Key, list []Applied) {
	if len(list) == 0 || len(keys) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[limiter.Key]map[Applied]int64{}
	}
	for _, k := range keys {
		set := r.keys[k]
		if set == nil {
			set = map[Applied]int64{}
			r.keys[k] = set
		}
		for _, a := range list {
			set[a] = m
		}
	}
}

// holds reports whether the counts of every key of keys, not empty, hold
// transfer a.
func (r *keyApplied) holds(a Applied, keys []limiter.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if _, ok := r.keys[k][a]; !ok {
			return false
		}
	}
	return len(keys) > 0
}

// of returns, sorted, the transfers the counts of keys hold.
func (r *keyApplied) of(keys []limiter.Key) []Applied {
	return r.list(keys, false)
}

// take returns, sorted, the transfers the counts of keys hold, and forgets
// them here: the counts leave with the record.
func (r *keyApplied) take(keys []limiter.Key) []Applied {
	return r.list(keys, true)
}

// list returns the newest appliedListedMax records of keys (a list on the
// wire is bounded, and through a long fault a key's counts gather a record
// of every fallback transfer applied here; the oldest are those their
// senders have least cause to send again), sorted.
func (r *keyApplied) list(keys []limiter.Key, forget bool) []Applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return nil
	}
	when := map[Applied]int64{}
	for _, k := range keys {
		for a, m := range r.keys[k] {
			when[a] = max(when[a], m)
		}
		if forget {
			delete(r.keys, k)
		}
	}
	out := make([]Applied, 0, len(when))
	for a := range when {
		out = append(out, a)
	}
	if len(out) > appliedListedMax {
		slices.SortFunc(out, func(x, y Applied) int { // newest first
			return cmp.Or(cmp.Compare(when[y], when[x]), cmpAppliedBy(x, y))
		})
		out = out[:appliedListedMax]
	}
	return sortApplied(out)
}

// forget drops the records made before mono before.
func (r *keyApplied) forget(before int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, set := range r.keys {
		for a, m := range set {
			if m < before {
				delete(set, a)
			}
		}
		if len(set) == 0 {
			delete(r.keys, k)
		}
	}
}

// sortApplied sorts list by sender, number and the run that applied it,
// without repeats.
func sortApplied(list []Applied) []Applied {
	if len(list) == 0 {
		return nil
	}
	slices.SortFunc(list, cmpAppliedBy)
	return slices.Compact(list)
}

// cmpAppliedBy orders transfers by sender, number, then the run that
// applied them.
func cmpAppliedBy(x, y Applied) int {
	return cmp.Or(cmpApplied(x, y), strings.Compare(x.By.Name, y.By.Name), cmpUint(x.By.Inc, y.By.Inc))
}

// withApplied returns list and more, sorted, without repeats.
func withApplied(list, more []Applied) []Applied {
	if len(more) == 0 {
		return list
	}
	return sortApplied(append(slices.Clone(list), more...))
}
