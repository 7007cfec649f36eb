package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/adminapi"
)

// handleStream serves GET /tollgate/stream: every StreamInterval, the
// status, the first page of denied keys, the reputation buckets, the
// operators' decisions and the zones' settings, as a
// server-sent event (see adminapi.StreamUpdate), until StreamLifetime has
// passed or the client goes.
func (a adminAPI) handleStream(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// A browser opens the stream again this long after it ends.
	fmt.Fprintf(w, "retry: %d\n\n", adminapi.StreamInterval.Milliseconds())
	start := time.Now()
	tick := time.NewTicker(adminapi.StreamInterval)
	defer tick.Stop()
	var historySent time.Time // the end of the last step sent
	for {
		b, err := a.streamUpdate(r, &historySent)
		if err != nil {
			b, _ = json.Marshal(adminapi.Error{Message: err.Error()})
			fmt.Fprintf(w, "event: failure\ndata: %s\n\n", b)
		} else {
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if err := rc.Flush(); err != nil {
			return nil // the client went, or cannot be streamed to
		}
		select {
		case <-r.Context().Done():
			return nil
		case now := <-tick.C:
			if streamOver(start, now) {
				return nil
			}
		}
	}
}

// streamOver reports whether a stream that started at start has lived its
// lifetime at now.
func streamOver(start, now time.Time) bool {
	return now.Sub(start) >= adminapi.StreamLifetime
}

// streamUpdate renders one event: the answers of the routes the status
// page reads, each from its own handler, as one JSON object. The history
// is sent when it has a step newer than *historySent, which it updates.
func (a adminAPI) streamUpdate(r *http.Request, historySent *time.Time) ([]byte, error) {
	parts := [...]struct {
		path  string
		serve caddy.AdminHandlerFunc
		out   *json.RawMessage
	}{
		{adminapi.PathStatus, a.handleStatus, new(json.RawMessage)},
		{adminapi.PathDenied + "?" + adminapi.QueryLimit + "=" + strconv.Itoa(adminapi.MaxDeniedPage), a.handleDenied, new(json.RawMessage)},
		{adminapi.PathReputation, a.handleReputation, new(json.RawMessage)},
		{adminapi.PathDecisions, a.handleDecisions, new(json.RawMessage)},
		{adminapi.PathZones, a.handleZones, new(json.RawMessage)},
	}
	for _, p := range parts {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, p.path, nil)
		if err != nil {
			return nil, err
		}
		var buf bufferedAnswer
		if err := p.serve(&buf, req); err != nil {
			return nil, err
		}
		*p.out = bytes.TrimSpace(buf.body.Bytes())
	}
	update := map[string]any{"status": parts[0].out, "denied": parts[1].out, "reputation": parts[2].out, "decisions": parts[3].out, "zones": parts[4].out}
	if app, err := runningApp(); err == nil {
		if end := app.state.history.lastEnd(); historySent.IsZero() || end.After(*historySent) {
			update["history"] = app.state.historyView(true) // a cluster's: every node's summed
			*historySent = end
		}
	}
	return json.Marshal(update)
}

// bufferedAnswer is a ResponseWriter that keeps an answer in memory.
type bufferedAnswer struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufferedAnswer) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

func (b *bufferedAnswer) Write(p []byte) (int, error) { return b.body.Write(p) }

func (b *bufferedAnswer) WriteHeader(int) {}
