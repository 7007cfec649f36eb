// Command loadgen drives HTTP/1.1 keep-alive load at a server on loopback and
// reports what it got, as one JSON line. Each connection uses its own source
// address in 127.0.0.0/8, so a server that limits per client IP sees as many
// clients as there are connections.
//
//	loadgen -url http://127.0.0.1:8080/ -c 32 -d 5s -pipeline 8
//
// It speaks just enough HTTP to be cheap: a fixed request, pipelined, and
// responses read by their Content-Length, so that the server, not the load
// generator, runs out of CPU first and is what is measured.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Report is what loadgen prints.
type Report struct {
	Requests  int64         `json:"requests"`
	Errors    int64         `json:"errors"`
	Status    map[int]int64 `json:"status"`
	Seconds   float64       `json:"seconds"`
	PerSecond float64       `json:"per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
}

func main() {
	target := flag.String("url", "http://127.0.0.1:8080/", "URL to GET; several, comma-separated, are spread over the connections")
	conns := flag.Int("c", 32, "connections, each from its own 127.0.0.0/8 address")
	duration := flag.Duration("d", 5*time.Second, "how long to send")
	pipeline := flag.Int("pipeline", 1, "requests written at once on a connection before reading their responses")
	cookies := flag.Bool("cookies", false, "keep the cookie a connection is given and send it back, as a browser does")
	addrs := flag.Int("addrs", 0, "source addresses the connections share, round robin (0: one per connection)")
	base := flag.Int("addr-base", 0, "index of the first source address, so that runs can use addresses of their own")
	flag.Parse()

	var targets []*url.URL
	var gens []*requests
	for _, raw := range strings.Split(*target, ",") {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" {
			fmt.Fprintf(os.Stderr, "loadgen: -url %q: need http:// URLs\n", raw)
			os.Exit(2)
		}
		targets = append(targets, u)
		gens = append(gens, &requests{
			head:     "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: tollgate-loadgen\r\nAccept-Language: en\r\n",
			pipeline: max(1, *pipeline),
			cookies:  *cookies,
		})
	}

	var (
		mu        sync.Mutex
		report    = Report{Status: map[int]int64{}}
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(*duration)
	start := time.Now()
	for i := range *conns {
		wg.Go(func() {
			a := i
			if *addrs > 0 {
				a = i % *addrs
			}
			a += *base
			src := &net.TCPAddr{IP: net.IPv4(127, 1, byte(a>>8), byte(a&0xff)+1)}
			status, lat, errs := run(targets[i%len(targets)].Host, src, gens[i%len(gens)], deadline)
			mu.Lock()
			defer mu.Unlock()
			for code, n := range status {
				report.Status[code] += n
				report.Requests += n
			}
			report.Errors += errs
			latencies = append(latencies, lat...)
		})
	}
	wg.Wait()
	report.Seconds = time.Since(start).Seconds()
	report.PerSecond = float64(report.Requests) / report.Seconds
	if len(latencies) > 0 {
		slices.Sort(latencies)
		report.P50 = latencies[len(latencies)/2]
		report.P99 = latencies[len(latencies)*99/100]
	}
	json.NewEncoder(os.Stdout).Encode(report)
}

// requests builds the batches a connection sends.
type requests struct {
	head     string // request line and headers, without the final CRLF
	pipeline int
	cookies  bool
}

// batch returns pipeline requests, carrying cookie if it is set.
func (g *requests) batch(cookie string) []byte {
	one := g.head
	if cookie != "" {
		one += "Cookie: " + cookie + "\r\n"
	}
	return []byte(strings.Repeat(one+"\r\n", g.pipeline))
}

// run sends batches of pipelined requests on one connection until deadline,
// reconnecting after errors, and returns the statuses seen, a sample of
// batch latencies and the number of errors.
func run(host string, src *net.TCPAddr, gen *requests, deadline time.Time) (map[int]int64, []time.Duration, int64) {
	status := map[int]int64{}
	var lat []time.Duration
	var errs int64
	dialer := net.Dialer{LocalAddr: src, Timeout: 2 * time.Second}
	for n := 0; time.Now().Before(deadline); {
		conn, err := dialer.Dial("tcp", host)
		if err != nil {
			errs++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r := bufio.NewReaderSize(conn, 16<<10)
		tp := textproto.NewReader(r)
		cookie := ""
		request := gen.batch("")
		for time.Now().Before(deadline) {
			t := time.Now()
			if _, err = conn.Write(request); err != nil {
				break
			}
			for range gen.pipeline {
				var code int
				var setCookie string
				if code, setCookie, err = readResponse(tp, r); err != nil {
					break
				}
				status[code]++
				if gen.cookies && setCookie != "" && cookie == "" {
					cookie, _, _ = strings.Cut(setCookie, ";")
					request = gen.batch(cookie)
				}
			}
			if err != nil {
				break
			}
			if n++; n%16 == 0 {
				lat = append(lat, time.Since(t))
			}
		}
		if err != nil {
			errs++
		}
		conn.Close()
	}
	return status, lat, errs
}

// readResponse reads one response and returns its status code and its
// first Set-Cookie header.
func readResponse(tp *textproto.Reader, r *bufio.Reader) (int, string, error) {
	line, err := tp.ReadLine()
	if err != nil {
		return 0, "", err
	}
	_, rest, _ := strings.Cut(line, " ")
	code, err := strconv.Atoi(rest[:min(3, len(rest))])
	if err != nil {
		return 0, "", fmt.Errorf("status line %q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return 0, "", err
	}
	n, err := strconv.Atoi(hdr.Get("Content-Length"))
	if err != nil {
		return 0, "", fmt.Errorf("response without Content-Length")
	}
	_, err = io.CopyN(io.Discard, r, int64(n))
	return code, hdr.Get("Set-Cookie"), err
}
