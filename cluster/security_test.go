package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

func gossipKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestNodesWithoutTheGossipKeyCannotJoin(t *testing.T) {
	withKey := func(key []byte) Config {
		c := testConfig()
		c.GossipKey = key
		return c
	}
	a := startNode(t, withKey(gossipKey(1)))
	b := startNode(t, withKey(gossipKey(1)), a.GossipAddr())
	waitConverged(t, []*Node{a, b}, 2)

	noKey := startNode(t, withKey(nil), a.GossipAddr())
	wrongKey := startNode(t, withKey(gossipKey(2)), a.GossipAddr())
	time.Sleep(time.Second) // give them every chance to get in
	for _, n := range []*Node{a, b} {
		if got := n.Ring().Len(); got != 2 {
			t.Errorf("%s sees %d members; want 2 (strangers kept out)", n.Name(), got)
		}
	}
	// They joined nobody: within the join wait they count nothing as
	// owners (their rings are empty), after it only themselves.
	for _, n := range []*Node{noKey, wrongKey} {
		if got := n.Ring().Len(); got > 1 {
			t.Errorf("a node without the key sees %d members; want at most itself", got)
		}
	}
}

func TestPeerCallsWithoutTheSecretAreRejected(t *testing.T) {
	nodes := startNodes(t, 2)
	owner := nodes[1]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	for range 5 {
		takeVia(nodes[0], key, limitOf(10))
	}
	count := func() uint32 {
		var cur uint32
		owner.engine.Range(time.Now(), func(s limiter.State) bool {
			if s.Key == key {
				cur = s.Cur
			}
			return true
		})
		return cur
	}
	if count() != 5 {
		t.Fatalf("count %d before the attempts; want 5", count())
	}

	attempt := func(name string, send func(net.Conn)) {
		conn, err := net.Dial("tcp", owner.PeerAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		send(conn)
		// The node hangs up at once, or when its 2s handshake deadline
		// passes; a reset counts as hanging up.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the node kept the connection open", name)
		}
		if len(got) > len(handshakeMagic)+2+16+32 {
			t.Errorf("%s: the node answered %d bytes, more than its handshake", name, len(got))
		}
	}
	// A reset frame with no handshake at all.
	attempt("no handshake", func(c net.Conn) {
		e := &encoder{}
		e.u8(msgReset)
		e.u32(1)
		encodeKeys(e, []limiter.Key{key})
		c.Write(append([]byte{byte(len(e.b)), 0, 0, 0}, e.b...))
	})
	// A handshake under the wrong secret, then a reset.
	attempt("wrong secret", func(c net.Conn) {
		sc, err := clientHandshake(c, authKey([]byte("not the cluster secret, but 32+ bytes long")), core.Peer{Name: "intruder", Inc: 1}, time.Now().Add(time.Second))
		if err == nil {
			e := &encoder{}
			e.u8(msgReset)
			e.u32(1)
			encodeKeys(e, []limiter.Key{key})
			sc.writeFrame(e.b, time.Now().Add(time.Second))
			t.Error("a handshake under the wrong secret succeeded")
		}
	})
	// Another protocol version.
	attempt("other version", func(c net.Conn) {
		c.Write(append([]byte(handshakeMagic), 9, 0))
		c.Write(make([]byte, 17))
	})
	// Garbage.
	attempt("garbage", func(c net.Conn) { c.Write(bytes.Repeat([]byte{0xff}, 4096)) })

	if got := count(); got != 5 {
		t.Fatalf("count %d after the attempts; want 5 (nothing changed)", got)
	}
	// The cluster itself still works.
	if ok, src := takeVia(nodes[0], key, limitOf(10)); !ok || src != SourcePeer {
		t.Fatalf("a member's call after the attempts: %v %v", ok, src)
	}
}

func TestFramesCannotBeReplayedOrAltered(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	key := authKey(testSecret)
	done := make(chan *secureConn, 1)
	go func() {
		sc, _, _ := serverHandshake(b, key, time.Now().Add(time.Second))
		done <- sc
	}()
	client, err := clientHandshake(a, key, core.Peer{Name: "client", Inc: 1}, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	server := <-done
	if server == nil {
		t.Fatal("handshake failed")
	}
	// Capture one sealed frame as it crosses the wire.
	var wire bytes.Buffer
	client.w.Reset(&wire)
	client.writeFrame([]byte("take one"), time.Time{})
	frame := wire.Bytes()

	feed := func(b []byte) error {
		server.r.Reset(bytes.NewReader(b))
		_, err := server.readFrame(nil)
		return err
	}
	if err := feed(frame); err != nil {
		t.Fatalf("the genuine frame: %v", err)
	}
	if err := feed(frame); err == nil {
		t.Error("a replayed frame was accepted")
	}
	altered := bytes.Clone(frame)
	altered[len(altered)-1] ^= 1
	client.writeFrame([]byte("take two"), time.Time{})
	if err := feed(altered); err == nil {
		t.Error("an altered frame was accepted")
	}
}

// A peer of the protocol version before this one (which does not say
// which counters are their run's last word, and would weigh them as
// copies) is refused on both sides of the handshake, naming both
// versions, and its metadata marks it incompatible.
func TestAPeerOfTheEarlierProtocolVersionIsRefused(t *testing.T) {
	earlier := ProtocolVersion - 1
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errs := make(chan error, 1)
	go func() {
		_, _, err := serverHandshake(b, authKey(testSecret), time.Now().Add(time.Second))
		errs <- err
	}()
	a.Write(append([]byte(handshakeMagic), byte(earlier), byte(earlier>>8)))
	reply := make([]byte, 5)
	if _, err := io.ReadFull(a, reply); err != nil {
		t.Fatalf("no answer to the earlier version: %v", err)
	}
	if v := int(reply[3]) | int(reply[4])<<8; v != ProtocolVersion {
		t.Errorf("the server answered version %d; want its own, %d", v, ProtocolVersion)
	}
	var v VersionError
	if err := <-errs; !errors.As(err, &v) || v != (VersionError{Ours: ProtocolVersion, Theirs: earlier}) {
		t.Errorf("the server's handshake with version %d: %v", earlier, err)
	}

	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	go func() {
		io.ReadFull(d, make([]byte, 3+2+16+8+1+len("client"))) // the client's hello
		d.Write(append([]byte(handshakeMagic), byte(earlier), byte(earlier>>8)))
	}()
	_, err := clientHandshake(c, authKey(testSecret), core.Peer{Name: "client", Inc: 1}, time.Now().Add(time.Second))
	if !errors.As(err, &v) || v != (VersionError{Ours: ProtocolVersion, Theirs: earlier}) {
		t.Errorf("the client's handshake with a server of version %d: %v", earlier, err)
	}

	m, err := decodeMeta([]byte{byte(earlier), 0})
	if err != nil {
		t.Fatalf("metadata of version %d: %v", earlier, err)
	}
	if err := (&Node{}).compatible(m); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("a node of version %d is compatible: %v", earlier, err)
	}
}

// recorder is a slog handler that keeps records.
type recorder struct {
	mu      sync.Mutex
	records []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	r.mu.Lock()
	r.records = append(r.records, line)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) find(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.records {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func TestNodeWithOtherRingSettingsIsRefusedWithALogLine(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig()
	cfg.Logger = slog.New(rec)
	a := startNode(t, cfg)
	other := testConfig()
	other.Secret = []byte("a different cluster secret, 32+ bytes long")
	b := startNode(t, other, a.GossipAddr())
	eventually(t, 5*time.Second, "a log line refusing the other node", func() bool {
		return rec.find("refusing node") != ""
	})
	line := rec.find("refusing node")
	if !strings.Contains(line, b.Name()) || !strings.Contains(line, "ring settings differ") {
		t.Errorf("log line %q does not name the node and the reason", line)
	}
	time.Sleep(300 * time.Millisecond)
	if a.Ring().Len() != 1 {
		t.Errorf("the refused node is in the ring of %d", a.Ring().Len())
	}
}

// The peer port is open to anyone who can reach it: strangers holding
// connections open without a handshake take at most a bounded number of
// the node's goroutines (the rest are hung up on at once), a flood of
// failed handshakes writes a few log lines that count them rather than
// one line each, and members' calls go on meanwhile.
func TestPeerPortStrangersAreBoundedAndLoggedInSummary(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig()
	cfg.Logger = slog.New(rec)
	owner := startNode(t, cfg)
	caller := startNode(t, testConfig(), owner.GossipAddr())
	waitConverged(t, []*Node{owner, caller}, 2)
	key := keyOwnedBy(t, caller.Ring(), owner.Name(), 0)

	// Failed handshakes: garbage where the handshake goes, many times.
	var wg sync.WaitGroup
	for range 2 * maxHandshakes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", owner.PeerAddr())
			if err != nil {
				return
			}
			defer c.Close()
			c.Write(bytes.Repeat([]byte{0xff}, 64))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			io.ReadAll(c) // until the node hangs up
		}()
	}
	wg.Wait()
	// Silent strangers: connected, never a byte.
	const strangers = 4 * maxHandshakes
	var silent []net.Conn
	for range strangers {
		c, err := net.Dial("tcp", owner.PeerAddr())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	// A member's call goes through meanwhile.
	if ok, src := takeVia(caller, key, limitOf(10)); !ok || src != SourcePeer {
		t.Errorf("a member's call during the flood: allowed %v by %v; want allowed by the owner", ok, src)
	}
	if peak := owner.handshakes.peak.Load(); peak > maxHandshakes {
		t.Errorf("%d handshakes were under way at once; want at most %d", peak, maxHandshakes)
	}
	if refused := owner.handshakes.refused.Load(); refused == 0 {
		t.Errorf("no stranger was hung up on at once, with %d silent connections open", strangers)
	}
	// The failures are logged in summary.
	time.Sleep(10 * time.Millisecond)
	rec.mu.Lock()
	lines := 0
	for _, l := range rec.records {
		if strings.Contains(l, "peer connection") {
			lines++
		}
	}
	rec.mu.Unlock()
	if lines > 3 {
		t.Errorf("%d log lines for %d failed or refused peer connections; want a few that count them", lines, strangers+2*maxHandshakes)
	}
	if rec.find("failed authentication") == "" {
		t.Error("no log line says peer connections failed authentication")
	}
}
