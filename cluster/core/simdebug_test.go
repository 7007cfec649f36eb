package core

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSimDebug(t *testing.T) {
	if os.Getenv("SIMDBG") == "" {
		t.Skip()
	}
	if os.Getenv("SIMDBG_FB") != "" {
		debugFallback = func(c *Core, now time.Time, op *TakeOp, g *takeGroup) {
			fmt.Printf("FALLBACK %s at %v owner=%q to=%v hops=%d pause=%d waited=%v stack=%s\n", c.self.Name, now.Sub(simEpoch), g.owner, op.to, g.hops, g.pause, g.waited, debugStack())
		}
		defer func() { debugFallback = nil }()
	}
	if v := os.Getenv("SIMDBG_SEED"); v != "" {
		seed, _ := strconv.ParseUint(v, 10, 64)
		sc := newSimSchedule(seed, 0, allFaults)
		s := runSchedule(sc)
		fmt.Println(sc)
		for _, v := range s.violations[:min(len(s.violations), 15)] {
			fmt.Println(" ", v)
		}
		for _, l := range s.log {
			fmt.Println(l)
		}
		return
	}
	n, _ := strconv.Atoi(os.Getenv("SIMDBG"))
	kinds := map[string][]uint64{}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		sc := newSimSchedule(seed, 0, allFaults)
		s := runSchedule(sc)
		seen := map[string]bool{}
		for _, v := range s.violations {
			k := v[:strings.Index(v, ":")]
			var fk []string
			for _, f := range sc.faults {
				fk = append(fk, string(f.kind))
			}
			k += " [" + strings.Join(fk, ",") + "]"
			if !seen[k] {
				seen[k] = true
				kinds[k] = append(kinds[k], seed)
			}
		}
	}
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Println(len(kinds[k]), k, kinds[k][:min(len(kinds[k]), 6)])
	}
}

func TestSimTrace(t *testing.T) {
	v := os.Getenv("SIMTRACE")
	if v == "" {
		t.Skip()
	}
	parts := strings.Split(v, ":")
	seed, _ := strconv.ParseUint(parts[0], 10, 64)
	kz, _ := strconv.Atoi(parts[1])
	sc := newSimSchedule(seed, 0, allFaults)
	s := runScheduleTraced(sc, kz)
	k := s.keys[kz]
	for _, l := range s.log {
		if strings.Contains(l, "TRACE") || strings.Contains(l, "|") || strings.Contains(l, "froze") || strings.Contains(l, "resume") || strings.Contains(l, "crash") {
			fmt.Println(l)
		}
	}
	fmt.Println(sc)
	fmt.Println("key", kz, "limit", k.limit)
	for _, v := range s.violations {
		if strings.Contains(v, fmt.Sprintf("key %d", kz)) {
			fmt.Println(" ", v)
		}
	}
	for _, name := range s.names {
		n := s.current[name]
		if n == nil {
			continue
		}
		fmt.Println(name, "engine", s.engineCount(n.engine, k.key), "held", s.heldBy(n, k.key), "owner?", func() string { o, _ := n.core.Owner(k.key); return o.Name }())
	}
	for _, r := range s.hist.reqs {
		for i, z := range r.zones {
			if z == kz {
				fmt.Printf("%9.3f req %d via %s zones %v: allowed=%v zoneBy=%s zoneOK=%v at=%.3f\n", r.start.Sub(simEpoch).Seconds(), r.id, r.node.name, r.zones, r.d.Allowed, r.zoneBy[i], r.zoneOK[i], r.zoneAt[i].Sub(simEpoch).Seconds())
			}
		}
	}
	for _, d := range s.hist.decisions {
		if d.key == k.key {
			fmt.Printf("%9.3f owner %s decided seq %d from %s: %v\n", d.at.Sub(simEpoch).Seconds(), d.node, d.seq, d.caller.Name, d.allowed)
		}
	}
}

func debugStack() string {
	pc := make([]uintptr, 6)
	n := runtime.Callers(3, pc)
	frames := runtime.CallersFrames(pc[:n])
	var out []string
	for {
		f, more := frames.Next()
		out = append(out, fmt.Sprintf("%s:%d", f.Function[strings.LastIndex(f.Function, ".")+1:], f.Line))
		if !more {
			break
		}
	}
	return strings.Join(out, "<")
}
