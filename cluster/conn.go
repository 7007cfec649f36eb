package cluster

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
)

// The peer protocol runs over TCP. A connection opens with a mutual
// challenge-response handshake under the cluster secret:
//
//	client → server  "TGP" version(u16) client-nonce(16) incarnation(u64) name
//	server → client  "TGP" version(u16) server-nonce(16) HMAC(k, "server"|cn|sn)
//	client → server  HMAC(k, "client"|sn|cn|incarnation|name)
//
// Either side closes the connection on a version it does not speak or a MAC
// that does not verify, so a caller without the secret learns nothing and
// changes nothing. The server reads the version first and answers with its
// own on a mismatch, so a node of another version is refused with a log
// line naming both. The client's run (its name and incarnation) is covered
// by its MAC: the server knows whom it answers. After it, every frame is sealed with AES-256-GCM under a
// key per direction derived from the secret and both nonces, with a counter
// as nonce: frames cannot be read, altered, replayed or reordered.

const handshakeMagic = "TGP"

var errAuth = errors.New("peer failed authentication")

// VersionError is a handshake with a peer that speaks another protocol
// version.
type VersionError struct{ Ours, Theirs int }

func (e VersionError) Error() string {
	return fmt.Sprintf("peer speaks protocol version %d, this node %d", e.Theirs, e.Ours)
}

// secureConn is an authenticated, encrypted, framed connection. Writes are
// serialised by the caller (one writer goroutine); so are reads.
type secureConn struct {
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	seal    cipher.AEAD
	open    cipher.AEAD
	sendSeq uint64
	recvSeq uint64
	closeMu sync.Once

	// Scratch for each direction's header and nonce: they go through
	// interfaces (the AEAD, the reader), so on the stack they would be
	// allocated for every frame.
	wHdr, rHdr     [4]byte
	wNonce, rNonce [12]byte
}

// authKey derives the handshake key from the cluster secret.
func authKey(secret []byte) []byte {
	return macOf(secret, []byte("tollgate peer auth v1"))
}

func macOf(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// runBytes encodes a run for the handshake's MAC.
func runBytes(run core.Peer) []byte {
	b := binary.LittleEndian.AppendUint64(nil, run.Inc)
	return append(b, run.Name...)
}

// clientHandshake authenticates conn as a client, the run self.
func clientHandshake(conn net.Conn, key []byte, self core.Peer, deadline time.Time) (*secureConn, error) {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	cn := make([]byte, 16)
	rand.Read(cn)
	name := self.Name[:min(len(self.Name), maxNameBytes)]
	hello := append([]byte(handshakeMagic), byte(ProtocolVersion), byte(ProtocolVersion>>8))
	hello = append(hello, cn...)
	hello = binary.LittleEndian.AppendUint64(hello, self.Inc)
	hello = append(hello, byte(len(name)))
	hello = append(hello, name...)
	if _, err := conn.Write(hello); err != nil {
		return nil, err
	}
	reply := make([]byte, 3+2+16+32)
	if _, err := io.ReadFull(conn, reply[:5]); err != nil {
		return nil, err
	}
	if string(reply[:3]) != handshakeMagic {
		return nil, errAuth
	}
	if v := int(reply[3]) | int(reply[4])<<8; v != ProtocolVersion {
		return nil, VersionError{ProtocolVersion, v}
	}
	if _, err := io.ReadFull(conn, reply[5:]); err != nil {
		return nil, err
	}
	sn := reply[5:21]
	if !hmac.Equal(reply[21:], macOf(key, []byte("server"), cn, sn)) {
		return nil, errAuth
	}
	if _, err := conn.Write(macOf(key, []byte("client"), sn, cn, runBytes(core.Peer{Name: name, Inc: self.Inc}))); err != nil {
		return nil, err
	}
	return newSecureConn(conn, key, cn, sn, true)
}

// serverHandshake authenticates a client on conn and returns its run.
func serverHandshake(conn net.Conn, key []byte, deadline time.Time) (*secureConn, core.Peer, error) {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	head := make([]byte, 3+2+16+8+1)
	if _, err := io.ReadFull(conn, head[:5]); err != nil {
		return nil, core.Peer{}, err
	}
	if string(head[:3]) != handshakeMagic {
		return nil, core.Peer{}, errAuth
	}
	// Answer with our version even on a mismatch, so the client can say
	// which versions disagree.
	reply := append([]byte(handshakeMagic), byte(ProtocolVersion), byte(ProtocolVersion>>8))
	if v := int(head[3]) | int(head[4])<<8; v != ProtocolVersion {
		conn.Write(reply)
		return nil, core.Peer{}, VersionError{ProtocolVersion, v}
	}
	if _, err := io.ReadFull(conn, head[5:]); err != nil {
		return nil, core.Peer{}, err
	}
	cn := head[5:21]
	run := core.Peer{Inc: binary.LittleEndian.Uint64(head[21:29])}
	name := make([]byte, head[29])
	if _, err := io.ReadFull(conn, name); err != nil {
		return nil, core.Peer{}, err
	}
	run.Name = string(name)
	sn := make([]byte, 16)
	rand.Read(sn)
	reply = append(reply, sn...)
	reply = append(reply, macOf(key, []byte("server"), cn, sn)...)
	if _, err := conn.Write(reply); err != nil {
		return nil, core.Peer{}, err
	}
	mac := make([]byte, 32)
	if _, err := io.ReadFull(conn, mac); err != nil {
		return nil, core.Peer{}, err
	}
	if !hmac.Equal(mac, macOf(key, []byte("client"), sn, cn, runBytes(run))) {
		return nil, core.Peer{}, errAuth
	}
	sc, err := newSecureConn(conn, key, cn, sn, false)
	return sc, run, err
}

func newSecureConn(conn net.Conn, key, cn, sn []byte, client bool) (*secureConn, error) {
	c2s, err := newAEAD(macOf(key, []byte("c2s"), cn, sn))
	if err != nil {
		return nil, err
	}
	s2c, err := newAEAD(macOf(key, []byte("s2c"), cn, sn))
	if err != nil {
		return nil, err
	}
	sc := &secureConn{
		conn: conn,
		r:    bufio.NewReaderSize(conn, 64<<10),
		w:    bufio.NewWriterSize(conn, 64<<10),
	}
	if client {
		sc.seal, sc.open = c2s, s2c
	} else {
		sc.seal, sc.open = s2c, c2s
	}
	return sc, nil
}

// writeFrame seals and writes one frame and flushes it.
func (c *secureConn) writeFrame(plain []byte, deadline time.Time) error {
	if len(plain)+c.seal.Overhead() > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(plain), maxFrame)
	}
	nonce, hdr := &c.wNonce, &c.wHdr
	binary.LittleEndian.PutUint64(nonce[4:], c.sendSeq)
	c.sendSeq++
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(plain)+c.seal.Overhead()))
	c.conn.SetWriteDeadline(deadline)
	c.w.Write(hdr[:])
	// Sealed straight into the write buffer's free space (allocating only
	// for a frame larger than it), then written with the header in one
	// system call.
	c.w.Write(c.seal.Seal(c.w.AvailableBuffer(), nonce[:], plain, hdr[:]))
	return c.w.Flush()
}

// readFrame reads and opens one frame into buf's storage.
func (c *secureConn) readFrame(buf []byte) ([]byte, error) {
	hdr := &c.rHdr
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n > maxFrame || n < c.open.Overhead() {
		return nil, fmt.Errorf("frame of %d bytes out of bounds", n)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return nil, err
	}
	nonce := &c.rNonce
	binary.LittleEndian.PutUint64(nonce[4:], c.recvSeq)
	c.recvSeq++
	plain, err := c.open.Open(buf[:0], nonce[:], buf, hdr[:])
	if err != nil {
		return nil, errAuth
	}
	return plain, nil
}

func (c *secureConn) Close() error {
	var err error
	c.closeMu.Do(func() { err = c.conn.Close() })
	return err
}
