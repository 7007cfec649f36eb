package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
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
// the identifier (which reads and signs session cookies) and IP pressure.
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
			if err := checkSecret(i+1, v); err != nil {
				return nil, fmt.Errorf("tollgate: %w", err)
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

// validateIdentity checks the identity settings that provisioning does
// not: the identifier and IP pressure check their own (the IP prefixes, the
// cookie's name and max age, pressure's bounds) as they are built.
func (a *App) validateIdentity() error {
	if err := a.Cookie.validate(); err != nil {
		return err
	}
	return validateNetworkShare("tollgate: network_share", a.NetworkShare)
}
