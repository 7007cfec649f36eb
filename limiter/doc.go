// Package limiter is Tollgate's single-node rate-limit engine: exact counting
// with one writer per key, time passed in by the caller, memory bounded.
//
// It knows nothing of HTTP, Caddy or the network. The owner node of a key runs
// an Engine for it; the fallback path runs a second Engine with tighter limits.
package limiter
