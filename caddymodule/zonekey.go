package caddymodule

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// KeyGlobal is the key of a zone whose budget every request shares: the
// explicit spelling of a key without placeholders.
const KeyGlobal = "global"

// emptyPart stands in, while a key renders, for a placeholder that renders
// empty or is not known: a key that holds it falls back to the client ID.
const emptyPart = "\x00"

// validateKey checks a zone's key: empty (the client ID), KeyGlobal, or
// text with at least one whole placeholder and balanced braces. A key
// without a placeholder (`key X-API-Key`, a brace left out) would put every
// request in one budget, which is almost never what was meant.
func validateKey(zone, key string) error {
	if key == "" || key == KeyGlobal {
		return nil
	}
	open, closed := strings.Count(key, "{"), strings.Count(key, "}")
	switch {
	case open != closed:
		return fmt.Errorf("zone %q: key %q has unbalanced braces: write each placeholder whole, e.g. {http.request.header.X-API-Key}", zone, key)
	case !hasPlaceholder(key):
		return fmt.Errorf("zone %q: key %q has no placeholder, so every request would share one budget: use a placeholder such as {http.request.header.%s}, or write `key %s` for one budget shared by all requests", zone, key, strings.Trim(key, "{}"), KeyGlobal)
	}
	return nil
}

// hasPlaceholder reports whether s holds a non-empty {…} with no brace in it.
func hasPlaceholder(s string) bool {
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			return false
		}
		s = s[i+1:]
		j := strings.IndexAny(s, "{}")
		if j > 0 && s[j] == '}' {
			return true
		}
	}
}

// renderKey renders z's key for q, and reports false if any placeholder in
// it rendered empty (or is unknown): the zone then counts by the client ID
// instead, so such requests never share one budget. The fallback is
// counted and logged.
func (z *Zone) renderKey(q *request) (string, bool) {
	s := q.replacer().ReplaceAll(z.Key, emptyPart)
	if strings.Contains(s, emptyPart) {
		z.emptyKey.report(z.Name)
		return "", false
	}
	return s, true
}

var nopLogger = zap.NewNop()

// emptyKeyReport counts a zone's requests whose key rendered empty, and
// logs the first one.
type emptyKeyReport struct {
	logger  *zap.Logger
	counter prometheus.Counter
	logged  atomic.Bool
}

func (e *emptyKeyReport) report(zone string) {
	if e == nil {
		return
	}
	if e.counter != nil {
		e.counter.Inc()
	}
	if !e.logged.Swap(true) {
		e.logger.Warn("a zone's key rendered empty; counting such requests by the client ID instead (logged once per zone; see tollgate_empty_keys_total)",
			zap.String("zone", zone))
	}
}
