package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
)

// decisionBodyWant is what POST /tollgate/decisions takes, for errors.
const decisionBodyWant = `an object {"key": "alice", "action": "block", "zone": "api", "duration": "1h", "reason": "scraping"}; zone, duration (default 24h) and reason may be left out`

// handleDecisions serves GET and POST /tollgate/decisions.
func (adminAPI) handleDecisions(w http.ResponseWriter, r *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	if r.Method == http.MethodGet {
		t := app.state.decisions.load()
		list := adminapi.DecisionList{Items: []adminapi.DecisionView{}}
		for _, d := range t.held(time.Now()) {
			list.Items = append(list.Items, decisionView(d))
		}
		return writeJSON(w, list)
	}
	var req adminapi.DecisionRequest
	if err := decodeBody(r, &req, decisionBodyWant); err != nil {
		return err
	}
	now := time.Now()
	d, err := app.newDecision(req, now)
	if err != nil {
		return err
	}
	var replaced *opDecision
	_, err = app.changeDecisions(now, func(held []opDecision) ([]opDecision, error) {
		out := make([]opDecision, 0, len(held)+1)
		for _, old := range held {
			if old.Key == d.Key && old.Zone == d.Zone {
				replaced = &old
				continue
			}
			out = append(out, old)
		}
		if len(out) >= adminapi.MaxDecisions {
			return nil, badRequest("%d decisions hold already, the most the cluster keeps: lift some (DELETE %s{id}) or let them expire", len(out), adminapi.PathDecision)
		}
		return append(out, d), nil
	})
	if err != nil {
		return err
	}
	made := adminapi.DecisionMade{Decision: decisionView(d)}
	if replaced != nil {
		v := decisionView(*replaced)
		made.Replaced = &v
	}
	app.logger.Info("operator decision made through the admin API", zap.String("key_hash", d.Key), zap.String("zone", d.Zone),
		zap.String("action", d.Action), zap.Duration("duration", time.Duration(d.Expires-d.Created)), zap.Bool("replaced", replaced != nil))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	return writeJSON(w, made)
}

// handleDecision serves DELETE /tollgate/decisions/{id}: it lifts the
// key's decisions, those of ?zone= and ?action= only if given.
func (adminAPI) handleDecision(w http.ResponseWriter, r *http.Request) error {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), adminapi.PathDecision)
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" || strings.Contains(raw, "/") {
		return badRequest("want %s{id}: a raw key URL-escaped, or h:… as the logs print it; got %q", adminapi.PathDecision, r.URL.Path)
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	zone, action := r.URL.Query().Get(adminapi.QueryZone), r.URL.Query().Get(adminapi.QueryAction)
	if action != "" && action != adminapi.ActionBlock && action != adminapi.ActionAllow {
		return badRequest("action %q: must be block or allow, or left out to lift both", action)
	}
	key := app.decisionKeyOf(id)
	var lifted []opDecision
	_, err = app.changeDecisions(time.Now(), func(held []opDecision) ([]opDecision, error) {
		out := make([]opDecision, 0, len(held))
		for _, d := range held {
			if d.Key == key && (zone == "" || d.Zone == zone) && (action == "" || d.Action == action) {
				lifted = append(lifted, d)
				continue
			}
			out = append(out, d)
		}
		if len(lifted) == 0 {
			return nil, notFound("no decision holds for %s%s", key, decisionFilter(zone, action))
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	answer := adminapi.DecisionsLifted{Lifted: make([]adminapi.DecisionView, 0, len(lifted))}
	for _, d := range lifted {
		answer.Lifted = append(answer.Lifted, decisionView(d))
	}
	app.logger.Info("operator decisions lifted through the admin API", zap.String("key_hash", key), zap.Int("lifted", len(lifted)))
	return writeJSON(w, answer)
}

// decisionFilter words the narrowing of a DELETE, for a 404.
func decisionFilter(zone, action string) string {
	s := ""
	if zone != "" {
		s += " in zone " + zone
	}
	if action != "" {
		s += " of action " + action
	}
	return s
}

// newDecision checks a POST body against the running config and returns
// the decision it asks for, made at now.
func (a *App) newDecision(req adminapi.DecisionRequest, now time.Time) (opDecision, error) {
	if req.Key == "" {
		return opDecision{}, badRequest("key is required: the key as the zone renders it (the client ID by default), or its hashed ID h:…")
	}
	if req.Action != adminapi.ActionBlock && req.Action != adminapi.ActionAllow {
		return opDecision{}, badRequest("action %q: must be block or allow", req.Action)
	}
	if req.Zone != "" && len(a.zonesNamed(req.Zone)) == 0 {
		return opDecision{}, badRequest("unknown zone %q: the running config has %s; leave zone out for every zone", req.Zone, strings.Join(a.zoneNames(), ", "))
	}
	if err := checkDecisionReason(req.Reason); err != nil {
		return opDecision{}, badRequest("%v", err)
	}
	dur := adminapi.DefaultDecisionDuration
	if req.Duration != nil {
		raw, _ := json.Marshal(req.Duration)
		var err error
		if dur, err = decisionDuration(raw); err != nil {
			return opDecision{}, err
		}
	}
	return opDecision{
		Key: a.decisionKeyOf(req.Key), Zone: req.Zone, Action: req.Action, Reason: req.Reason,
		Created: now.UnixNano(), Expires: now.Add(dur).UnixNano(), Origin: a.node.Name(),
	}, nil
}

// decisionKeyOf returns what a decision about id is kept under: a
// network's ID (n:…, as {http.tollgate.network} renders it) as it is, a
// key's hashed ID otherwise.
func (a *App) decisionKeyOf(id string) string {
	if net, ok := adminapi.ParseNetworkID(id); ok {
		return adminapi.NetworkID(net)
	}
	return adminapi.HashedID(a.keyHashOf(id))
}

// decisionDuration reads a decision's duration: seconds as a number, or a
// duration string.
func decisionDuration(raw json.RawMessage) (time.Duration, error) {
	maxDays := int64(adminapi.MaxDecisionDuration / (24 * time.Hour))
	var secs float64
	if err := json.Unmarshal(raw, &secs); err == nil {
		d := time.Duration(secs * float64(time.Second))
		if d < time.Second || d > adminapi.MaxDecisionDuration {
			return 0, badRequest("duration %s: must be from 1 to %d seconds, or a duration string from 1s to %dd such as 1h or 7d", raw, int64(adminapi.MaxDecisionDuration.Seconds()), maxDays)
		}
		return d, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, badRequest("duration %s: must be a number of seconds or a duration string such as 1h or 7d", raw)
	}
	d, err := caddy.ParseDuration(s)
	if err != nil || d < time.Second || d > adminapi.MaxDecisionDuration {
		return 0, badRequest("duration %q: must be a duration from 1s to %dd, such as 1h or 7d, or a number of seconds", s, maxDays)
	}
	return d, nil
}

// changeDecisions replaces the decision table with what change makes of
// the decisions that hold at now (expired ones are dropped), puts it in
// effect here, sends it to every node and keeps it in storage.
func (a *App) changeDecisions(now time.Time, change func(held []opDecision) ([]opDecision, error)) (*decisionTable, error) {
	h := &a.state.decisions
	h.mu.Lock()
	defer h.mu.Unlock()
	records, err := change(h.load().held(now))
	if err != nil {
		return nil, err
	}
	t := &decisionTable{Records: records}
	if err := t.vet(); err != nil {
		return nil, err // not reached: each record was checked when it was made
	}
	raw, err := json.Marshal(records)
	if err != nil {
		return nil, err
	}
	v := a.node.Publish(decisionsSharedName, raw)
	t.Version, t.Origin = v.Version, v.Origin
	h.store(t)
	if err := a.state.saveDecisions(t); err != nil {
		a.logger.Error("keeping the operator decisions", zap.Error(err))
	}
	return t, nil
}

// decisionView shows a decision as the admin API answers it.
func decisionView(d opDecision) adminapi.DecisionView {
	return adminapi.DecisionView{
		Key: d.Key, Zone: d.Zone, Action: d.Action, Reason: d.Reason,
		Created: instant(time.Unix(0, d.Created)), Expires: instantAfter(time.Unix(0, d.Expires)), Origin: d.Origin,
	}
}
