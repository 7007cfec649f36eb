package core

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// With the logger at debug, the counts an owner's absence left on another
// node can be followed to the owner: the transfer made, applied there,
// and acknowledged, each line naming the key and its count.
func TestDebugLinesFollowFallbackCountsToTheOwner(t *testing.T) {
	var buf bytes.Buffer
	cfg := handTiming
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	k := h.keyOwnedBy("n2", "n1")
	load := newHandLoad(h, k, 10)
	h.down["n2"] = true
	h.advance(100*time.Millisecond, "n0", "n1")
	for range 3 {
		load.spend("n0")
	}
	if load.by[SourceFallback] != 3 {
		t.Fatalf("decided %v; want 3 by fallback", load.by)
	}
	h.down["n2"] = false
	h.advance(time.Second)
	counts := fmt.Sprintf(`states="n=1 sum=3 %016x=3/0"`, uint64(k))
	for _, want := range []string{
		`msg="transfer sent" node=n0 peer=n2 seq=`,
		`msg="transfer applied" node=n2 peer=n0 seq=`,
		`msg="transfer acknowledged" node=n0 peer=n2 seq=`,
	} {
		if !hasLine(buf.String(), want, "mode=add", counts) {
			t.Errorf("no debug line with %s, mode=add and %s in:\n%s", want, counts, buf.String())
		}
	}
}

// hasLine reports whether a line of log holds every one of parts.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
