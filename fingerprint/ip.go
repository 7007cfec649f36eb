package fingerprint

import (
	"fmt"
	"net/netip"
)

// Default prefix lengths IP addresses are grouped by: one IPv4 address, one
// IPv6 /64 (what a single subscriber is usually given).
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// Prefixes says how many leading bits of an address identify one client
// network.
type Prefixes struct {
	IPv4 int // 1 to 32; zero means DefaultIPv4Prefix
	IPv6 int // 1 to 128; zero means DefaultIPv6Prefix
}

// Validate reports a prefix length out of range.
func (p Prefixes) Validate() error {
	if p.IPv4 < 0 || p.IPv4 > 32 {
		return fmt.Errorf("IPv4 prefix length %d: must be 1 to 32", p.IPv4)
	}
	if p.IPv6 < 0 || p.IPv6 > 128 {
		return fmt.Errorf("IPv6 prefix length %d: must be 1 to 128", p.IPv6)
	}
	return nil
}

// Prefix normalises a client IP and returns the network it belongs to:
// an IPv4-mapped IPv6 address counts as IPv4, a zone (fe80::1%eth0) is
// dropped. ok is false for anything that is not an IP address.
func (p Prefixes) Prefix(ip string) (prefix netip.Prefix, ok bool) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.Prefix{}, false
	}
	addr = addr.WithZone("").Unmap()
	bits := p.IPv6
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if addr.Is4() {
		bits = p.IPv4
		if bits == 0 {
			bits = DefaultIPv4Prefix
		}
	}
	prefix, err = addr.Prefix(bits)
	return prefix, err == nil
}
