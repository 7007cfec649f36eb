package fingerprint

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func mustPressure(t testing.TB, cfg PressureConfig) *Pressure {
	t.Helper()
	p, err := NewPressure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPressureSqueezesNetworksWithManyFingerprints(t *testing.T) {
	p := mustPressure(t, PressureConfig{Threshold: 3, Window: 10 * time.Minute, Squeeze: 0.5, Duration: time.Hour})
	const net = 42
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// A household: the same 3 fingerprints again and again.
	for i := range 30 {
		r := p.Observe(net, uint64(i%3+1), at(time.Duration(i)*time.Second))
		if r.Squeezed || r.Factor != 1 || r.Distinct > 3 {
			t.Fatalf("request %d of 3 fingerprints: %+v", i, r)
		}
	}
	// A fourth fingerprint tips it over.
	r := p.Observe(net, 4, at(time.Minute))
	if !r.Squeezed || r.Factor != 0.5 || r.Distinct != 4 {
		t.Fatalf("4th fingerprint: %+v; want squeezed at 0.5", r)
	}
	// Other networks are not affected.
	if r := p.Observe(43, 1, at(time.Minute)); r.Squeezed {
		t.Fatal("another network was squeezed")
	}
	// Still squeezed later, with one familiar fingerprint, until the hour is up.
	if r := p.Observe(net, 1, at(59*time.Minute)); !r.Squeezed {
		t.Fatal("squeeze ended before its duration")
	}
	if r := p.Observe(net, 1, at(61*time.Minute+time.Second)); r.Squeezed || r.Factor != 1 {
		t.Fatalf("after the hour: %+v; want released", r)
	}
}

func TestPressureCountsTheCurrentAndPreviousWindow(t *testing.T) {
	p := mustPressure(t, PressureConfig{Threshold: 3, Window: 10 * time.Minute})
	base := t0.Truncate(10 * time.Minute)
	p.Observe(1, 1, base)
	p.Observe(1, 2, base.Add(time.Minute))
	p.Observe(1, 3, base.Add(9*time.Minute))
	// Next window: the previous three still count, so a fourth squeezes.
	if r := p.Observe(1, 4, base.Add(11*time.Minute)); !r.Squeezed || r.Distinct != 4 {
		t.Fatalf("across a window edge: %+v", r)
	}
	// Two windows later nothing is remembered.
	p2 := mustPressure(t, PressureConfig{Threshold: 3, Window: 10 * time.Minute})
	for i := range 3 {
		p2.Observe(1, uint64(i), base)
	}
	if r := p2.Observe(1, 99, base.Add(20*time.Minute)); r.Distinct != 1 || r.Squeezed {
		t.Fatalf("two windows later: %+v; want 1 distinct", r)
	}
}

func TestPressureMemoryIsBounded(t *testing.T) {
	p := mustPressure(t, PressureConfig{Threshold: 5, MaxNetworks: 128})
	for net := range uint64(10000) {
		for fp := range uint64(50) {
			p.Observe(net, fp, t0)
		}
	}
	st := p.Stats(t0)
	if st.Networks > 128 {
		t.Fatalf("tracking %d networks; the bound is 128", st.Networks)
	}
	if st.Overflows == 0 {
		t.Fatal("no observation went to the overflow entries")
	}
	for i := range p.shards {
		for _, n := range p.shards[i].networks {
			if len(n.cur) > 6 || len(n.prev) > 6 {
				t.Fatalf("a network keeps %d fingerprints; the bound is threshold+1", len(n.cur))
			}
		}
	}
	// A flood of networks squeezes the newcomers rather than escaping.
	if r := p.Observe(1<<40, 1, t0); !r.Squeezed {
		t.Error("a new network during a flood of networks was not squeezed")
	}
}

func TestPressureIsSafeForConcurrentUse(t *testing.T) {
	p := mustPressure(t, PressureConfig{Threshold: 20})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				p.Observe(uint64(i%7), uint64(g*1000+i), t0)
			}
		})
	}
	wg.Wait()
	if st := p.Stats(t0); st.Networks != 7 || st.Squeezed != 7 {
		t.Fatalf("stats %+v; want 7 networks, all squeezed", st)
	}
}

func TestPressureConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  PressureConfig
		want string
	}{
		{PressureConfig{Squeeze: 1.5}, "squeeze 1.5"},
		{PressureConfig{Squeeze: -0.1}, "squeeze -0.1"},
		{PressureConfig{Threshold: -1}, "threshold -1"},
		{PressureConfig{Window: -time.Second}, "window -1s"},
	} {
		if _, err := NewPressure(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v; want %q", tc.cfg, err, tc.want)
		}
	}
}
