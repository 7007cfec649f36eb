package caddymodule

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/keyhash"
)

// ClusterConfig joins this Caddy to a Tollgate cluster: every key is
// counted by one owner node, so a limit holds exactly across all nodes.
type ClusterConfig struct {
	// Bind is the gossip listener, host:port. Required.
	Bind string `json:"bind"`

	// PeerListen is the peer RPC listener, host:port. Required.
	PeerListen string `json:"peer_listen"`

	// Advertise is the gossip address other nodes reach this one at.
	// Default: Bind.
	Advertise string `json:"advertise,omitempty"`

	// PeerAdvertise is the peer RPC address other nodes reach this one at.
	// Default: PeerListen's port on the advertised host.
	PeerAdvertise string `json:"peer_advertise,omitempty"`

	// Join lists nodes to join through, host:port of their gossip
	// listener; retried in the background with backoff.
	Join []string `json:"join,omitempty"`

	// GossipKey encrypts gossip: 16, 24 or 32 bytes, base64-encoded;
	// placeholders such as {env.TOLLGATE_GOSSIP_KEY} are replaced.
	// Required unless every address is loopback.
	GossipKey string `json:"gossip_key,omitempty"`

	// Name identifies the node. Default: its advertised gossip address.
	Name string `json:"name,omitempty"`

	// PeerTimeout bounds every call to a peer; past it, the request is
	// decided by the fallback. Default: 100ms.
	PeerTimeout caddy.Duration `json:"peer_timeout,omitempty"`
}

// clusterSettings turns the app's config into the node's, resolving
// placeholders. The secret keys the ring and the peer RPC.
func (a *App) clusterSettings(secret []byte) (cluster.Config, error) {
	c := a.Cluster
	repl := caddy.NewReplacer()
	cfg := cluster.Config{
		Name:          repl.ReplaceKnown(c.Name, ""),
		Bind:          repl.ReplaceKnown(c.Bind, ""),
		Advertise:     repl.ReplaceKnown(c.Advertise, ""),
		PeerListen:    repl.ReplaceKnown(c.PeerListen, ""),
		PeerAdvertise: repl.ReplaceKnown(c.PeerAdvertise, ""),
		Secret:        secret,
		CallTimeout:   time.Duration(c.PeerTimeout),
		FallbackRatio: a.FallbackRatio,
		Observer:      metricsObserver{},
	}
	for _, j := range c.Join {
		cfg.Join = append(cfg.Join, repl.ReplaceKnown(j, ""))
	}
	if key := repl.ReplaceKnown(c.GossipKey, ""); key != "" {
		raw, err := base64.StdEncoding.DecodeString(key)
		if err != nil {
			return cfg, fmt.Errorf("gossip_key: not base64: %v", err)
		}
		cfg.GossipKey = raw
	}
	// The fallback mode is Validate's to read and Start's to set; the node
	// checks the rest when it is created.
	return cfg, nil
}

// clusterSecret derives the secret all nodes share for the ring and the
// peer RPC from the hashing secret (the last configured one).
func clusterSecret(hashSecret []byte) []byte {
	h := keyhash.New(hashSecret, "tollgate cluster secret v1")
	out := make([]byte, 0, 32)
	for i := range uint64(4) {
		v := h.Uint64(i)
		for j := range 8 {
			out = append(out, byte(v>>(8*j)))
		}
	}
	return out
}

// nodeFor returns the node this config runs, without starting anything:
// the running node when the cluster settings are the same (a reload neither
// leaves nor rejoins), or a new node that App.Start starts. It reports
// whether the node is new.
func (s *state) nodeFor(cfg *cluster.Config, logger *zap.Logger) (*cluster.Node, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg == nil {
		if s.node != nil && s.clusterCfg == nil {
			return s.node, false, nil
		}
		return cluster.Standalone(s.engine), true, nil
	}
	if s.node != nil && s.clusterCfg != nil && sameClusterSettings(*s.clusterCfg, *cfg) {
		return s.node, false, nil
	}
	cfg.Logger = slog.New(zapslog.NewHandler(logger.Core(), zapslog.WithName(logger.Name())))
	node, err := cluster.New(*cfg, s.engine)
	if err != nil {
		return nil, false, err
	}
	return node, true, nil
}

// adopt starts node, new with the config whose cluster settings are cfg
// (nil: a single node), and makes it the running node. The node it replaces
// keeps answering until the config that used it stops (replaced below), so a
// reload that fails to start leaves the old config and its node as they
// were. Only when the new node needs the old one's ports does the old one
// leave first.
func (s *state) adopt(node *cluster.Node, cfg *cluster.Config, logger *zap.Logger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node != nil && s.clusterCfg != nil && cfg != nil && sharePorts(*s.clusterCfg, *cfg) {
		logger.Warn("cluster settings changed on the same ports: leaving the cluster and joining again with the new ones")
		s.retire()
	}
	node.SetSharedCheck(checkSharedValue)
	node.OnGather(s.answerGather)
	if err := node.Start(); err != nil {
		node.Close()
		return err
	}
	if s.clusterCfg != nil {
		logger.Warn("cluster settings changed: joined with the new ones; the previous node leaves when its config stops")
	}
	s.replaced, s.replacedCfg = s.node, s.clusterCfg
	s.node, s.clusterCfg = node, cfg
	return nil
}

// release is called when a config that ran node stops. If a newer config
// replaced node, it leaves now. If node is the running node and it replaced
// another (the new config failed to start after this app started), the
// previous node is put back and node leaves.
func (s *state) release(node *cluster.Node, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case node == s.replaced:
		s.replaced, s.replacedCfg = nil, nil
		if node != nil {
			node.Leave(cluster.DefaultLeaveTimeout)
		}
	case started && node == s.node && s.replaced != nil:
		s.retire()
		s.node, s.clusterCfg = s.replaced, s.replacedCfg
		s.replaced, s.replacedCfg = nil, nil
	}
}

// sameClusterSettings compares what would need a new node to change.
func sameClusterSettings(a, b cluster.Config) bool {
	a.Fallback, b.Fallback = 0, 0
	a.FallbackRatio, b.FallbackRatio = 0, 0
	a.Logger, b.Logger = nil, nil
	a.Observer, b.Observer = nil, nil
	return reflect.DeepEqual(a, b)
}

// sharePorts reports whether two cluster settings listen on a common
// address, so that nodes with both cannot run at once.
func sharePorts(a, b cluster.Config) bool {
	return a.Bind == b.Bind || a.PeerListen == b.PeerListen || a.Bind == b.PeerListen || a.PeerListen == b.Bind
}

// retire leaves the cluster with the current node, if any; s.mu is held.
func (s *state) retire() {
	if s.node != nil {
		s.node.Leave(cluster.DefaultLeaveTimeout)
	}
	s.node, s.clusterCfg = nil, nil
}

// provisionNode finds the running cluster node (or single node) if the
// settings are the same, or creates one that Start starts: provisioning binds
// nothing and joins nobody, so `caddy validate` can check the config of a
// running node.
func (a *App) provisionNode() error {
	var cfg *cluster.Config
	if a.Cluster != nil {
		c, err := a.clusterSettings(clusterSecret(a.hashSecret))
		if err != nil {
			return fmt.Errorf("tollgate: cluster: %w", err)
		}
		cfg = &c
	}
	node, isNew, err := a.state.nodeFor(cfg, a.logger.Named("cluster"))
	if err != nil {
		return fmt.Errorf("tollgate: cluster: %w", err)
	}
	a.node, a.nodeCfg, a.newNode = node, cfg, isNew
	a.decider = node
	if cfg == nil {
		a.decider = standaloneDecider{engine: a.state.engine}
	}
	return nil
}
