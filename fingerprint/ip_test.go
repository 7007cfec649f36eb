package fingerprint

import "testing"

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
