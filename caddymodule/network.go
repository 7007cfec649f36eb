package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// DefaultNetworkShare is how many clients' worth of a zone's limit one IP
// network may spend without session cookies, when neither the app nor the
// zone sets network_share: four, so a household of a few devices (a phone,
// a laptop, a tablet, a TV) that have not yet got a cookie each keep a full
// budget, while a script rotating headers on one address gets four.
const DefaultNetworkShare = 4

// maxNetworkShare bounds network_share.
const maxNetworkShare = 1 << 16

// networkSalt separates a zone's network counters from its client counters.
const networkSalt = 0x6e6574776f726b21

// networkSeed is the seed of zone z's network counters.
func (z *Zone) networkSeed() uint64 { return z.seed ^ networkSalt }

// countsNetwork reports whether z's cookie-less requests also count against
// a budget of their IP network: rate zones keyed by the client ID. A zone
// keyed by anything else (an API key, a user) is not dodged by rotating
// headers, so it has no network budget.
func (z *Zone) countsNetwork() bool {
	return !z.isLease() && z.keyedByClient()
}

// networkShare returns the network share of zone z: its own, else the app's,
// else DefaultNetworkShare.
func (a *App) networkShare(z *Zone) int64 {
	switch {
	case z.NetworkShare > 0:
		return z.NetworkShare
	case a.NetworkShare > 0:
		return a.NetworkShare
	}
	return DefaultNetworkShare
}

// validateNetworkShare checks a network_share value; what names the
// directive for the message.
func validateNetworkShare(what string, n int64) error {
	if err := networkShareBounds.checkSet(n); err != nil {
		return fmt.Errorf("%s %d: %w", what, n, err)
	}
	return nil
}

// addNetworkRequest adds to b, for zone zi (z) of a cookie-less client, the
// request that counts it against its network's budget: network_share times
// the zone's limit for this request, squeezed by IP pressure.
func (h *Handler) addNetworkRequest(b *batch, zi int, z *Zone, limit limiter.Limit, who *asker, dry bool) {
	limit = limit.Scale(float64(h.app.networkShare(z)))
	if who.pressure.Factor != 1 {
		limit = limit.Scale(who.pressure.Factor)
	}
	b.add(zi, limiter.Request{
		Key:     limiter.ZoneKey(who.identity.Network, z.networkSeed()),
		Zone:    z.networkSeed(),
		Network: uint32(who.identity.Network),
		Limit:   limit,
	}, false, dry)
	b.network[len(b.network)-1] = true
}

// networkOf returns the engine's network tag of zone z's request for a
// client: its network hash, so that one network holds only its share of the
// key table. A session in a zone keyed by the client ID is tagged 0: its
// keys are bounded by how many sessions a network may mint. In a zone keyed
// by anything else, a session picks its keys freely (one per header value it
// sends), so it is tagged with its network too, hashed here once per request.
func (a *App) networkOf(z *Zone, who *asker, q *request) uint32 {
	id := &who.identity
	if id.Kind != fingerprint.KindSession {
		return uint32(id.Network)
	}
	if z.keyedByClient() {
		return 0
	}
	if id.Network == 0 && a.identifier != nil {
		id.Network = a.identifier.Network(q.clientIP())
	}
	return uint32(id.Network)
}

// keyedByClient reports whether z's key is the client ID.
func (z *Zone) keyedByClient() bool {
	return z.Key == "" || z.Key == "{http.tollgate.client_id}"
}

// clientSpeaker returns the request that speaks for an allowed decision
// among the client's own requests, so the network's budget is never shown;
// i is the one decidingRequest chose.
func clientSpeaker(b *batch, i int) int {
	if !b.network[i] {
		return i
	}
	best := -1
	for j := range b.res {
		if b.network[j] {
			continue
		}
		r := &b.res[j]
		if best < 0 || r.Remaining >= 0 && (b.res[best].Remaining < 0 || r.Remaining < b.res[best].Remaining) {
			best = j
		}
	}
	if best < 0 {
		return i
	}
	return best
}

// Reasons for a denial, in tollgate_denials_total.
const (
	reasonClient   = adminapi.BudgetClient
	reasonNetwork  = adminapi.BudgetNetwork
	reasonDecision = "decision" // an operator's block
	reasonBan      = "ban"      // the zone's ban, after an earlier denial
)

// denialReasons are the reasons, in the order of denialCounters.
var denialReasons = [...]string{reasonClient, reasonNetwork, reasonDecision, reasonBan}

// denialCounters are a zone's denial counters by reason, looked up once.
type denialCounters [len(denialReasons)]prometheus.Counter

func newDenialCounters(zone, scope string) *denialCounters {
	initMetrics()
	var c denialCounters
	for i, reason := range denialReasons {
		c[i] = metrics.denials.WithLabelValues(zone, scope, reason)
	}
	return &c
}

// incDecision counts a denial by an operator's block.
func (c *denialCounters) incDecision() { c[2].Inc() }

func (c *denialCounters) inc(network bool) {
	if network {
		c[1].Inc()
	} else {
		c[0].Inc()
	}
}

// incDenial counts a denial: by the zone's ban, else by the budget that
// denied it.
func (c *denialCounters) incDenial(network, banned bool) {
	if banned {
		c[3].Inc()
		return
	}
	c.inc(network)
}

// warnUnixListeners warns when a server of app listens on a unix socket:
// its clients have no IP address, so every one of them is in one network,
// with one network budget and one allowance of new sessions. Behind a proxy
// on the socket, the server's trusted_proxies_unix gives clients their own
// addresses back.
func warnUnixListeners(app *caddyhttp.App, logger *zap.Logger) {
	if app == nil {
		return
	}
	for name, srv := range app.Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(l)
			if err != nil || !na.IsUnixNetwork() {
				continue
			}
			logger.Warn("a unix socket listener puts every client of the server in one network: one network budget and one allowance of new sessions for all; behind a proxy on the socket, turn on trusted_proxies_unix so that clients keep their own addresses",
				zap.String("server", name), zap.String("listen", l))
		}
	}
}

// networkID renders the client's network as {http.tollgate.network}:
// "n:" and 16 hex digits of its keyed hash. A session's network is hashed
// here, only when the placeholder is used and no zone hashed it already.
func (v *verdict) networkID() string {
	net := v.identity.Network
	if net == 0 && v.identity.Kind == fingerprint.KindSession {
		if v.identifier == nil {
			return ""
		}
		ip, _ := v.vars[caddyhttp.ClientIPVarKey].(string)
		net = v.identifier.Network(ip)
	}
	return adminapi.NetworkID(net)
}
