package caddymodule

import "testing"

// A tier table with a limit below 1 is refused wherever it enters from
// another node or from storage: no engine ever sees a limit of 0.
func TestTierTablesWithALimitBelowOneAreRefused(t *testing.T) {
	for _, raw := range []string{`{"api":{"pro":0}}`, `{"api":{"pro":-3}}`, `not json`} {
		if err := checkSharedValue(tiersSharedName, []byte(raw)); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
	if err := checkSharedValue(tiersSharedName, []byte(`{"api":{"pro":1}}`)); err != nil {
		t.Errorf("a limit of 1 refused: %v", err)
	}
}
