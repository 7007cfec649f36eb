package fingerprint

import (
	"net/http"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// Signals are the request headers a fingerprint is made of: ones a browser
// sends alike on every request to a site. Accept and Accept-Encoding are
// left out on purpose: browsers vary them by resource type (images, scripts,
// and media range requests that ask for "identity"), which would give one
// browser several fingerprints.
var Signals = []string{
	"User-Agent",
	"Accept-Language",
	"Sec-Ch-Ua",
	"Sec-Ch-Ua-Mobile",
	"Sec-Ch-Ua-Platform",
}

// MaxSignalLen is how much of each signal is hashed, so that huge headers
// cost no more than ordinary ones.
const MaxSignalLen = 256

// fingerprintOf hashes r's signals and, when the connection is TLS and its
// ClientHello was captured, its JA4 fingerprint. A signal that is absent
// hashes differently from one that is present but empty.
func fingerprintOf(h keyhash.Hasher, r *http.Request, ja4 string) uint64 {
	acc := uint64(len(Signals))
	for i, name := range Signals {
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
