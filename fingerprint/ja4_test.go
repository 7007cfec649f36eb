package fingerprint

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"
)

// helloBuilder writes a ClientHello handshake message.
type helloBuilder struct {
	ciphers []uint16
	exts    [][]byte // each a whole extension: type, length, data
}

func u16(v int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }

func (b *helloBuilder) ext(typ int, data []byte) {
	e := append(u16(typ), u16(len(data))...)
	b.exts = append(b.exts, append(e, data...))
}

func (b *helloBuilder) bytes() []byte {
	body := u16(0x0303)                      // legacy_version
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session ID
	body = append(body, u16(2*len(b.ciphers))...)
	for _, c := range b.ciphers {
		body = append(body, u16(int(c))...)
	}
	body = append(body, 1, 0) // compression: null
	var exts []byte
	for _, e := range b.exts {
		exts = append(exts, e...)
	}
	body = append(body, u16(len(exts))...)
	body = append(body, exts...)
	msg := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	return append(msg, body...)
}

func list16(prefixLen int, vs ...int) []byte {
	var b []byte
	for _, v := range vs {
		b = append(b, u16(v)...)
	}
	if prefixLen == 1 {
		return append([]byte{byte(len(b))}, b...)
	}
	return append(u16(len(b)), b...)
}

// TestJA4KnownFingerprint rebuilds the ClientHello of a published Chrome
// fingerprint (t13d1516h2_8daaf6152771_d8a2da3f94cd, whose raw form lists the
// ciphers, extensions and signature algorithms in wire order), with GREASE
// values added as Chrome sends them, and checks the result.
func TestJA4KnownFingerprint(t *testing.T) {
	b := &helloBuilder{ciphers: []uint16{0x2a2a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030,
		0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035}}
	b.ext(0x3a3a, nil) // GREASE
	for _, typ := range []int{0x002d, 0x0033, 0x0010, 0xfe0d, 0x0017, 0x44cd, 0x0000, 0x000b, 0x000a,
		0x002b, 0xff01, 0x0023, 0x0012, 0x0005, 0x000d, 0x001b} {
		var data []byte
		switch typ {
		case 0x0000:
			name := []byte("example.com")
			entry := append([]byte{0}, append(u16(len(name)), name...)...)
			data = append(u16(len(entry)), entry...)
		case 0x0010:
			protos := []byte{2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'}
			data = append(u16(len(protos)), protos...)
		case 0x000d:
			data = list16(2, 0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601)
		case 0x002b:
			data = list16(1, 0x5a5a, 0x0304, 0x0303)
		}
		b.ext(typ, data)
	}
	b.ext(0x4a4a, []byte{0}) // GREASE

	got, err := JA4(b.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if want := "t13d1516h2_8daaf6152771_d8a2da3f94cd"; got != want {
		t.Fatalf("JA4 = %s, want %s", got, want)
	}
}

func TestJA4Parts(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    clientHello
		want string // JA4_a
	}{
		{"no SNI, no ALPN, TLS 1.2", clientHello{version: 0x0303, ciphers: []uint16{0xc02f}}, "t12i010000"},
		{"ALPN not alphanumeric", clientHello{version: 0x0303, alpn: "\xab\xcd"}, "t12i0000ad"},
		{"single character ALPN", clientHello{version: 0x0303, alpn: "h"}, "t12i0000hh"},
		{"unknown version", clientHello{version: 0x0200}, "t00i000000"},
		{"150 ciphers count as 99", clientHello{version: 0x0304, ciphers: make([]uint16, 150)}, "t13i990000"},
	} {
		if a, _, _ := cutTwice(tc.h.ja4()); a != tc.want {
			t.Errorf("%s: JA4_a = %s, want %s", tc.name, a, tc.want)
		}
	}
	// No ciphers and no extensions hash to zeros.
	if _, b, c := cutTwice((&clientHello{version: 0x0303}).ja4()); b != "000000000000" || c != "000000000000" {
		t.Errorf("empty lists: %s %s", b, c)
	}
}

func cutTwice(s string) (a, b, c string) {
	i := slices.Index([]byte(s), '_')
	j := i + 1 + slices.Index([]byte(s[i+1:]), '_')
	return s[:i], s[i+1 : j], s[j+1:]
}

// TestHelloCaptureAgreesWithCryptoTLS captures the ClientHello Go's own TLS
// client sends and checks what the parser read against what the TLS server
// saw in the same handshake.
func TestHelloCaptureAgreesWithCryptoTLS(t *testing.T) {
	clientConn, serverConn := net.Pipe()
	defer clientConn.Close()
	defer serverConn.Close()

	seen := make(chan *tls.ClientHelloInfo, 1)
	capture := &HelloCapture{}
	go func() {
		// Read the first bytes as a listener wrapper would, feeding the
		// capture, then let the TLS server parse the same bytes.
		rec := &recordingConn{Conn: serverConn, capture: capture}
		srv := tls.Server(rec, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			seen <- hi
			return nil, context.Canceled // stop the handshake here
		}})
		srv.Handshake()
	}()
	client := tls.Client(clientConn, &tls.Config{ServerName: "example.com", NextProtos: []string{"h2", "http/1.1"}})
	client.SetDeadline(time.Now().Add(5 * time.Second))
	go client.Handshake()

	hi := <-seen
	if !capture.Done() {
		t.Fatal("the capture did not complete on a whole ClientHello")
	}
	h, err := parseClientHello(capture.hello)
	if err != nil {
		t.Fatal(err)
	}
	notGREASE := func(vs []uint16) []uint16 {
		return slices.DeleteFunc(slices.Clone(vs), isGREASE)
	}
	if !slices.Equal(h.ciphers, notGREASE(hi.CipherSuites)) {
		t.Errorf("ciphers %x, TLS saw %x", h.ciphers, hi.CipherSuites)
	}
	if !slices.Equal(h.extensions, notGREASE(hi.Extensions)) {
		t.Errorf("extensions %x, TLS saw %x", h.extensions, hi.Extensions)
	}
	var sig []uint16
	for _, s := range hi.SignatureSchemes {
		sig = append(sig, uint16(s))
	}
	if !slices.Equal(h.sigAlgs, sig) {
		t.Errorf("signature algorithms %x, TLS saw %x", h.sigAlgs, sig)
	}
	if !slices.Equal(h.versions, notGREASE(hi.SupportedVersions)) || !h.sni || h.alpn != "h2" {
		t.Errorf("versions %x sni %v alpn %q; TLS saw %x %q %q", h.versions, h.sni, h.alpn, hi.SupportedVersions, hi.ServerName, hi.SupportedProtos)
	}
	if fp := capture.JA4(); len(fp) != 36 || fp[:4] != "t13d" || fp[8:10] != "h2" {
		t.Errorf("JA4 of Go's ClientHello = %q", fp)
	}
}

type recordingConn struct {
	net.Conn
	capture *HelloCapture
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.capture.Feed(p[:n])
	return n, err
}

func TestHelloCaptureGivesUpOnOtherTraffic(t *testing.T) {
	c := &HelloCapture{}
	c.Feed([]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"))
	if !c.Done() || c.JA4() != "" {
		t.Error("plain HTTP was taken for a ClientHello")
	}

	c = &HelloCapture{}
	huge := []byte{0x16, 3, 1, 0x40, 0}
	for range 5 {
		c.Feed(append(huge, make([]byte, 0x4000)...))
	}
	if !c.Done() || c.JA4() != "" {
		t.Error("an endless handshake was not given up on")
	}
}

func TestHelloCaptureAcrossRecordsAndReads(t *testing.T) {
	b := &helloBuilder{ciphers: []uint16{0x1301}}
	b.ext(0x002b, list16(1, 0x0304))
	msg := b.bytes()
	// Split the message over two records, and the records over many reads.
	var stream []byte
	for _, frag := range [][]byte{msg[:10], msg[10:]} {
		stream = append(stream, 0x16, 3, 1, byte(len(frag)>>8), byte(len(frag)))
		stream = append(stream, frag...)
	}
	c := &HelloCapture{}
	for i := 0; i < len(stream) && !c.Done(); i += 3 {
		c.Feed(stream[i:min(i+3, len(stream))])
	}
	want, _ := JA4(msg)
	if got := c.JA4(); got == "" || got != want {
		t.Fatalf("JA4 over split records = %q, want %q", got, want)
	}
}

func FuzzJA4(f *testing.F) {
	b := &helloBuilder{ciphers: []uint16{0x1301, 0x0a0a}}
	b.ext(0x0010, []byte{0, 3, 2, 'h', '2'})
	b.ext(0x002b, list16(1, 0x0304))
	f.Add(b.bytes())
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		JA4(msg) // must not panic
		c := &HelloCapture{}
		c.Feed(append([]byte{0x16, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...))
		whole := c.JA4()

		// The same message in one-byte records fed one byte at a time: the
		// same answer while it fits the record bound, and never more work
		// than the bytes fed.
		stream := oneByteRecords(msg)
		c = &HelloCapture{}
		for i := 0; i < len(stream) && !c.Done(); i++ {
			c.Feed(stream[i : i+1])
		}
		if len(stream) <= maxHelloRecords && len(msg) <= 0xffff && c.JA4() != whole {
			t.Errorf("one-byte records give %q, one record %q", c.JA4(), whole)
		}
		if c.work > min(len(stream), maxHelloRecords) {
			t.Errorf("examined %d bytes of %d", c.work, len(stream))
		}
	})
}

// oneByteRecords wraps msg in TLS handshake records of one byte each.
func oneByteRecords(msg []byte) []byte {
	out := make([]byte, 0, 6*len(msg))
	for _, b := range msg {
		out = append(out, 0x16, 3, 1, 0, 1, b)
	}
	return out
}

// TestHelloCaptureWorkIsLinear feeds ClientHellos cut into one-byte records
// one byte at a time, the shape that made a re-parsing capture quadratic,
// and counts the bytes the parser examines: each byte fed once at most.
func TestHelloCaptureWorkIsLinear(t *testing.T) {
	b := &helloBuilder{ciphers: []uint16{0x1301}}
	b.ext(0x002b, list16(1, 0x0304))
	b.ext(0x0015, make([]byte, 2000)) // padding
	msg := b.bytes()
	stream := oneByteRecords(msg)
	c := &HelloCapture{}
	for i := range stream {
		c.Feed(stream[i : i+1])
	}
	want, _ := JA4(msg)
	if got := c.JA4(); got == "" || got != want {
		t.Fatalf("JA4 over one-byte records = %q, want %q", got, want)
	}
	if c.work > len(stream) {
		t.Errorf("examined %d bytes to parse %d", c.work, len(stream))
	}

	// A 16 KB ClientHello in one-byte records is more than the capture
	// reads: it gives up after the bound, having looked at each byte once.
	b.exts = b.exts[:1]
	b.ext(0x0015, make([]byte, MaxClientHello-200))
	stream = oneByteRecords(b.bytes())
	c = &HelloCapture{}
	fed := 0
	for i := 0; i < len(stream) && !c.Done(); i++ {
		c.Feed(stream[i : i+1])
		fed++
	}
	if !c.Done() || c.JA4() != "" {
		t.Fatal("a ClientHello over the record bound was not given up on")
	}
	if c.work > maxHelloRecords || fed > maxHelloRecords+1 {
		t.Errorf("examined %d bytes (fed %d) for a bound of %d", c.work, fed, maxHelloRecords)
	}
	if cap(c.msg) > MaxClientHello {
		t.Errorf("buffered %d bytes", cap(c.msg))
	}
}
