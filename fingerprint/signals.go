package fingerprint

import (
	"net/http"
	"slices"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// signals are the request headers a fingerprint is made of: ones a browser
// sends alike on every request to a site. Accept and Accept-Encoding are
// left out on purpose: browsers vary them by resource type (images, scripts,
// and media range requests that ask for "identity"), which would give one
// browser several fingerprints.
var signals = [...]string{
	"User-Agent",
	"Accept-Language",
	"Sec-Ch-Ua",
	"Sec-Ch-Ua-Mobile",
	"Sec-Ch-Ua-Platform",
}

// Signals returns the request headers a fingerprint is made of, in the
// order they are hashed.
func Signals() []string { return slices.Clone(signals[:]) }

// MaxSignalLen is how much of each signal is hashed, so that huge headers
// cost no more than ordinary ones.
const MaxSignalLen = 256

// fingerprintOf hashes r's signals and, when the connection is TLS and its
// ClientHello was captured, its JA4 fingerprint. A signal that is absent
// hashes differently from one that is present but empty.
func fingerprintOf(h keyhash.Hasher, r *http.Request, ja4 string) uint64 {
	acc := uint64(len(signals))
	for i, name := range signals {
		v, present := r.Header[name]
		var part uint64
		if present && len(v) > 0 {
			s := v[0]
			if len(s) > MaxSignalLen {
				s = s[:MaxSignalLen]
			}
			part = h.String(s)
		} else {
			part = uint64(i) + 0x9e3779b97f4a7c15 // absent
		}
		acc = keyhash.Mix((acc ^ part) + uint64(i))
	}
	if ja4 != "" {
		acc = keyhash.Mix(acc ^ h.String(ja4))
	}
	return acc
}
