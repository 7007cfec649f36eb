// Package fingerprint derives who a request comes from without keeping any
// raw IP: a signed session cookie when the client has one, else a hash of
// light request signals blended with a keyed hash of the client's IP prefix.
// It also watches IP prefixes for many cookie-less fingerprints at once (IP
// pressure). It knows nothing of Caddy.
package fingerprint
