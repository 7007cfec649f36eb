package fingerprint

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of IP pressure: more than 20 distinct cookie-less fingerprints
// from one network within 10 minutes halve that network's cookie-less
// limits for an hour.
const (
	DefaultPressureThreshold = 20
	DefaultPressureWindow    = 10 * time.Minute
	DefaultPressureSqueeze   = 0.5
	DefaultPressureDuration  = time.Hour
	DefaultPressureNetworks  = 1 << 16
)

// PressureConfig sets up a Pressure.
type PressureConfig struct {
	// Threshold is how many distinct fingerprints a network may show
	// within Window before it is squeezed. Default 20.
	Threshold int
	// Window is the period distinct fingerprints are counted over.
	// Default 10m.
	Window time.Duration
	// Squeeze multiplies the limits of a squeezed network's cookie-less
	// clients; above 0, at most 1. Default 0.5.
	Squeeze float64
	// Duration is how long a network stays squeezed once over the
	// threshold. Default 1h.
	Duration time.Duration
	// MaxNetworks bounds how many networks are tracked. Default 65536.
	MaxNetworks int
}

// setDefaults fills in the settings left zero.
func (c *PressureConfig) setDefaults() {
	c.Threshold = cmp.Or(c.Threshold, DefaultPressureThreshold)
	c.Window = cmp.Or(c.Window, DefaultPressureWindow)
	c.Squeeze = cmp.Or(c.Squeeze, DefaultPressureSqueeze)
	c.Duration = cmp.Or(c.Duration, DefaultPressureDuration)
	c.MaxNetworks = cmp.Or(c.MaxNetworks, DefaultPressureNetworks)
}

// Validate reports a setting out of range.
func (c PressureConfig) Validate() error {
	switch {
	case c.Threshold < 0 || c.Threshold > 10000:
		return fmt.Errorf("threshold %d: must be 1 to 10000 fingerprints", c.Threshold)
	case c.Window < 0:
		return fmt.Errorf("window %s: must be positive", c.Window)
	case c.Squeeze < 0 || c.Squeeze > 1:
		return fmt.Errorf("squeeze %g: must be above 0 and at most 1", c.Squeeze)
	case c.Duration < 0:
		return fmt.Errorf("duration %s: must be positive", c.Duration)
	case c.MaxNetworks < 0:
		return fmt.Errorf("max networks %d: must be positive", c.MaxNetworks)
	}
	return nil
}

// Pressure counts distinct cookie-less fingerprints per IP network, over the
// current and the previous window, and squeezes networks that show too many:
// a household behind one address has a few browsers, a client rotating
// fingerprints has many. Memory is bounded: each network keeps at most
// Threshold+1 fingerprints per window, and at most MaxNetworks networks are
// tracked; when full, expired networks are dropped, and if none has expired,
// new networks share one overflow entry per shard (so a flood of networks
// squeezes the newcomers rather than escaping the count).
//
// It is safe for concurrent use; time is passed in.
type Pressure struct {
	cfg       PressureConfig
	shards    [pressureShards]pressureShard
	squeezes  atomic.Uint64
	overflows atomic.Uint64
}

const pressureShards = 64

// reclaimSample is how many entries an insert into a full shard looks at
// for expired ones to drop.
const reclaimSample = 16

type pressureShard struct {
	mu       sync.Mutex
	networks map[uint64]*network
	overflow network
}

// network is one IP network's recent fingerprints.
type network struct {
	start    int64    // start of the current window, Unix ns
	cur      []uint32 // distinct fingerprints of the current window
	prev     []uint32 // of the previous window
	squeezed int64    // squeezed until, Unix ns
}

// NewPressure returns a Pressure; zero fields of cfg take their defaults.
func NewPressure(cfg PressureConfig) (*Pressure, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	p := &Pressure{cfg: cfg}
	for i := range p.shards {
		p.shards[i].networks = make(map[uint64]*network)
	}
	return p, nil
}

// Config returns the settings in effect.
func (p *Pressure) Config() PressureConfig { return p.cfg }

// Reading is what Observe found for a network.
type Reading struct {
	// Distinct is the number of distinct fingerprints seen in the current
	// and previous window, counted up to Threshold+1.
	Distinct int
	// Squeezed is set while the network's cookie-less limits are scaled.
	Squeezed bool
	// Factor is the multiplier for limits: the configured squeeze while
	// squeezed, else 1.
	Factor float64
}

// Observe records that a cookie-less request with fingerprint fp came from
// network net at now, and returns the network's state.
func (p *Pressure) Observe(net, fp uint64, now time.Time) Reading {
	ns := now.UnixNano()
	s := &p.shards[net%pressureShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.networks[net]
	if n == nil {
		n = p.admit(s, ns)
		if n == nil {
			p.overflows.Add(1)
			n = &s.overflow
		} else {
			s.networks[net] = n
		}
	}
	w := int64(p.cfg.Window)
	switch {
	case ns >= n.start+2*w:
		n.start, n.cur, n.prev = ns-ns%w, n.cur[:0], n.prev[:0]
	case ns >= n.start+w:
		n.start, n.prev, n.cur = ns-ns%w, n.cur, n.prev[:0]
	}
	f := uint32(fp) ^ uint32(fp>>32)
	if !containsFP(n.cur, f) && len(n.cur) <= p.cfg.Threshold {
		n.cur = append(n.cur, f)
	}
	distinct := len(n.cur)
	for _, v := range n.prev {
		if !containsFP(n.cur, v) {
			distinct++
		}
	}
	distinct = min(distinct, p.cfg.Threshold+1)
	if distinct > p.cfg.Threshold && n.squeezed <= ns {
		n.squeezed = ns + int64(p.cfg.Duration)
		p.squeezes.Add(1)
	}
	r := Reading{Distinct: distinct, Factor: 1}
	if n.squeezed > ns {
		r.Squeezed, r.Factor = true, p.cfg.Squeeze
	}
	return r
}

// admit returns a new network entry for shard s, or nil if the shard is
// full of live ones. s.mu is held.
func (p *Pressure) admit(s *pressureShard, now int64) *network {
	limit := max(1, p.cfg.MaxNetworks/pressureShards)
	if len(s.networks) >= limit {
		seen := 0
		for k, n := range s.networks { // a sample: iteration starts at random
			if n.start+2*int64(p.cfg.Window) <= now && n.squeezed <= now {
				delete(s.networks, k)
			}
			if seen++; seen == reclaimSample {
				break
			}
		}
		if len(s.networks) >= limit {
			return nil
		}
	}
	return &network{}
}

func containsFP(list []uint32, v uint32) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// PressureStats are a Pressure's counters.
type PressureStats struct {
	Networks  int    // networks tracked now
	Squeezed  int    // of which squeezed now
	Squeezes  uint64 // times a network was squeezed since start
	Overflows uint64 // observations counted in an overflow entry
}

// Stats returns the current counters at now.
func (p *Pressure) Stats(now time.Time) PressureStats {
	ns := now.UnixNano()
	st := PressureStats{Squeezes: p.squeezes.Load(), Overflows: p.overflows.Load()}
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		st.Networks += len(s.networks)
		for _, n := range s.networks {
			if n.squeezed > ns {
				st.Squeezed++
			}
		}
		s.mu.Unlock()
	}
	return st
}
