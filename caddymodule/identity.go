package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// CookieConfig is the session cookie Tollgate issues to clients.
type CookieConfig struct {
	// Name of the cookie. Default: __tollgate.
	Name string `json:"name,omitempty"`

	// MaxAge is how long a cookie stays valid after it was issued; one in
	// use is issued again once past half of it. Default: 720h (30 days).
	MaxAge caddy.Duration `json:"max_age,omitempty"`

	// Issue says who gets a cookie: "always" (default: every client
	// without a valid one, on an allowed request), "header" (only when the
	// upstream response carries IssueHeader, which is then removed: a site
	// that runs its own challenge decides who earns a cookie) or "off".
	Issue string `json:"issue,omitempty"`

	// IssueHeader is the response header that earns a cookie when Issue
	// is "header".
	IssueHeader string `json:"issue_header,omitempty"`

	// IssueLimit is how many new sessions one IP network (see IPv4Prefix,
	// IPv6Prefix) may be given per IssueWindow, squeezed by IP pressure, so
	// that a client cannot mint fresh budgets by throwing cookies away or
	// rotating headers. A client that may not get a session stays on the
	// cookie-less path, under its network's budget. Default: 30 per hour,
	// enough for an office behind one address to get its sessions on a
	// first morning.
	IssueLimit int64 `json:"issue_limit,omitempty"`

	// IssueWindow is the period of IssueLimit. Default: 1h.
	IssueWindow caddy.Duration `json:"issue_window,omitempty"`

	// Challenge, when set, makes a browser without a session pass a
	// challenge before it is given one: its page loads (GET with an Accept
	// naming text/html) get a small self-contained page that solves a proof
	// of work and comes back with a session. Other clients are not
	// challenged and are given no session: they stay on the cookie-less
	// path, under their network's budget. Default: off.
	Challenge *ChallengeConfig `json:"challenge,omitempty"`
}

// The values of CookieConfig.Issue.
const (
	issueAlways = "always"
	issueHeader = "header"
	issueOff    = "off"
)

// Defaults of cookie issuance.
const (
	defaultIssueLimit  = 30
	defaultIssueWindow = time.Hour
)

// PressureConfig is IP pressure: too many distinct cookie-less fingerprints
// from one IP network shrink that network's cookie-less limits for a while.
type PressureConfig struct {
	// Off disables IP pressure.
	Off bool `json:"off,omitempty"`

	// Threshold is how many distinct fingerprints a network may show per
	// Window before it is squeezed. Default: 20.
	Threshold int `json:"threshold,omitempty"`

	// Window is the period fingerprints are counted over. Default: 10m.
	Window caddy.Duration `json:"window,omitempty"`

	// Squeeze multiplies the limits of a squeezed network's cookie-less
	// clients, above 0 and at most 1. Default: 0.5.
	Squeeze float64 `json:"squeeze,omitempty"`

	// Duration is how long a network stays squeezed. Default: 1h.
	Duration caddy.Duration `json:"duration,omitempty"`

	// MaxNetworks bounds how many networks are watched. Default: 65536.
	MaxNetworks int `json:"max_networks,omitempty"`
}

func (p *PressureConfig) settings() fingerprint.PressureConfig {
	return fingerprint.PressureConfig{
		Threshold:   p.Threshold,
		Window:      time.Duration(p.Window),
		Squeeze:     p.Squeeze,
		Duration:    time.Duration(p.Duration),
		MaxNetworks: p.MaxNetworks,
	}
}

// secretStorageKey is where a generated secret is kept in Caddy's storage.
const secretStorageKey = "tollgate/secret"

// provisionIdentity sets up client identity for this config: the secrets,
// the identifier and cookie policy, and IP pressure.
func (a *App) provisionIdentity(ctx caddy.Context) error {
	secrets, err := a.resolveSecrets(ctx)
	if err != nil {
		return err
	}
	cookie := a.Cookie
	if cookie == nil {
		cookie = new(CookieConfig)
	}
	a.identifier, err = fingerprint.NewIdentifier(fingerprint.Config{
		Secrets:      secrets,
		CookieName:   cookie.Name,
		CookieMaxAge: time.Duration(cookie.MaxAge),
		Prefixes:     fingerprint.Prefixes{IPv4: a.IPv4Prefix, IPv6: a.IPv6Prefix},
	})
	if err != nil {
		return fmt.Errorf("tollgate: %w", err)
	}
	a.hashSecret = secrets[len(secrets)-1]
	a.hasher = limiter.NewHasher(a.hashSecret)

	a.issue = cookie.Issue
	if a.issue == "" {
		a.issue = issueAlways
	}
	a.issueHeader = http.CanonicalHeaderKey(cookie.IssueHeader)
	limit, window := cookie.IssueLimit, time.Duration(cookie.IssueWindow)
	if limit == 0 {
		limit = defaultIssueLimit
	}
	if window == 0 {
		window = defaultIssueWindow
	}
	a.issueLimit = limiter.Limit{Algorithm: limiter.SlidingWindow, Quota: limit, Window: window}
	a.issueZone = a.hasher.Zone("\x00tollgate cookie issuance")
	if cookie.Challenge != nil {
		if a.challenge, err = newChallenger(ctx, cookie.Challenge, a.hashSecret, a.hasher); err != nil {
			return err
		}
	}

	if a.IPPressure == nil || !a.IPPressure.Off {
		cfg := new(PressureConfig)
		if a.IPPressure != nil {
			cfg = a.IPPressure
		}
		a.pressure, err = a.state.pressureFor(cfg.settings())
		if err != nil {
			return fmt.Errorf("tollgate: ip_pressure: %w", err)
		}
	}
	return nil
}

// resolveSecrets returns the configured secrets with their placeholders
// replaced, or, with none configured, the one kept in Caddy's storage,
// generated on first use.
func (a *App) resolveSecrets(ctx caddy.Context) ([][]byte, error) {
	if len(a.Secrets) > 0 {
		repl := caddy.NewReplacer()
		out := make([][]byte, len(a.Secrets))
		for i, s := range a.Secrets {
			v := repl.ReplaceKnown(s, "")
			if strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("tollgate: secret #%d (%s) is empty", i+1, s)
			}
			if len(v) < fingerprint.MinSecretLen {
				return nil, fmt.Errorf("tollgate: secret #%d is %d bytes; it must be at least %d (e.g. openssl rand -base64 48)", i+1, len(v), fingerprint.MinSecretLen)
			}
			out[i] = []byte(v)
		}
		return out, nil
	}
	secret, generated, err := storedSecret(ctx, ctx.Storage())
	if err != nil {
		return nil, fmt.Errorf("tollgate: no secret configured, and %w", err)
	}
	if generated {
		a.logger.Info("no secret configured: generated one and stored it in Caddy's storage; configure `secret` in the tollgate global option for a cluster",
			zap.String("storage_key", secretStorageKey))
	}
	return [][]byte{secret}, nil
}

// storage is the part of Caddy's storage a generated secret needs.
type storage interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// storedSecret loads the secret kept in storage, creating it under the
// storage lock if there is none, so that instances sharing a storage agree.
func storedSecret(ctx context.Context, st storage) (secret []byte, generated bool, err error) {
	if v, err := st.Load(ctx, secretStorageKey); err == nil && len(v) >= fingerprint.MinSecretLen {
		return v, false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("loading the stored secret: %w", err)
	}
	if err := st.Lock(ctx, secretStorageKey); err != nil {
		return nil, false, fmt.Errorf("locking the stored secret: %w", err)
	}
	defer st.Unlock(ctx, secretStorageKey)
	if v, err := st.Load(ctx, secretStorageKey); err == nil && len(v) >= fingerprint.MinSecretLen {
		return v, false, nil // another instance made it meanwhile
	}
	raw := make([]byte, 48)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("generating a secret: %w", err)
	}
	secret = []byte(base64.RawURLEncoding.EncodeToString(raw))
	if err := st.Store(ctx, secretStorageKey, secret); err != nil {
		return nil, false, fmt.Errorf("storing a generated secret: %w", err)
	}
	return secret, true, nil
}

// validateIdentity checks the identity settings that need no provisioning.
func (a *App) validateIdentity() error {
	if err := (fingerprint.Prefixes{IPv4: a.IPv4Prefix, IPv6: a.IPv6Prefix}).Validate(); err != nil {
		return fmt.Errorf("tollgate: ip_prefix: %w", err)
	}
	if c := a.Cookie; c != nil {
		switch c.Issue {
		case "", issueAlways, issueOff:
			if c.IssueHeader != "" {
				return fmt.Errorf("tollgate: cookie issue_header %q is only used with issue header", c.IssueHeader)
			}
		case issueHeader:
			if c.IssueHeader == "" {
				return fmt.Errorf("tollgate: cookie issue header needs a header name")
			}
		default:
			return fmt.Errorf("tollgate: cookie issue %q: must be always, header <name> or off", c.Issue)
		}
		if c.IssueLimit < 0 || c.IssueLimit > limiter.MaxQuota {
			return fmt.Errorf("tollgate: cookie issue_limit %d: must be a whole number from 1 to %d", c.IssueLimit, int64(limiter.MaxQuota))
		}
		if c.Challenge != nil {
			if err := c.Challenge.validate(); err != nil {
				return err
			}
			if c.Issue == issueOff || c.Issue == issueHeader {
				return fmt.Errorf("tollgate: cookie challenge needs issue always: the challenge is what earns a session")
			}
		}
		if c.IssueWindow < 0 || c.MaxAge < 0 {
			return fmt.Errorf("tollgate: cookie durations must be positive")
		}
	}
	if err := validateNetworkShare("tollgate: network_share", a.NetworkShare); err != nil {
		return err
	}
	if p := a.IPPressure; p != nil && !p.Off {
		if err := p.settings().Validate(); err != nil {
			return fmt.Errorf("tollgate: ip_pressure: %w", err)
		}
	}
	return nil
}
