package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request is what a rule's Match sees of a request. Body is the whole body;
// Match must not modify it.
type Request struct {
	Method string
	Path   string
	// Target is the X-Amz-Target header: the operation of an AWS JSON
	// protocol request ("DynamoDB_20120810.PutItem", "AmazonSQS.ReceiveMessage").
	Target string
	Header http.Header
	Body   []byte
}

// Match decides whether a rule applies to a request.
type Match func(Request) bool

// Any matches every request.
func Any(Request) bool { return true }

// Target matches requests whose X-Amz-Target is one of ops, each either a
// whole target ("DynamoDB_20120810.UpdateItem") or its operation after the
// dot ("UpdateItem").
func Target(ops ...string) Match {
	return func(r Request) bool {
		op := r.Target[strings.LastIndexByte(r.Target, '.')+1:]
		for _, o := range ops {
			if r.Target != "" && (o == r.Target || o == op) {
				return true
			}
		}
		return false
	}
}

// TargetPrefix matches requests whose X-Amz-Target starts with prefix: a
// whole service ("DynamoDB_", "AmazonSQS.").
func TargetPrefix(prefix string) Match {
	return func(r Request) bool { return strings.HasPrefix(r.Target, prefix) }
}

// BodyContains matches requests whose body contains s.
func BodyContains(s string) Match {
	return func(r Request) bool { return bytes.Contains(r.Body, []byte(s)) }
}

// PathPrefix matches requests whose URL path starts with prefix.
func PathPrefix(prefix string) Match {
	return func(r Request) bool { return strings.HasPrefix(r.Path, prefix) }
}

// All matches requests every one of ms matches.
func All(ms ...Match) Match {
	return func(r Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
}

// Fault is what a rule does to a request it takes. Build one with Respond,
// AWSError, Drop or Hang.
type Fault struct {
	kind   faultKind
	status int
	header http.Header
	body   []byte
	hang   time.Duration
	shift  time.Duration
}

type faultKind int

const (
	kindRespond faultKind = iota + 1
	kindDrop
	kindHang
	kindShiftDate
)

// String describes the fault, for test logs.
func (f Fault) String() string {
	switch f.kind {
	case kindRespond:
		return fmt.Sprintf("respond %d", f.status)
	case kindDrop:
		return "drop the answer"
	case kindHang:
		return fmt.Sprintf("hang %s", f.hang)
	case kindShiftDate:
		return fmt.Sprintf("shift the answer's Date by %s", f.shift)
	}
	return "no fault"
}

// Respond answers with status, the header and body, without forwarding.
// header may be nil.
func Respond(status int, header http.Header, body string) Fault {
	return Fault{kind: kindRespond, status: status, header: header, body: []byte(body)}
}

// AWSError answers as an AWS JSON protocol service reports an error:
// status, and a body naming the error type (for DynamoDB
// "InternalServerError", "ThrottlingException",
// "ProvisionedThroughputExceededException") that the SDK turns into its
// typed error.
func AWSError(status int, errType, message string) Fault {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#" + errType, "message": message})
	h := http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Errortype": {errType}}
	return Respond(status, h, string(body))
}

// Drop forwards the request and discards the answer, closing the client's
// connection: the upstream applied the request, the client cannot know.
func Drop() Fault { return Fault{kind: kindDrop} }

// Hang holds the request for d, then forwards it; if the client gives up
// first, nothing is forwarded.
func Hang(d time.Duration) Fault { return Fault{kind: kindHang, hang: d} }

// ShiftDate forwards the request and moves its answer's Date header by d
// (the upstream's Date, or the proxy's clock when it sent none): the client
// sees a server whose clock is d ahead of its own (behind when d < 0), as a
// client whose clock is off by -d would.
func ShiftDate(d time.Duration) Fault { return Fault{kind: kindShiftDate, shift: d} }

// Rule is a fault applied to the requests it matches, with a probability.
type Rule struct {
	// Name identifies the rule in test logs.
	Name string
	// Match selects the requests. Defaults to Any.
	Match Match
	// Probability is the chance that a matching request gets the fault.
	// Defaults to 1 (every matching request: an outage while the rule is on).
	Probability float64
	// Limit, if positive, is how many times the fault is injected; after
	// that, matching requests pass. Defaults to 0 (no limit).
	Limit int64
	// Fault is what happens to the request.
	Fault Fault

	on       atomic.Bool
	matched  atomic.Int64
	injected atomic.Int64
}

// On switches the rule on (a rule is on when added).
func (r *Rule) On() { r.on.Store(true) }

// Off switches the rule off: requests pass it by from now on. A request it
// is already holding (Hang) is not released early.
func (r *Rule) Off() { r.on.Store(false) }

// Matched is how many requests matched the rule while it was on, whether or
// not the draw injected the fault.
func (r *Rule) Matched() int64 { return r.matched.Load() }

// Injected is how many requests got the fault.
func (r *Rule) Injected() int64 { return r.injected.Load() }

// String describes the rule and its counters.
func (r *Rule) String() string {
	return fmt.Sprintf("%s (%s): matched %d, injected %d", r.Name, r.Fault, r.Matched(), r.Injected())
}

// Proxy is a fault-injecting reverse proxy. Create one with Start.
type Proxy struct {
	// URL is where clients send requests: http://127.0.0.1:port.
	URL string

	upstream *url.URL
	srv      *http.Server
	ln       net.Listener
	client   *http.Client
	requests atomic.Int64

	mu    sync.Mutex // guards rules and rng
	rules []*Rule
	rng   *rand.Rand
}

// Start serves a proxy to upstream (a base URL) on 127.0.0.1 at a free
// port. seed makes the probability draws repeatable.
func Start(upstream string, seed uint64) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q: want an absolute URL", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{
		URL:      "http://" + ln.Addr().String(),
		upstream: u,
		ln:       ln,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		// No redirects, no timeout of its own: the client decides how long
		// it waits, and its giving up cancels the forwarded request.
		client: &http.Client{
			Transport:     &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy, closing every connection (a held request ends).
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.client.CloseIdleConnections()
	return err
}

// Add puts r after the rules already there, switched on, and returns it.
func (p *Proxy) Add(r *Rule) *Rule {
	if r.Match == nil {
		r.Match = Any
	}
	if r.Probability == 0 {
		r.Probability = 1
	}
	r.On()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
	return r
}

// Requests is how many requests the proxy has received.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// pick returns the fault for req, or nil to forward it.
func (p *Proxy) pick(req Request) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if !r.on.Load() || !r.Match(req) {
			continue
		}
		r.matched.Add(1)
		if r.Limit > 0 && r.injected.Load() >= r.Limit {
			continue
		}
		if r.Probability < 1 && p.rng.Float64() >= r.Probability {
			continue
		}
		r.injected.Add(1)
		return r
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "faultproxy: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	rule := p.pick(Request{Method: r.Method, Path: r.URL.Path, Target: r.Header.Get("X-Amz-Target"), Header: r.Header, Body: body})
	if rule == nil {
		p.forward(w, r, body)
		return
	}
	f := rule.Fault
	switch f.kind {
	case kindRespond:
		for k, vs := range f.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(f.status)
		_, _ = w.Write(f.body)
	case kindDrop:
		resp, err := p.roundTrip(r, body)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		hangUp(w)
	case kindHang:
		t := time.NewTimer(f.hang)
		defer t.Stop()
		select {
		case <-t.C:
			p.forward(w, r, body)
		case <-r.Context().Done():
		}
	case kindShiftDate:
		p.forwardWith(w, r, body, func(h http.Header) {
			date, err := http.ParseTime(h.Get("Date"))
			if err != nil {
				date = time.Now()
			}
			h.Set("Date", date.Add(f.shift).UTC().Format(http.TimeFormat))
		})
	default:
		p.forward(w, r, body)
	}
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): aborting the handler resets the stream.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// roundTrip sends the request upstream, cancelled when the client gives up.
func (p *Proxy) roundTrip(r *http.Request, body []byte) (*http.Response, error) {
	u := *p.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	out.Header.Del("Connection")
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	return p.client.Do(out)
}

// forward relays the request and its answer unchanged.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	p.forwardWith(w, r, body, nil)
}

// forwardWith relays the request and its answer, whose header edit (if
// any) may change first.
func (p *Proxy) forwardWith(w http.ResponseWriter, r *http.Request, body []byte, edit func(http.Header)) {
	resp, err := p.roundTrip(r, body)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return // the client gave up
		}
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	if edit != nil {
		edit(w.Header())
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
