package caddymodule

import (
	"strings"
	"testing"
	"time"
)

// snapshot_interval has one rule wherever it comes from: the Caddyfile's
// "at least 1s, or off" holds for JSON too.
func TestSnapshotIntervalInJSONHasTheCaddyfileRule(t *testing.T) {
	for _, every := range []int64{1, int64(500 * time.Millisecond)} {
		cfg := withHandler(t, func(_, app map[string]any) { app["snapshot_interval"] = every })
		if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "snapshot_interval") {
			t.Errorf("snapshot_interval %s: got %v, want an error naming snapshot_interval", time.Duration(every), err)
		}
	}
	for _, every := range []int64{-1, int64(time.Second)} {
		cfg := withHandler(t, func(_, app map[string]any) { app["snapshot_interval"] = every })
		if err := validateConfig(cfg); err != nil {
			t.Errorf("snapshot_interval %s refused: %v", time.Duration(every), err)
		}
	}
}

// max_keys has the Caddyfile's bounds in JSON too.
func TestMaxKeysInJSONHasTheCaddyfileBounds(t *testing.T) {
	cfg := withHandler(t, func(_, app map[string]any) { app["max_keys"] = int64(1) << 50 })
	if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "max_keys") {
		t.Errorf("max_keys 2^50: got %v, want an error naming max_keys", err)
	}
	cfg = withHandler(t, func(_, app map[string]any) { app["max_keys"] = int64(1) << 40 })
	if err := validateConfig(cfg); err != nil {
		t.Errorf("max_keys 2^40 refused: %v", err)
	}
}
