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
	mode, err := cluster.ParseFallbackMode(a.Fallback)
	if err != nil {
		return cfg, err
	}
	cfg.Fallback = mode
	return cfg, cfg.Validate()
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

// nodeFor returns the node this config runs: the one kept from the previous
// config when the cluster settings are the same (a reload neither leaves nor
// rejoins), a new one otherwise.
func (s *state) nodeFor(cfg *cluster.Config, logger *zap.Logger) (*cluster.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg == nil {
		if s.node == nil || s.clusterCfg != nil {
			s.retire()
			s.node, s.clusterCfg = cluster.Standalone(s.engine), nil
			s.node.OnGather(s.answerGather)
		}
		return s.node, nil
	}
	if s.node != nil && s.clusterCfg != nil && sameClusterSettings(*s.clusterCfg, *cfg) {
		s.node.SetFallback(cfg.Fallback, cfg.FallbackRatio)
		return s.node, nil
	}
	if s.clusterCfg != nil {
		logger.Warn("cluster settings changed: leaving the cluster and joining again with the new ones")
	}
	s.retire()
	cfg.Logger = slog.New(zapslog.NewHandler(logger.Core(), zapslog.WithName(logger.Name())))
	node, err := cluster.Start(*cfg, s.engine)
	if err != nil {
		return nil, err
	}
	node.OnGather(s.answerGather)
	s.node, s.clusterCfg = node, cfg
	return node, nil
}

// sameClusterSettings compares what would need a new node to change.
func sameClusterSettings(a, b cluster.Config) bool {
	a.Fallback, b.Fallback = 0, 0
	a.FallbackRatio, b.FallbackRatio = 0, 0
	a.Logger, b.Logger = nil, nil
	a.Observer, b.Observer = nil, nil
	return reflect.DeepEqual(a, b)
}

// retire leaves the cluster with the current node, if any; s.mu is held.
func (s *state) retire() {
	if s.node != nil && s.clusterCfg != nil {
		s.node.Leave(cluster.DefaultLeaveTimeout)
	}
	s.node, s.clusterCfg = nil, nil
}
