package adminapi

import (
	"fmt"
	"strconv"
	"strings"
)

// HashedPrefix starts a hashed ID: a key as Tollgate's logs print it, "h:"
// and the 16 hex digits of its keyed hash. Every route that takes a key
// takes its hashed ID too, so an operator looks up what the logs show
// without putting a raw key in a URL that Caddy's admin log records; the
// lists show hashed IDs only.
const HashedPrefix = "h:"

// HashRequest is the body of POST /tollgate/hash: a raw key whose hashed
// ID a client wants, so that it can look the key up, reset it or show its
// grant by that ID, without the raw key in a URL (Caddy's admin log
// records every URL it is asked).
type HashRequest struct {
	// Key is the raw key, as a zone renders it. A hashed ID or a network
	// ID is answered as it is.
	Key string `json:"key"`
}

// HashAnswer is what POST /tollgate/hash answers.
type HashAnswer struct {
	// ID is the key's hashed ID (see HashedID), as the logs print it and
	// every route takes it.
	ID string `json:"id"`
}

// HashedID renders a key's hash as the logs print it.
func HashedID(hash uint64) string { return fmt.Sprintf("%s%016x", HashedPrefix, hash) }

// ParseHashedID reads a hashed ID; ok is false when id is not one, and then
// it is a raw key.
func ParseHashedID(id string) (hash uint64, ok bool) {
	return parseHex(id, HashedPrefix)
}

// networkPrefix starts a network ID.
const networkPrefix = "n:"

// NetworkID renders an IP network's keyed hash as {http.tollgate.network}
// does: "n:" and 16 hex digits. GET /tollgate/clients/{id} of a network ID
// shows that network's budgets for requests without a session.
func NetworkID(hash uint64) string { return fmt.Sprintf("%s%016x", networkPrefix, hash) }

// ParseNetworkID reads a network ID; ok is false when id is not one.
func ParseNetworkID(id string) (hash uint64, ok bool) {
	return parseHex(id, networkPrefix)
}

// parseHex reads prefix and 16 hex digits.
func parseHex(id, prefix string) (uint64, bool) {
	digits, ok := strings.CutPrefix(id, prefix)
	if !ok || len(digits) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 16, 64)
	return n, err == nil
}
