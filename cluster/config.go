package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/cluster/core"
)

// FallbackMode says what a node does with a request whose owner it cannot
// reach (see core.FallbackMode).
type FallbackMode = core.FallbackMode

// The fallback modes.
const (
	FallbackLocal  = core.FallbackLocal
	FallbackOpen   = core.FallbackOpen
	FallbackClosed = core.FallbackClosed
)

// ParseFallbackMode returns the mode with the given name; empty is local.
func ParseFallbackMode(s string) (FallbackMode, error) { return core.ParseFallbackMode(s) }

// Defaults of a node.
const (
	DefaultFallbackRatio = core.DefaultFallbackRatio
	DefaultCallTimeout   = core.DefaultCallTimeout
	DefaultHandoffWindow = core.DefaultHandoffWindow
	DefaultLeaveTimeout  = 5 * time.Second
	DefaultBlockedKeys   = 1 << 16
)

// Config sets up a Node.
type Config struct {
	// Name identifies the node; default: its gossip advertise address.
	Name string
	// Bind is the gossip (memberlist) listener, host:port. Port 0 picks one.
	Bind string
	// Advertise is the gossip address others reach this node at; default
	// Bind (with the port actually bound).
	Advertise string
	// PeerListen is the peer RPC listener, host:port. Port 0 picks one.
	PeerListen string
	// PeerAdvertise is the peer RPC address others reach this node at;
	// default PeerListen's, with the advertise host if PeerListen binds
	// all interfaces.
	PeerAdvertise string
	// Join lists seeds to join through, retried in the background with
	// backoff until one answers.
	Join []string
	// GossipKey encrypts and authenticates gossip (16, 24 or 32 bytes).
	// Required unless every address is loopback.
	GossipKey []byte
	// Secret authenticates and encrypts peer RPC and keys the ring. All
	// nodes must share it. At least 32 bytes.
	Secret []byte

	// Fallback is what to do when a key's owner cannot be reached.
	Fallback FallbackMode
	// FallbackRatio multiplies limits while counting locally for an
	// unreachable owner, above 0 and at most 1. Default 0.4.
	FallbackRatio float64
	// CallTimeout is the pace of the peer protocol: an owner holds a
	// request whose keys' counts are on their way to it for up to this
	// long, a caller gives a call up after twice this, and transfers are
	// sent again at this pace. Default 100ms.
	CallTimeout time.Duration
	// HandoffWindow bounds how long after a membership change a new owner
	// waits for the nodes it takes keys from to hand them all over; past it,
	// it counts what has not arrived from nothing (what arrives later adds).
	// Default 10s.
	HandoffWindow time.Duration
	// BlockedKeys sizes the caches of what owners said: keys known to be
	// denied, remaining counts, clients' scores. Default
	// 65536.
	BlockedKeys int

	// Gossip tunes failure detection; zero fields keep memberlist's LAN
	// defaults, tightened a little (probe every 500ms, dead in about 2s).
	Gossip GossipTuning

	// Logger receives cluster events; default: discarded.
	Logger *slog.Logger

	// Observer, if set, is told about every peer call and take frame, for
	// metrics.
	Observer Observer

	// network, if set, carries the node's gossip and peer calls instead of
	// the host's network: tests put a fault layer there.
	network network
}

// network is what a node's gossip and peer calls travel over.
type network interface {
	// dialPeer connects node from to the peer listener of node to at addr.
	dialPeer(from, to, addr string, timeout time.Duration) (net.Conn, error)
	// gossip returns the memberlist transport of the named node, bound as
	// cfg says.
	gossip(name string, cfg *memberlist.NetTransportConfig) (memberlist.Transport, error)
}

// Observer receives measurements from a node. Its methods are called on
// hot paths and must be quick and safe for concurrent use.
type Observer interface {
	// PeerCall reports a take call to a peer: how long it took to be
	// answered, and whether it was (false: timeout, connection error).
	PeerCall(took time.Duration, ok bool)
	// Batch reports how many take calls one frame carried.
	Batch(calls int)
}

type noObserver struct{}

func (noObserver) PeerCall(time.Duration, bool) {}
func (noObserver) Batch(int)                    {}

// GossipTuning are memberlist's failure detection settings.
type GossipTuning struct {
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
}

func (c *Config) setDefaults() {
	if c.FallbackRatio == 0 {
		c.FallbackRatio = DefaultFallbackRatio
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.HandoffWindow == 0 {
		c.HandoffWindow = DefaultHandoffWindow
	}
	if c.BlockedKeys == 0 {
		c.BlockedKeys = DefaultBlockedKeys
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if c.Gossip.ProbeInterval == 0 {
		c.Gossip.ProbeInterval = 500 * time.Millisecond
	}
	if c.Gossip.ProbeTimeout == 0 {
		c.Gossip.ProbeTimeout = 250 * time.Millisecond
	}
	if c.Gossip.GossipInterval == 0 {
		c.Gossip.GossipInterval = 100 * time.Millisecond
	}
	if c.Gossip.SuspicionMult == 0 {
		c.Gossip.SuspicionMult = 3
	}
}

// Validate reports what is wrong with c, naming the setting.
func (c *Config) Validate() error {
	if _, _, err := splitHostPort("bind", c.Bind); err != nil {
		return err
	}
	if _, _, err := splitHostPort("peer_listen", c.PeerListen); err != nil {
		return err
	}
	for name, addr := range map[string]string{"advertise": c.Advertise, "peer_advertise": c.PeerAdvertise} {
		if addr != "" {
			if _, _, err := splitHostPort(name, addr); err != nil {
				return err
			}
		}
	}
	for _, j := range c.Join {
		if _, _, err := splitHostPort("join", j); err != nil {
			return err
		}
	}
	switch len(c.GossipKey) {
	case 0:
		if !c.allLoopback() {
			return fmt.Errorf("gossip_key is required unless every address is loopback: without it, anyone who reaches the gossip port can join")
		}
	case 16, 24, 32:
	default:
		return fmt.Errorf("gossip_key is %d bytes; it must be 16, 24 or 32", len(c.GossipKey))
	}
	if len(c.Secret) < 32 {
		return fmt.Errorf("the cluster needs a shared secret of at least 32 bytes (the tollgate `secret`)")
	}
	if c.FallbackRatio < 0 || c.FallbackRatio > 1 {
		return fmt.Errorf("fallback_ratio %g: must be above 0 and at most 1", c.FallbackRatio)
	}
	if c.Fallback > FallbackClosed {
		return fmt.Errorf("fallback %d: must be local, open or closed", c.Fallback)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("peer call timeout %s: must be positive", c.CallTimeout)
	}
	return nil
}

// allLoopback reports whether every configured address is on loopback.
func (c *Config) allLoopback() bool {
	addrs := append([]string{c.Bind, c.PeerListen, c.Advertise, c.PeerAdvertise}, c.Join...)
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return false
		}
		if host == "localhost" {
			continue
		}
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// splitHostPort checks a host:port setting and returns its parts.
func splitHostPort(name, addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: not a host:port address: %v", name, addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", name, addr, port)
	}
	return host, p, nil
}
