package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/tollgate/tollgate/adminapi"
)

// invocation is what every subcommand uses: where the admin endpoint is,
// how to print.
type invocation struct {
	addr   string
	json   bool
	zone   string
	listen string
	tier   string // client's --tier
	// The flags of block and allow: --for, --reason and --remove.
	forDuration string
	reason      string
	remove      bool
	out         io.Writer
	client      *http.Client
	origin      string // the base of admin URLs
	// originHeader is the Origin sent to the admin endpoint: its own
	// address, or none on a unix socket, as caddy reload does.
	originHeader string
}

// newInvocation reads the flags every subcommand takes and sets up the
// admin endpoint's client.
func newInvocation(fl caddycmd.Flags, out io.Writer) (*invocation, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin address: %v; give it with --address", err)
	}
	parsed, err := caddy.ParseNetworkAddress(addr)
	if err != nil || parsed.PortRangeSize() > 1 || !strings.HasPrefix(parsed.Network, "tcp") && !parsed.IsUnixNetwork() && !parsed.IsFdNetwork() {
		return nil, fmt.Errorf("--address %q is not an admin address: want host:port, e.g. localhost:2019 (no http://), or unix//path", addr)
	}
	c := &invocation{addr: addr, json: fl.Bool("json"), out: out, origin: "http://" + parsed.JoinHostPort(0)}
	c.originHeader = c.origin
	if f := fl.Lookup("zone"); f != nil {
		c.zone = f.Value.String()
	}
	if f := fl.Lookup("tier"); f != nil {
		c.tier = f.Value.String()
	}
	if f := fl.Lookup("listen"); f != nil {
		c.listen = f.Value.String()
	}
	if f := fl.Lookup("for"); f != nil {
		c.forDuration = f.Value.String()
	}
	if f := fl.Lookup("reason"); f != nil {
		c.reason = f.Value.String()
	}
	if f := fl.Lookup("remove"); f != nil {
		c.remove = f.Value.String() == "true"
	}
	if parsed.IsUnixNetwork() || parsed.IsFdNetwork() {
		// As caddy reload does: a bogus host, no Origin (Caddy refuses
		// one on a socket), and the socket's path without the
		// permission bits the admin option may give it ("|0660").
		c.origin, c.originHeader = "http://127.0.0.1", ""
		if path, _, ok := strings.Cut(parsed.Host, "|"); ok && parsed.IsUnixNetwork() {
			parsed.Host = path
		}
	}
	if _, err := url.Parse(c.origin); err != nil {
		return nil, fmt.Errorf("--address %q is not an admin address: want host:port, e.g. localhost:2019, or unix//path", addr)
	}
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, parsed.Network, parsed.JoinHostPort(0))
		},
	},
		// A redirect from the admin endpoint is an answer, never followed:
		// following one would send the request (a DELETE, say) to a route
		// it was not meant for.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// errNotJSON is returned by call when a 2xx answer is not the JSON it
// expected.
var errNotJSON = errors.New("not JSON")

// apiError is an error answer of the admin API.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// call sends a request to the admin API and decodes a 2xx answer into
// out; it returns the raw answer for --json. headers are extra request
// headers, name then value.
func (c *invocation) call(method, path string, body any, out any, headers ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.origin+path, rd)
	if err != nil {
		return nil, err
	}
	if c.originHeader != "" {
		req.Header.Set("Origin", c.originHeader)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, &apiError{status: 0, msg: fmt.Sprintf("cannot reach Caddy's admin endpoint at %s: %v; is Caddy running? Name its admin address (the admin global option) with --address", c.addr, errors.Unwrap(err))}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s %s: %v", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e adminapi.Error
		if json.Unmarshal(raw, &e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(raw))
		}
		msg := e.Message
		if resp.StatusCode == http.StatusNotFound && strings.Contains(msg, "no route") {
			msg += "; is this Caddy built with Tollgate, and --address its admin endpoint?"
		}
		return nil, &apiError{status: resp.StatusCode, msg: msg}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("%w: %s %s answered what this command does not understand (%v); is --address Caddy's admin endpoint (the admin global option), and caddy the same version as the running one?", errNotJSON, method, path, err)
		}
	}
	return raw, nil
}

// exitFor maps an error to an exit code.
func exitFor(err error) int {
	var ae *apiError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ae) && ae.status == 0:
		return exitUnreachable
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		return exitNotFound
	}
	return exitRefused
}

// printJSON prints an answer as it came, indented.
func (c *invocation) printJSON(raw []byte) (int, error) {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Reset()
		buf.Write(raw)
	}
	buf.WriteString("\n")
	_, err := c.out.Write(bytes.TrimRight(buf.Bytes(), "\n"))
	fmt.Fprintln(c.out)
	return exitOK, err
}

// table starts a table on the output.
func (c *invocation) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
}

// zoneQuery is the query of --zone, if given: "?zone=…".
func (c *invocation) zoneQuery() string {
	if c.zone == "" {
		return ""
	}
	return "?" + adminapi.QueryZone + "=" + url.QueryEscape(c.zone)
}

// readList reads the list at path, pageSize at a time, page after page,
// at most maxPages pages (0: all); query is added to each page's (a zone,
// say). It returns the items, the nodes the last page says did not
// answer, and whether pages were left unread.
func readList[T any](c *invocation, path string, pageSize int, query string, maxPages int) (items []T, unreachable []string, cut bool, err error) {
	cursor := ""
	for pages := 0; ; pages++ {
		if pages == maxPages && maxPages > 0 {
			return items, unreachable, true, nil
		}
		p := path + "?" + adminapi.QueryLimit + "=" + strconv.Itoa(pageSize) + query
		if cursor != "" {
			p += "&" + adminapi.QueryCursor + "=" + url.QueryEscape(cursor)
		}
		var page adminapi.Page[T]
		if _, err := c.call(http.MethodGet, p, nil, &page); err != nil {
			return nil, nil, false, err
		}
		items = append(items, page.Items...)
		unreachable = page.Unreachable
		if cursor = page.NextCursor; cursor == "" {
			return items, unreachable, false, nil
		}
	}
}
