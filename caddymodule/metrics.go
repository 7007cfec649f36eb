package caddymodule

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
)

// Tollgate's metrics, registered with the metrics registry of every config
// (Caddy serves it on the admin endpoint's /metrics). Labels come from small
// fixed sets: zone names from the config, outcomes, sources, statuses.
// Never a client ID or a key.
var metrics = struct {
	once      sync.Once
	decisions *prometheus.CounterVec
	cookies   *prometheus.CounterVec
	peerCall  *prometheus.HistogramVec
	batch     prometheus.Histogram
	denials   *prometheus.CounterVec
	emptyKeys *prometheus.CounterVec
	challenge *prometheus.CounterVec
}{}

const metricsNamespace = "tollgate"

func initMetrics() {
	metrics.once.Do(func() {
		metrics.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "decisions_total",
			Help:      "Requests decided, by zone name, scope (the zone's identity: its name, or its name and place when several handlers declare that name), outcome (allow, deny, dry_run_deny) and source (owner, peer, blocked_cache, fallback). A request counted in several zones counts once, under the zone that spoke for it.",
		}, []string{"zone", "scope", "outcome", "source"})
		metrics.cookies = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "cookies_total",
			Help:      "Requests a zone counted, by their session cookie's status: absent, valid, old_secret, or why it was treated as absent (malformed, forged, expired, future).",
		}, []string{"status"})
		metrics.peerCall = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Name:      "peer_call_duration_seconds",
			Help:      "Time for a take call to be answered by the owner, by result (ok, failed: timeout or connection error).",
			Buckets:   []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"result"})
		metrics.batch = prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Name:      "peer_batch_size",
			Help:      "Take calls carried by one peer frame.",
			Buckets:   []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		})
		metrics.denials = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "denials_total",
			Help:      "Requests denied (dry runs' would-be denials included), by zone name, scope and reason: client (the client's own budget), network (the budget of its IP network, for requests without a session cookie), decision (an operator's block) or ban (the zone's ban, after an earlier denial).",
		}, []string{"zone", "scope", "reason"})
		metrics.emptyKeys = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "empty_keys_total",
			Help:      "Requests whose zone key had a placeholder that rendered empty (e.g. a user before authentication), counted by the client ID instead, by zone name and scope.",
		}, []string{"zone", "scope"})
		metrics.challenge = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "challenges_total",
			Help:      "Proofs of work received, by result: passed, or why they were refused (malformed, forged, expired, network, work, replayed).",
		}, []string{"result"})
	})
}

// registerMetrics registers Tollgate's metrics with one config's registry.
func registerMetrics(reg *prometheus.Registry, st *state) error {
	initMetrics()
	for _, c := range append([]prometheus.Collector{metrics.decisions, metrics.cookies, metrics.peerCall, metrics.batch, metrics.denials, metrics.emptyKeys, metrics.challenge, &stateCollector{st}}, outcomeCollectors()...) {
		if err := reg.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return err
		}
	}
	return nil
}

// metricsObserver feeds the node's measurements to the metrics.
type metricsObserver struct{}

func (metricsObserver) PeerCall(took time.Duration, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	metrics.peerCall.WithLabelValues(result).Observe(took.Seconds())
}

func (metricsObserver) Batch(calls int) { metrics.batch.Observe(float64(calls)) }

// decisionCounters are a zone's decision counters, looked up once.
type decisionCounters [3][4]prometheus.Counter // outcome × source

var outcomes = [...]string{decisionAllow, decisionDeny, decisionDryRunDeny}

func newDecisionCounters(zone, scope string) *decisionCounters {
	initMetrics()
	var c decisionCounters
	for o, outcome := range outcomes {
		for s := range c[o] {
			c[o][s] = metrics.decisions.WithLabelValues(zone, scope, outcome, cluster.Source(s).String())
		}
	}
	return &c
}

// deleteDecisionSeries drops the decision series of a zone identity no
// longer configured.
func deleteDecisionSeries(zone, scope string) {
	initMetrics()
	metrics.decisions.DeletePartialMatch(prometheus.Labels{"zone": zone, "scope": scope})
	metrics.denials.DeletePartialMatch(prometheus.Labels{"zone": zone, "scope": scope})
	metrics.emptyKeys.DeletePartialMatch(prometheus.Labels{"zone": zone, "scope": scope})
	initOutcomeMetrics()
	outcomeMetrics.waiting.DeletePartialMatch(prometheus.Labels{"zone": zone, "scope": scope})
}

func (c *decisionCounters) inc(decision string, src cluster.Source) {
	o := 0
	switch decision {
	case decisionDeny:
		o = 1
	case decisionDryRunDeny:
		o = 2
	}
	if int(src) < len(c[o]) {
		c[o][src].Inc()
	}
}

// cookieCounters are the cookie status counters, one per status, looked up
// once. It returns them by pointer: every request counts one, and a copy
// of the array (seven interfaces) cost more than the count.
var cookieCounters = sync.OnceValue(func() *[fingerprint.NumCookieStatuses]prometheus.Counter {
	initMetrics()
	var c [fingerprint.NumCookieStatuses]prometheus.Counter
	for i := range c {
		c[i] = metrics.cookies.WithLabelValues(fingerprint.CookieStatus(i).String())
	}
	return &c
})

// ringNumber turns a ring fingerprint (hex) into a gauge value: its first
// 12 hex digits, which a float64 holds exactly. 0 when there is none.
func ringNumber(fp string) float64 {
	n, err := strconv.ParseUint(fp[:min(12, len(fp))], 16, 64)
	if err != nil {
		return 0
	}
	return float64(n)
}

// stateCollector reads the process-wide state when scraped: counters held,
// the cluster, IP pressure.
type stateCollector struct{ st *state }

var (
	descKeysHeld    = prometheus.NewDesc("tollgate_keys_held", "Counters held in memory by this node (owned keys).", nil, nil)
	descKeysMax     = prometheus.NewDesc("tollgate_keys_max", "The bound on counters held (max_keys).", nil, nil)
	descEvictions   = prometheus.NewDesc("tollgate_key_evictions_total", "Counters dropped or refused for memory: reclaimed (expired, dropped to make room), evicted (live but not exhausted, least recently used, dropped to make room), swept (expired, dropped in the background), overflowed (new keys counted in a shared overflow counter of their zone and network because nothing could be evicted).", []string{"kind"}, nil)
	descMembers     = prometheus.NewDesc("tollgate_cluster_members", "Members of the ring this node routes by (1 for a single node).", nil, nil)
	descInFallback  = prometheus.NewDesc("tollgate_peers_in_fallback", "Peers whose keys this node currently decides by its fallback (unreachable, or behind an open breaker).", nil, nil)
	descActivations = prometheus.NewDesc("tollgate_fallback_activations_total", "Times a peer became unreachable and its keys went to fallback.", nil, nil)
	descFallbackKey = prometheus.NewDesc("tollgate_fallback_keys", "Counters held in the local fallback engine.", nil, nil)
	descHandoff     = prometheus.NewDesc("tollgate_counters_moved_total", "Counters that moved to this node when ownership changed: pushed by the old owner, or pulled from it.", []string{"how"}, nil)
	descNetworks    = prometheus.NewDesc("tollgate_ip_pressure_networks", "IP networks watched for pressure, and of them squeezed now.", []string{"state"}, nil)
	descSqueezes    = prometheus.NewDesc("tollgate_ip_pressure_squeezes_total", "Times a network was squeezed.", nil, nil)
	descRing        = prometheus.NewDesc("tollgate_ring_fingerprint", "The ring this node routes by, as a number (the first 48 bits of its fingerprint): the same on every node that agrees on the membership. count(count_values(\"ring\", tollgate_ring_fingerprint)) above 1 means nodes disagree.", nil, nil)
	descReputation  = prometheus.NewDesc("tollgate_reputation_clients", "Clients whose reputation this node keeps, by bucket (the lowest score of the band). Clients never penalized, or fully recovered, are not counted; sum over nodes for the cluster.", []string{"bucket"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeysHeld, descKeysMax, descEvictions, descMembers, descInFallback,
		descActivations, descFallbackKey, descHandoff, descNetworks, descSqueezes, descReputation, descRing} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	es := c.st.engine.Stats()
	ch <- prometheus.MustNewConstMetric(descKeysHeld, prometheus.GaugeValue, float64(es.Keys))
	ch <- prometheus.MustNewConstMetric(descKeysMax, prometheus.GaugeValue, float64(es.MaxKeys))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(es.Reclaimed), "reclaimed")
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(es.Evicted), "evicted")
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(es.Swept), "swept")
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(es.Overflowed), "overflowed")

	c.st.mu.Lock()
	node, pressure := c.st.node, c.st.pressure
	c.st.mu.Unlock()
	var cs cluster.Status
	if node != nil {
		cs = node.Status()
	}
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(max(1, len(cs.Members))))
	ch <- prometheus.MustNewConstMetric(descRing, prometheus.GaugeValue, ringNumber(cs.RingFingerprint))
	ch <- prometheus.MustNewConstMetric(descInFallback, prometheus.GaugeValue, float64(len(cs.PeersInFallback)))
	ch <- prometheus.MustNewConstMetric(descActivations, prometheus.CounterValue, float64(cs.Activations))
	ch <- prometheus.MustNewConstMetric(descFallbackKey, prometheus.GaugeValue, float64(cs.FallbackKeys))
	ch <- prometheus.MustNewConstMetric(descHandoff, prometheus.CounterValue, float64(cs.HandedOffIn), "pushed")
	ch <- prometheus.MustNewConstMetric(descHandoff, prometheus.CounterValue, float64(cs.Pulled), "pulled")

	var ps fingerprint.PressureStats
	if pressure != nil {
		ps = pressure.Stats(time.Now())
	}
	ch <- prometheus.MustNewConstMetric(descNetworks, prometheus.GaugeValue, float64(ps.Networks), "watched")
	ch <- prometheus.MustNewConstMetric(descNetworks, prometheus.GaugeValue, float64(ps.Squeezed), "squeezed")
	ch <- prometheus.MustNewConstMetric(descSqueezes, prometheus.CounterValue, float64(ps.Squeezes))

	if app := c.st.currentApp(); app != nil && app.reputation != nil {
		counts := c.st.engine.ReputationBuckets(time.Now())
		for i, b := range app.reputation.Buckets {
			if i < len(counts) {
				ch <- prometheus.MustNewConstMetric(descReputation, prometheus.GaugeValue, float64(counts[i]), strconv.FormatFloat(b.Min, 'f', -1, 64))
			}
		}
	}
}
