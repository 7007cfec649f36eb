package limiter

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The binary form of States, for moving them between nodes and for
// snapshots: a count, then each state as kind, key, stamp, expires, cur,
// prev (little-endian), and for a grant its version, creation, amount, use
// and use version, for a lease list its leases.

// maxLeasesPerState bounds the leases one state may carry when read.
const maxLeasesPerState = 1024

// ErrTruncated is returned for input that ends inside a state.
var ErrTruncated = errors.New("truncated states")

// AppendStates appends states in binary form to b.
func AppendStates(b []byte, states []State) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(states)))
	for _, s := range states {
		b = append(b, s.Kind)
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Key))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Stamp))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Expires))
		b = binary.LittleEndian.AppendUint32(b, s.Cur)
		b = binary.LittleEndian.AppendUint32(b, s.Prev)
		switch s.Kind {
		case KindGrant:
			b = append(b, s.Grant.Version[:]...)
			b = binary.LittleEndian.AppendUint64(b, uint64(s.Grant.Created))
			b = binary.LittleEndian.AppendUint64(b, uint64(s.Grant.Amount))
			b = binary.LittleEndian.AppendUint64(b, uint64(s.Used))
			b = append(b, s.UsedVersion[:]...)
		case KindLeases:
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Leases)))
			for _, l := range s.Leases {
				b = binary.LittleEndian.AppendUint64(b, l.ID)
				b = binary.LittleEndian.AppendUint64(b, uint64(l.Expires))
			}
		}
	}
	return b
}

// stateHead is the size of a state's common part.
const stateHead = 1 + 8 + 8 + 8 + 4 + 4

// DecodeStates reads states written by AppendStates, at most limit of them,
// and returns them with the rest of b. Malformed input is an error, never a
// panic or an allocation larger than the input.
func DecodeStates(b []byte, limit int) ([]State, []byte, error) {
	if len(b) < 4 {
		return nil, b, ErrTruncated
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > limit || n*stateHead > len(b) {
		return nil, b, fmt.Errorf("%d states: more than %d or than the input holds", n, limit)
	}
	out := make([]State, 0, n)
	for range n {
		if len(b) < stateHead {
			return nil, b, ErrTruncated
		}
		s := State{
			Kind:    b[0],
			Key:     Key(binary.LittleEndian.Uint64(b[1:])),
			Stamp:   int64(binary.LittleEndian.Uint64(b[9:])),
			Expires: int64(binary.LittleEndian.Uint64(b[17:])),
			Cur:     binary.LittleEndian.Uint32(b[25:]),
			Prev:    binary.LittleEndian.Uint32(b[29:]),
		}
		b = b[stateHead:]
		switch s.Kind {
		case KindGrant:
			if len(b) < 16+8+8+8+16 {
				return nil, b, ErrTruncated
			}
			copy(s.Grant.Version[:], b)
			s.Grant.Created = int64(binary.LittleEndian.Uint64(b[16:]))
			s.Grant.Amount = int64(binary.LittleEndian.Uint64(b[24:]))
			s.Grant.Expires = s.Expires
			s.Used = int64(binary.LittleEndian.Uint64(b[32:]))
			copy(s.UsedVersion[:], b[40:56])
			b = b[56:]
		case KindLeases:
			if len(b) < 4 {
				return nil, b, ErrTruncated
			}
			count := int(binary.LittleEndian.Uint32(b))
			b = b[4:]
			if count > maxLeasesPerState || count*16 > len(b) {
				return nil, b, fmt.Errorf("%d leases in one state", count)
			}
			for range count {
				s.Leases = append(s.Leases, Lease{ID: binary.LittleEndian.Uint64(b), Expires: int64(binary.LittleEndian.Uint64(b[8:]))})
				b = b[16:]
			}
		}
		out = append(out, s)
	}
	return out, b, nil
}
