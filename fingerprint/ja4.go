package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
)

// MaxClientHello bounds how many bytes of a connection's start a HelloCapture
// keeps: a ClientHello larger than this is not fingerprinted.
const MaxClientHello = 16 << 10

// maxHelloRecords bounds the raw bytes a HelloCapture reads before giving
// up: the largest ClientHello it fingerprints plus four record headers. A
// ClientHello cut into smaller records than that allows is not fingerprinted.
const maxHelloRecords = MaxClientHello + 5*4

// HelloCapture collects the TLS ClientHello from the first bytes a client
// sends, record by record, so a JA4 fingerprint can be computed without
// touching the TLS library. Feed it what the connection reads until Done.
//
// It parses incrementally: each byte fed is looked at once, whatever the
// record and read boundaries, so the work per connection is linear in what
// the client sends and bounded by maxHelloRecords. It buffers at most the
// ClientHello itself (MaxClientHello bytes) and one record header.
// It is not safe for concurrent use.
type HelloCapture struct {
	hdr    [5]byte // the record header being read
	hdrN   int     // bytes of hdr read so far
	left   int     // payload bytes of the current record still to come
	raw    int     // bytes fed so far, headers included
	msg    []byte  // the handshake message reassembled so far
	hello  []byte  // the complete ClientHello, once there is one
	failed bool
	work   int // bytes examined, for tests that bound the parse work
}

// Feed adds bytes read from the connection.
func (c *HelloCapture) Feed(p []byte) {
	for len(p) > 0 && !c.Done() {
		if c.raw >= maxHelloRecords {
			c.fail()
			return
		}
		n := c.step(p[:min(len(p), maxHelloRecords-c.raw)])
		c.raw += n
		c.work += n
		p = p[n:]
	}
}

// step consumes one record header or one record payload, or as much of it
// as p holds, and returns how many bytes it consumed.
func (c *HelloCapture) step(p []byte) int {
	if c.left == 0 {
		n := copy(c.hdr[c.hdrN:], p)
		if c.hdrN += n; c.hdrN < len(c.hdr) {
			return n
		}
		c.hdrN = 0
		if c.hdr[0] != 0x16 { // not a handshake record
			c.fail()
		}
		c.left = int(c.hdr[3])<<8 | int(c.hdr[4])
		return n
	}
	n := min(c.left, len(p))
	c.left -= n
	if c.msg == nil {
		c.msg = make([]byte, 0, min(4+c.left+n, MaxClientHello))
	}
	c.msg = append(c.msg, p[:n]...)
	if c.msg[0] != 1 { // not a ClientHello
		c.fail()
		return n
	}
	if len(c.msg) >= 4 {
		size := 4 + (int(c.msg[1])<<16 | int(c.msg[2])<<8 | int(c.msg[3]))
		switch {
		case size > MaxClientHello:
			c.fail()
		case len(c.msg) >= size:
			c.hello = c.msg[:size]
			c.msg = nil
		}
	}
	return n
}

// Done reports whether the capture has either a complete ClientHello or
// has given up (not TLS, or too large).
func (c *HelloCapture) Done() bool { return c.hello != nil || c.failed }

// JA4 returns the JA4 fingerprint of the captured ClientHello, or "" if
// there is none.
func (c *HelloCapture) JA4() string {
	if c.hello == nil {
		return ""
	}
	fp, err := JA4(c.hello)
	if err != nil {
		return ""
	}
	return fp
}

func (c *HelloCapture) fail() {
	c.failed = true
	c.msg = nil
}

var errShortHello = errors.New("truncated ClientHello")

// JA4 computes the JA4 fingerprint (FoxIO's JA4, TLS over TCP) of a
// ClientHello handshake message, starting at its handshake type byte.
func JA4(hello []byte) (string, error) {
	h, err := parseClientHello(hello)
	if err != nil {
		return "", err
	}
	return h.ja4(), nil
}

// clientHello is what JA4 needs of a ClientHello, in wire order, GREASE
// values removed.
type clientHello struct {
	version    uint16   // legacy_version
	versions   []uint16 // supported_versions extension
	ciphers    []uint16
	extensions []uint16
	sigAlgs    []uint16
	sni        bool
	alpn       string // first ALPN protocol
}

// reader walks a byte slice; any read past its end sets err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errShortHello
		r.b = nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int { b := r.take(1); return int(byteAt(b, 0)) }
func (r *reader) u16() int {
	b := r.take(2)
	return int(byteAt(b, 0))<<8 | int(byteAt(b, 1))
}
func (r *reader) u24() int {
	b := r.take(3)
	return int(byteAt(b, 0))<<16 | int(byteAt(b, 1))<<8 | int(byteAt(b, 2))
}

func byteAt(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// uint16s reads a list of 16-bit values n bytes long, dropping GREASE.
func uint16s(b []byte) []uint16 {
	var out []uint16
	for i := 0; i+1 < len(b); i += 2 {
		if v := uint16(b[i])<<8 | uint16(b[i+1]); !isGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// isGREASE reports the reserved values of RFC 8701 (0x0a0a, 0x1a1a, …).
func isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

func parseClientHello(msg []byte) (*clientHello, error) {
	r := &reader{b: msg}
	if r.u8() != 1 {
		return nil, errors.New("not a ClientHello")
	}
	r = &reader{b: r.take(r.u24())}
	h := &clientHello{version: uint16(r.u16())}
	r.take(32)     // random
	r.take(r.u8()) // legacy_session_id
	h.ciphers = uint16s(r.take(r.u16()))
	r.take(r.u8()) // legacy_compression_methods
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) == 0 {
		return h, nil // no extensions
	}
	ext := &reader{b: r.take(r.u16())}
	for ext.err == nil && len(ext.b) > 0 {
		typ := uint16(ext.u16())
		data := ext.take(ext.u16())
		if ext.err != nil {
			break
		}
		if isGREASE(typ) {
			continue
		}
		h.extensions = append(h.extensions, typ)
		switch typ {
		case 0x0000: // server_name
			h.sni = true
		case 0x0010: // application_layer_protocol_negotiation
			d := &reader{b: data}
			list := &reader{b: d.take(d.u16())}
			if first := list.take(list.u8()); list.err == nil {
				h.alpn = string(first)
			}
		case 0x000d: // signature_algorithms
			d := &reader{b: data}
			h.sigAlgs = uint16s(d.take(d.u16()))
		case 0x002b: // supported_versions
			d := &reader{b: data}
			h.versions = uint16s(d.take(d.u8()))
		}
	}
	if ext.err != nil || r.err != nil {
		return nil, errShortHello
	}
	return h, nil
}

// ja4 renders the fingerprint: a_b_c, where a is protocol, version, SNI,
// counts and ALPN; b hashes the sorted ciphers; c hashes the sorted
// extensions (without SNI and ALPN) and the signature algorithms.
func (h *clientHello) ja4() string {
	version := h.version
	if len(h.versions) > 0 {
		version = slices.Max(h.versions)
	}
	a := make([]byte, 0, 10)
	a = append(a, 't')
	a = append(a, tlsVersionCode(version)...)
	if h.sni {
		a = append(a, 'd')
	} else {
		a = append(a, 'i')
	}
	a = appendCount(a, len(h.ciphers))
	a = appendCount(a, len(h.extensions))
	a = append(a, alpnCode(h.alpn)...)

	ciphers := slices.Sorted(slices.Values(h.ciphers))
	var exts []uint16
	for _, e := range h.extensions {
		if e != 0x0000 && e != 0x0010 {
			exts = append(exts, e)
		}
	}
	slices.Sort(exts)

	b := truncatedHash(hexList(nil, ciphers))
	c := "000000000000"
	if len(exts) > 0 {
		in := hexList(nil, exts)
		if len(h.sigAlgs) > 0 {
			in = hexList(append(in, '_'), h.sigAlgs)
		}
		c = truncatedHash(in)
	}
	return string(a) + "_" + b + "_" + c
}

func tlsVersionCode(v uint16) string {
	switch v {
	case 0x0304:
		return "13"
	case 0x0303:
		return "12"
	case 0x0302:
		return "11"
	case 0x0301:
		return "10"
	case 0x0300:
		return "s3"
	case 0x0002:
		return "s2"
	}
	return "00"
}

func appendCount(b []byte, n int) []byte {
	n = min(n, 99)
	if n < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// alpnCode is the first and last character of the first ALPN protocol, or
// of its hex form when either is not alphanumeric; "00" without ALPN.
func alpnCode(p string) string {
	if p == "" {
		return "00"
	}
	first, last := p[0], p[len(p)-1]
	if isAlnum(first) && isAlnum(last) {
		return string([]byte{first, last})
	}
	x := hex.EncodeToString([]byte(p))
	return string([]byte{x[0], x[len(x)-1]})
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// hexList appends vs as comma-separated four-digit lowercase hex.
func hexList(b []byte, vs []uint16) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, hex.EncodeToString([]byte{byte(v >> 8), byte(v)})...)
	}
	return b
}

// truncatedHash is the first 12 hex digits of SHA-256, or twelve zeros for
// empty input.
func truncatedHash(in []byte) string {
	if len(in) == 0 {
		return "000000000000"
	}
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:6])
}
