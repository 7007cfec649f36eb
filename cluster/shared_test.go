package cluster

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// outsider is a memberlist process that holds the gossip key but not the
// cluster secret: it offers forged shared values in state syncs and sends
// them as messages.
type outsider struct{ forged []byte }

func (o outsider) NodeMeta(int) []byte                 { return nil }
func (o outsider) NotifyMsg([]byte)                    {}
func (o outsider) GetBroadcasts(int, int) [][]byte     { return nil }
func (o outsider) LocalState(bool) []byte              { return o.forged }
func (o outsider) MergeRemoteState(buf []byte, _ bool) {}

// A process with the gossip key alone changes no node's shared values:
// neither a value in the old, unsealed form nor one sealed with another
// secret is taken, through a state sync or a message.
func TestSharedValuesOnlyFromHoldersOfTheSecret(t *testing.T) {
	gossipKey := []byte("0123456789abcdef0123456789abcdef")
	cfg := testConfig()
	cfg.GossipKey = gossipKey
	first := startNode(t, cfg)
	second := startNode(t, cfg, first.GossipAddr())
	waitConverged(t, []*Node{first, second}, 2)
	first.Publish("tiers", []byte(`{"api":{"pro":10}}`))
	eventually(t, 5*time.Second, "the genuine value everywhere", func() bool {
		v, _ := second.Shared("tiers")
		return string(v.Value) == `{"api":{"pro":10}}`
	})

	future := SharedValue{Value: []byte(`{"api":{"pro":0}}`), Version: time.Now().Add(time.Hour).UnixNano(), Origin: "outsider"}
	unsealed := []byte{sharedMagic, byte(len("tiers"))} // the format before sealing
	unsealed = append(unsealed, "tiers"...)
	unsealed = append(unsealed, encodeShared(nil, "", future)[3:]...)
	wrongSecret := encodeShared(sharedKeyOf([]byte("another secret, 32 bytes long...")), "tiers", future)
	for i, forged := range [][]byte{unsealed, wrongSecret} {
		mc := memberlist.DefaultLANConfig()
		mc.Name = fmt.Sprintf("outsider-%d", i)
		mc.BindAddr, mc.BindPort, mc.AdvertisePort = "127.0.0.1", 0, 0
		mc.SecretKey = gossipKey
		mc.Delegate = outsider{forged: forged}
		mc.PushPullInterval = 50 * time.Millisecond
		mc.LogOutput = testLogWriter{}
		ml, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Shutdown()
		ml.Join([]string{first.GossipAddr()}) // refused as a member, or not: it may talk
		for _, n := range []*Node{first, second} {
			host, port := splitAddr(t, n.GossipAddr())
			ml.SendReliable(&memberlist.Node{Name: n.Name(), Addr: host, Port: port}, forged)
		}
	}
	time.Sleep(500 * time.Millisecond) // several state syncs
	for _, n := range []*Node{first, second} {
		if v, _ := n.Shared("tiers"); string(v.Value) != `{"api":{"pro":10}}` {
			t.Errorf("%s took a forged value: %q from %s", n.Name(), v.Value, v.Origin)
		}
	}
}

// A value that the node's check refuses (a tier of 0, say) is dropped, even
// from a member, and the value before it stays.
func TestSharedValuesAreCheckedBeforeUse(t *testing.T) {
	nodes := startNodes(t, 2)
	nodes[1].SetSharedCheck(func(name string, value []byte) error {
		if slices.Contains(value, '0') {
			return errors.New("a limit of 0")
		}
		return nil
	})
	nodes[0].Publish("tiers", []byte(`{"pro":5}`))
	eventually(t, 5*time.Second, "the good value", func() bool {
		v, _ := nodes[1].Shared("tiers")
		return string(v.Value) == `{"pro":5}`
	})
	nodes[0].Publish("tiers", []byte(`{"pro":0}`))
	time.Sleep(300 * time.Millisecond)
	if v, _ := nodes[1].Shared("tiers"); string(v.Value) != `{"pro":5}` {
		t.Errorf("a value the check refuses was taken: %q", v.Value)
	}
}

// testLogWriter drops memberlist's log lines.
type testLogWriter struct{}

func (testLogWriter) Write(p []byte) (int, error) { return len(p), nil }

// splitAddr returns the IP and port of a host:port.
func splitAddr(t *testing.T, addr string) (net.IP, uint16) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return net.ParseIP(host), uint16(p)
}
