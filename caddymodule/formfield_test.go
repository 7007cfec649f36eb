package caddymodule

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// formUpstream checks a login form's password and notes the hash of
// every body it received.
type formUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[[32]byte]int
}

func newFormUpstream(t *testing.T) *formUpstream {
	u := &formUpstream{bodies: map[[32]byte]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies[sha256.Sum256(body)]++
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.PostFormValue("password") != "right" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "welcome "+r.PostFormValue("username"))
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *formUpstream) received(body []byte) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies[sha256.Sum256(body)]
}

// formLoginSite counts failed logins of a form by the username typed in.
func formLoginSite(upstream string) string {
	return fmt.Sprintf(`
	route {
		tollgate {
			zone login {
				limit 5 15m
				key {http.tollgate.form.username}
				count_response {
					status 401
				}
				match {
					method POST
				}
			}
		}
		handle /login {
			reverse_proxy %s
		}
		header Content-Type "text/html; charset=utf-8"
		respond `+"`"+`<!doctype html><title>log in</title><form method="post" action="/login"><input name="username" id="u"><input name="password" id="p" type="password"><button id="go">log in</button></form>`+"`"+`
	}
	handle_errors 429 {
		respond "too many attempts" 429
	}`, upstream)
}

// A form's username keys the zone: its 6th wrong password is denied while
// another user's is not, whatever the encoding; the upstream gets every
// admitted body byte for byte.
func TestFormFieldKeysTheZone(t *testing.T) {
	for _, encoding := range []string{"urlencoded", "multipart"} {
		t.Run(encoding, func(t *testing.T) {
			up := newFormUpstream(t)
			srv := startCaddy(t, "", formLoginSite(up.URL))
			post := func(user, password string) int {
				body, ctype := formBody(t, encoding, user, password)
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", bytes.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				resp := srv.do(req)
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests && up.received(body) == 0 {
					t.Fatalf("the upstream did not receive the body as sent (%d)", resp.StatusCode)
				}
				return resp.StatusCode
			}
			for i := range 5 {
				if s := post("alice", "wrong"); s != http.StatusUnauthorized {
					t.Fatalf("alice's wrong password %d: %d, want 401", i+1, s)
				}
			}
			if s := post("alice", "wrong"); s != http.StatusTooManyRequests {
				t.Fatalf("alice's 6th wrong password: %d, want 429", s)
			}
			if s := post("bob", "right"); s != http.StatusOK {
				t.Fatalf("bob's login: %d, want 200", s)
			}
		})
	}
}

// A body larger than form_max_size, or without the field, is counted by
// the client ID, and still reaches the upstream whole.
func TestFormFieldFallsBackOnLargeBodies(t *testing.T) {
	up := newFormUpstream(t)
	srv := startCaddy(t, "", strings.Replace(formLoginSite(up.URL), "tollgate {", "tollgate {\n\t\t\tform_max_size 100", 1))
	big := url.Values{"username": {"carol"}, "password": {"wrong"}, "padding": {strings.Repeat("x", 200)}}.Encode()
	for i := range 5 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(big))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp := srv.do(req)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("large body %d: %d", i, resp.StatusCode)
		}
	}
	if up.received([]byte(big)) != 5 {
		t.Fatalf("the upstream got the large body %d times whole, want 5", up.received([]byte(big)))
	}
	if !strings.Contains(srv.logs(), "rendered empty") {
		t.Fatal("a key that fell back to the client ID was not reported")
	}
}

func formBody(t *testing.T, encoding, user, password string) ([]byte, string) {
	if encoding == "urlencoded" {
		return []byte(url.Values{"username": {user}, "password": {password}}.Encode()), "application/x-www-form-urlencoded"
	}
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("username", user)
	mw.WriteField("password", password)
	fw, _ := mw.CreateFormFile("avatar", "a.png")
	fw.Write([]byte("\x89PNG not really"))
	mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

// A login form posted by headless Chromium: the 6th wrong password of a
// username is refused, while the same browser logging in as another user
// is not.
func TestFormLoginInChromium(t *testing.T) {
	up := newFormUpstream(t)
	srv := startCaddy(t, "", formLoginSite(up.URL))
	b := startBrowser(t)
	submit := func(user, password string) string {
		var text string
		b.run("opening the form", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#go", chromedp.ByID))
		b.run("typing and submitting as "+user,
			chromedp.SendKeys("#u", user, chromedp.ByID),
			chromedp.SendKeys("#p", password, chromedp.ByID),
			chromedp.Submit("#go", chromedp.ByID),
		)
		// The page navigates: ask again until the answer's page is there.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var done bool
			err := chromedp.Run(b.ctx, chromedp.Evaluate(`location.pathname == "/login" && document.readyState == "complete"`, &done))
			if err == nil && done && chromedp.Run(b.ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &text)) == nil {
				return strings.TrimSpace(text)
			}
		}
		t.Fatalf("no answer to %s's login", user)
		return ""
	}
	for i := range 5 {
		if got := submit("mallory", "guess"); got != "wrong password" {
			t.Fatalf("wrong password %d: page says %q", i+1, got)
		}
	}
	if got := submit("mallory", "guess"); got != "too many attempts" {
		t.Fatalf("6th wrong password: page says %q, want the 429", got)
	}
	if got := submit("trent", "right"); got != "welcome trent" {
		t.Fatalf("another user in the same browser: page says %q", got)
	}
}
