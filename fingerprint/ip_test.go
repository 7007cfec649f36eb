package fingerprint

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestPrefixNormalisation(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		p    Prefixes
		want string // "" for not an IP
	}{
		{"203.0.113.7", Prefixes{}, "203.0.113.7/32"},
		{"203.0.113.7", Prefixes{IPv4: 24}, "203.0.113.0/24"},
		{"2001:db8:1:2:3:4:5:6", Prefixes{}, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", Prefixes{IPv6: 48}, "2001:db8:1::/48"},
		{"2001:DB8:1:2::1", Prefixes{}, "2001:db8:1:2::/64"},
		{"::ffff:203.0.113.7", Prefixes{}, "203.0.113.7/32"}, // mapped: counted as IPv4
		{"::ffff:203.0.113.7", Prefixes{IPv4: 16}, "203.0.0.0/16"},
		{"fe80::1%eth0", Prefixes{}, "fe80::/64"}, // zone dropped
		{"fe80::1%25eth0", Prefixes{IPv6: 128}, "fe80::1/128"},
		{"::1", Prefixes{}, "::/64"},
		{"", Prefixes{}, ""},
		{"203.0.113", Prefixes{}, ""},
		{"203.0.113.7:443", Prefixes{}, ""},
		{"[2001:db8::1]", Prefixes{}, ""},
		{"not an ip", Prefixes{}, ""},
		{"203.0.113.7, 198.51.100.1", Prefixes{}, ""},
		{"0x7f.1", Prefixes{}, ""},
	} {
		got, ok := tc.p.Prefix(tc.ip)
		switch {
		case tc.want == "" && ok:
			t.Errorf("Prefix(%q) = %v; want not an IP", tc.ip, got)
		case tc.want != "" && (!ok || got.String() != tc.want):
			t.Errorf("Prefix(%q) with %+v = %v, %v; want %s", tc.ip, tc.p, got, ok, tc.want)
		}
	}
}

func TestPrefixesValidate(t *testing.T) {
	for _, p := range []Prefixes{{IPv4: 33}, {IPv4: -1}, {IPv6: 129}, {IPv6: -8}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Prefixes{IPv4: 24, IPv6: 56}).Validate(); err != nil {
		t.Error(err)
	}
}

// parseIPv4 reads what netip.ParseAddr reads, the same way, or leaves it
// to ParseAddr: never a different address, never an address ParseAddr
// refuses.
func TestParseIPv4IsParseAddr(t *testing.T) {
	inputs := []string{
		"0.0.0.0", "1.2.3.4", "255.255.255.255", "198.51.100.7", "10.0.0.1",
		"256.1.1.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "1..2.3", ".1.2.3", "1.2.3.",
		"", "1.2.3.4 ", " 1.2.3.4", "1.2.3.4%eth0", "::ffff:1.2.3.4", "::1", "2001:db8::1",
		"1.2.3.4:80", "1.2.3.-4", "1.2.3.999", "00.0.0.0", "0.0.0.00", "1.2.3.25a",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789..:a"
	for range 100000 {
		b := make([]byte, 1+rng.IntN(16))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for range 10000 {
		inputs = append(inputs, fmt.Sprintf("%d.%d.%d.%d", rng.IntN(300), rng.IntN(256), rng.IntN(256), rng.IntN(260)))
	}
	for _, in := range inputs {
		got, ok := parseIPv4(in)
		want, err := netip.ParseAddr(in)
		if ok && (err != nil || got != want) {
			t.Fatalf("parseIPv4(%q) = %v; netip.ParseAddr: %v, %v", in, got, want, err)
		}
		if !ok && err == nil && want.Is4() && want.Zone() == "" && want.String() == in {
			t.Errorf("parseIPv4(%q) left a canonical IPv4 address to ParseAddr", in)
		}
	}
}
