package limiter

import "time"

// State is one counter as it moves between engines, when a key changes
// owner. It holds no more than the engine keeps: the key's hash and its
// timestamps and counts.
type State struct {
	Key     Key
	Stamp   int64 // window start or token bucket arrival time, Unix ns
	Expires int64 // Unix ns after which the counter equals a fresh one
	Cur     uint32
	Prev    uint32
}

func (s State) entry() entry {
	return entry{stamp: s.Stamp, expires: s.Expires, cur: s.Cur, prev: s.Prev}
}

func stateOf(k Key, e entry) State {
	return State{Key: k, Stamp: e.stamp, Expires: e.expires, Cur: e.cur, Prev: e.prev}
}

// Extract removes and returns up to max live counters (all if max <= 0)
// whose key satisfies move, in one pass over the shards; each shard is
// locked while it is searched, so a counter is either extracted or updated
// by a concurrent Take, never both.
func (e *Engine) Extract(now time.Time, move func(Key) bool, max int) []State {
	ns := now.UnixNano()
	var out []State
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for k, v := range s.entries {
			if !move(k) {
				continue
			}
			delete(s.entries, k)
			if v.expires > ns {
				out = append(out, stateOf(k, v))
			}
			if max > 0 && len(out) >= max {
				s.mu.Unlock()
				return out
			}
		}
		s.mu.Unlock()
	}
	return out
}

// ExtractKeys removes and returns the live counters of the given
// keys, for a new owner that asks for them.
func (e *Engine) ExtractKeys(now time.Time, keys []Key) []State {
	ns := now.UnixNano()
	var out []State
	for _, k := range keys {
		s := &e.shards[shardOf(k)]
		s.mu.Lock()
		if v, ok := s.entries[k]; ok {
			delete(s.entries, k)
			if v.expires > ns {
				out = append(out, stateOf(k, v))
			}
		}
		s.mu.Unlock()
	}
	return out
}

// Merge adds counters handed over by another engine to this one's. Counts
// of the same window add up, so requests admitted on either side are all
// accounted for; a token bucket adds the time the other side had spent.
func (e *Engine) Merge(now time.Time, states []State) {
	ns := now.UnixNano()
	for _, st := range states {
		if st.Expires <= ns {
			continue
		}
		s := &e.shards[shardOf(st.Key)]
		s.mu.Lock()
		cur, ok := s.entries[st.Key]
		if !ok || cur.expires <= ns {
			s.entries[st.Key] = st.entry()
		} else {
			s.entries[st.Key] = mergeEntries(cur, st.entry(), ns)
		}
		s.mu.Unlock()
	}
}

// mergeEntries combines two live states of one key.
func mergeEntries(a, b entry, now int64) entry {
	aBucket, bBucket := a.expires == a.stamp, b.expires == b.stamp
	switch {
	case aBucket && bBucket:
		// Arrival times: add what b had spent beyond now to a.
		tat := max(a.stamp, now) + max(0, b.stamp-now)
		return entry{stamp: tat, expires: tat}
	case aBucket != bBucket:
		// Different algorithms (the zone changed): keep the fuller one.
		if b.expires > a.expires {
			return b
		}
		return a
	}
	// Windows: expires is stamp + 2 windows, so the window length is known.
	w := (a.expires - a.stamp) / 2
	if b.stamp > a.stamp {
		a, b = b, a // a is the newer window
	}
	switch {
	case a.stamp == b.stamp:
		a.cur += b.cur
		a.prev += b.prev
	case a.stamp-b.stamp == w:
		a.prev += b.cur // b's current window is a's previous one
	}
	return a
}

// Range calls fn for every live counter until fn returns false. Each shard
// is locked while its counters are visited, so fn must not call the engine.
func (e *Engine) Range(now time.Time, fn func(State) bool) {
	ns := now.UnixNano()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for k, v := range s.entries {
			if v.expires > ns && !fn(stateOf(k, v)) {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
	}
}

// Has reports whether the engine holds a live counter for k.
func (e *Engine) Has(now time.Time, k Key) bool {
	s := &e.shards[shardOf(k)]
	s.mu.Lock()
	v, ok := s.entries[k]
	s.mu.Unlock()
	return ok && v.expires > now.UnixNano()
}
