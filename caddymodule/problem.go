package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The problem type of a 429 (RFC 9457), as the RateLimit header draft
// (-09 on) registers it.
const (
	problemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle         = "Request cannot be satisfied as assigned quota has been exceeded"
	problemContentType   = "application/problem+json"
)

// problem is the body of a 429 for clients that prefer JSON.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// deny answers a denied request: an error for the site's handle_errors to
// shape; or, on a site without handle_errors (which would send an empty
// 429), a problem+json body for a client whose Accept prefers JSON, and a
// short text saying why and how long to wait for any other. err says why;
// policies are the zones that denied.
func deny(w http.ResponseWriter, r *http.Request, v *verdict, err error, policies []string) error {
	if hasErrorRoutes(r) {
		return caddyhttp.Error(http.StatusTooManyRequests, err)
	}
	if !prefersJSON(r.Header.Get("Accept")) {
		if r.Context().Value(caddyhttp.ServerCtxKey) == nil {
			return caddyhttp.Error(http.StatusTooManyRequests, err) // served outside a Caddy server
		}
		hdr := w.Header()
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		hdr.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusTooManyRequests)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, "429 Too Many Requests: %v; retry in %d s\n", err, v.retryAfter)
		}
		return nil
	}
	body, jerr := json.Marshal(problem{
		Type:             problemQuotaExceeded,
		Title:            problemTitle,
		Status:           http.StatusTooManyRequests,
		Detail:           fmt.Sprintf("%s; retry in %d s", err, v.retryAfter),
		ViolatedPolicies: policies,
	})
	if jerr != nil {
		return caddyhttp.Error(http.StatusTooManyRequests, err)
	}
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
	return nil
}

// hasErrorRoutes reports whether the request's server has handle_errors
// routes: they shape every denial, JSON or not.
func hasErrorRoutes(r *http.Request) bool {
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	return srv != nil && srv.Errors != nil && len(srv.Errors.Routes) > 0
}

// prefersJSON reports whether an Accept header prefers application/json or
// application/problem+json (or application/*) to text: its weight for them
// is above 0 and at least that of any text/* range. A missing Accept, or
// one of only */*, is text.
func prefersJSON(accept string) bool {
	if accept == "" {
		return false
	}
	jsonQ, textQ := -1.0, -1.0
	for part := range strings.SplitSeq(accept, ",") {
		media, params, _ := strings.Cut(part, ";")
		media = strings.ToLower(strings.TrimSpace(media))
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					q = f
				}
			}
		}
		switch {
		case media == "application/json" || media == problemContentType || media == "application/*":
			jsonQ = max(jsonQ, q)
		case strings.HasPrefix(media, "text/"):
			textQ = max(textQ, q)
		}
	}
	return jsonQ > 0 && jsonQ >= textQ
}
