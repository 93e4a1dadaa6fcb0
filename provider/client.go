package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// StatusSucceeded is the status of a successful charge.
const StatusSucceeded = "succeeded"

// Charge is the provider's answer to a successful charge.
type Charge struct {
	// ID is the provider's charge id, the result to store for the key.
	ID string `json:"id"`
	// Status is StatusSucceeded.
	Status string `json:"status"`
	// Replayed reports that the answer carried Idempotent-Replayed: true: the
	// provider returned the stored result of an earlier request with the key.
	Replayed bool `json:"-"`
	// Attempts is the number of HTTP requests the charge took.
	Attempts int `json:"-"`
}

// Config configures a Client.
type Config struct {
	// BaseURL is the provider's address, such as "http://127.0.0.1:8080";
	// charges go to BaseURL + "/v1/charges". It must have no user info and
	// no query; errors and logs show only its scheme and host. Required.
	BaseURL string
	// Timeout bounds each HTTP attempt, from sending the request to reading
	// the whole answer. Defaults to 10s.
	Timeout time.Duration
	// MaxAttempts bounds the HTTP requests per Charge. Defaults to 4.
	MaxAttempts int
	// MinBackoff is the ceiling of the first wait between attempts; the
	// ceiling doubles per attempt up to MaxBackoff, and each wait is drawn
	// uniformly below it (full jitter). Defaults to 100ms.
	MinBackoff time.Duration
	// MaxBackoff caps every wait, including one a Retry-After asks for.
	// Defaults to 5s.
	MaxBackoff time.Duration
	// APIKey, if set, is sent as "Authorization: Bearer <APIKey>". It is never
	// logged or printed: Config's String, Format and LogValue redact it.
	// Defaults to "" (no Authorization header).
	APIKey string `json:"-"`
	// Logger, if set, gets a debug line per retried attempt and a warn line
	// when a call's attempts are exhausted. Defaults to nil (silent).
	Logger *slog.Logger
	// HTTPClient sends the requests; its Timeout, if any, applies on top of
	// Timeout, and its redirect policy is followed as is. Defaults to a client
	// with keep-alives, 64 idle connections per host and no redirects.
	HTTPClient *http.Client
}

const redacted = "[redacted]"

// String describes c with APIKey redacted.
func (c Config) String() string {
	key := `""`
	if c.APIKey != "" {
		key = redacted
	}
	hc := "nil"
	if c.HTTPClient != nil {
		hc = "set"
	}
	return fmt.Sprintf("provider.Config{BaseURL:%q Timeout:%v MaxAttempts:%d MinBackoff:%v MaxBackoff:%v APIKey:%s HTTPClient:%s}",
		redactURL(c.BaseURL), c.Timeout, c.MaxAttempts, c.MinBackoff, c.MaxBackoff, key, hc)
}

// Format prints String for every verb, so that no formatting of a Config
// (%v, %+v, %#v, %s, %d ...) shows APIKey.
func (c Config) Format(f fmt.State, _ rune) {
	_, _ = io.WriteString(f, c.String())
}

// LogValue logs c with APIKey redacted.
func (c Config) LogValue() slog.Value {
	key := ""
	if c.APIKey != "" {
		key = redacted
	}
	return slog.GroupValue(
		slog.String("base_url", redactURL(c.BaseURL)),
		slog.String("timeout", c.Timeout.String()),
		slog.Int("max_attempts", c.MaxAttempts),
		slog.String("min_backoff", c.MinBackoff.String()),
		slog.String("max_backoff", c.MaxBackoff.String()),
		slog.String("api_key", key),
	)
}

// redactURL is what a URL may show: its scheme and host. User info, path
// and query (where API keys are put) are dropped; a URL that does not
// parse shows as a placeholder.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[unparsable URL]"
	}
	if u.Scheme == "" && u.Host == "" {
		return "[URL without scheme and host]"
	}
	return u.Scheme + "://" + u.Host
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 4
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Second
	}
	return c
}

// validate checks a Config after withDefaults.
func (c Config) validate() error {
	var errs []error
	if strings.TrimSpace(c.BaseURL) == "" {
		errs = append(errs, errors.New("BaseURL is required"))
	} else if u, err := url.Parse(c.BaseURL); err != nil {
		// url.Error quotes the whole URL, password and all: say only what is wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		errs = append(errs, fmt.Errorf("BaseURL is not a URL: %w", err))
	} else {
		// Only the scheme and host are shown: user info and a query are
		// where credentials are put, and both are refused.
		shown := redactURL(c.BaseURL)
		if u.Scheme != "http" && u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("BaseURL %q: scheme must be http or https", shown))
		}
		if u.Host == "" {
			errs = append(errs, fmt.Errorf("BaseURL %q: host is missing", shown))
		}
		if u.User != nil {
			errs = append(errs, fmt.Errorf("BaseURL %q: must have no user info (the API key goes in APIKey)", shown))
		}
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("BaseURL %q: must have no query or fragment", shown))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout must be > 0, got %v", c.Timeout))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts must be > 0, got %d", c.MaxAttempts))
	}
	if c.MinBackoff < 0 {
		errs = append(errs, fmt.Errorf("MinBackoff must be > 0, got %v", c.MinBackoff))
	}
	if c.MaxBackoff < 0 {
		errs = append(errs, fmt.Errorf("MaxBackoff must be > 0, got %v", c.MaxBackoff))
	}
	if c.MinBackoff > c.MaxBackoff && c.MaxBackoff > 0 {
		errs = append(errs, fmt.Errorf("MinBackoff (%v) must not exceed MaxBackoff (%v)", c.MinBackoff, c.MaxBackoff))
	}
	if c.APIKey != "" && !validHeaderValue(c.APIKey) {
		errs = append(errs, errors.New("APIKey must be printable ASCII without leading or trailing space"))
	}
	return errors.Join(errs...)
}

func validHeaderValue(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Client charges payments at one provider. It is safe for concurrent use;
// create one and share it.
type Client struct {
	url         string
	hc          *http.Client
	log         *slog.Logger
	stats       clientStats
	timeout     time.Duration
	maxAttempts int
	minBackoff  time.Duration
	maxBackoff  time.Duration

	// Header values shared by every request (never modified).
	auth      []string
	jsonType  []string
	userAgent []string
}

// NewClient returns a Client for cfg, or an error naming every bad field.
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	c := &Client{
		url:         strings.TrimRight(cfg.BaseURL, "/") + ChargesPath,
		hc:          hc,
		log:         cfg.Logger,
		timeout:     cfg.Timeout,
		maxAttempts: cfg.MaxAttempts,
		minBackoff:  cfg.MinBackoff,
		maxBackoff:  cfg.MaxBackoff,
		jsonType:    []string{"application/json"},
		userAgent:   []string{"claimfirst-provider-client/1"},
	}
	if cfg.APIKey != "" {
		c.auth = []string{"Bearer " + cfg.APIKey}
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		// A redirected POST may turn into a GET or go somewhere unexpected;
		// a charge is never redirected, so the 3xx is returned as an answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CloseIdleConnections closes the idle keep-alive connections of the
// client's HTTP client.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// maxResponseBytes bounds how much of an answer is read.
const maxResponseBytes = 64 << 10

// Charge asks the provider to charge p under key. Every attempt carries key
// as its Idempotency-Key, so a provider that honours keys charges at most
// once per key and replays the first result to later attempts, including
// those of a later Charge (a redelivered message). Outcomes that are
// unknown are retried up to MaxAttempts, with backoff, until ctx ends.
// Every error is an *Error; a key or payment that can never be sent (see
// CheckKey and Payment.Validate) fails with KindBadRequest before any
// request.
func (c *Client) Charge(ctx context.Context, key string, p Payment) (Charge, error) {
	if err := CheckKey(key); err != nil {
		return Charge{}, &Error{Kind: KindBadRequest, Reason: err.Error()}
	}
	if err := p.Validate(); err != nil {
		return Charge{}, &Error{Kind: KindBadRequest, Reason: strings.ReplaceAll(err.Error(), "\n", "; ")}
	}
	body, err := json.Marshal(p)
	if err != nil { // unreachable: Payment always marshals
		return Charge{}, &Error{Kind: KindBadRequest, Err: err}
	}
	keyHeader := []string{key}
	var ch Charge
	attempts, e := c.retry(ctx, "charge", func(ctx context.Context) (*Error, string) {
		var e *Error
		var retryAfter string
		ch, e, retryAfter = c.attempt(ctx, keyHeader, body)
		return e, retryAfter
	})
	if e != nil {
		return Charge{}, e
	}
	ch.Attempts = attempts
	return ch, nil
}

// retry runs one attempt after another, with backoff, until one succeeds,
// fails for good, MaxAttempts is reached or ctx ends. It returns the
// attempts made and the last error (nil on success). Each attempt gets its
// own Timeout.
func (c *Client) retry(ctx context.Context, op string, try func(ctx context.Context) (*Error, string)) (int, *Error) {
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return attempt - 1, &Error{Kind: KindUnknown, Attempts: attempt - 1, Err: err}
		}
		c.stats.attempts.Add(1)
		e, retryAfter := try(ctx)
		if e == nil {
			return attempt, nil
		}
		e.Attempts = attempt
		if !e.Retryable() {
			return attempt, e
		}
		if attempt >= c.maxAttempts {
			c.exhausted(op, e)
			return attempt, e
		}
		if ctx.Err() != nil {
			return attempt, stopped(e, ctx.Err())
		}
		wait := c.backoff(attempt, retryAfter, time.Now())
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return attempt, stopped(e, fmt.Errorf("next attempt in %v is past the context deadline: %w", wait, context.DeadlineExceeded))
		}
		c.stats.retries.Add(1)
		if c.log != nil {
			c.log.Debug("provider: retrying", slog.String("op", op), slog.Int("attempt", attempt),
				slog.String("wait", wait.String()), slog.Any("error", e))
		}
		if err := sleep(ctx, &timer, wait); err != nil {
			return attempt, stopped(e, err)
		}
	}
}

func (c *Client) exhausted(op string, e *Error) {
	c.stats.exhausted.Add(1)
	if c.log != nil {
		c.log.Warn("provider: attempts exhausted", slog.String("op", op), slog.Int("attempts", e.Attempts), slog.Any("error", e))
	}
}

// sleep waits d or until ctx ends, reusing *timer across calls.
func sleep(ctx context.Context, timer **time.Timer, d time.Duration) error {
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Reset(d)
	}
	select {
	case <-ctx.Done():
		(*timer).Stop()
		return ctx.Err()
	case <-(*timer).C:
		return nil
	}
}

// stopped is the error of a retry loop that the context ended after last.
func stopped(last *Error, cause error) *Error {
	e := *last
	if last.Err != nil {
		e.Err = fmt.Errorf("%w (last attempt: %w)", cause, last.Err)
	} else {
		e.Err = cause
	}
	return &e
}

// attempt makes one charge request. It returns the charge, or the error and
// the answer's Retry-After header.
func (c *Client) attempt(ctx context.Context, key []string, body []byte) (Charge, *Error, string) {
	a, e := c.send(ctx, http.MethodPost, c.url, body, key)
	if e != nil {
		return Charge{}, e, ""
	}
	if a.readErr != nil && a.status >= 200 && a.status < 300 {
		// Charged, probably, but the id is lost: ask again with the key.
		return Charge{}, a.readErr, ""
	}
	ch, e := classify(a.status, a.header.Get("Idempotent-Replayed"), a.body)
	if e != nil {
		return Charge{}, e, a.header.Get("Retry-After")
	}
	return ch, nil, ""
}

// answer is one HTTP answer of the provider, its body read up to
// maxResponseBytes.
type answer struct {
	status int
	header http.Header
	body   []byte
	// readErr is the error reading the body ended with, as a transport
	// error (nil if it was read whole).
	readErr *Error
}

// send makes one request, within Timeout, with the client's headers (and
// Idempotency-Key when key is set). A request that got no answer fails
// with a transport error.
func (c *Client) send(ctx context.Context, method, url string, body []byte, key []string) (answer, *Error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, url, rd)
	if err != nil { // unreachable: the URL was validated
		return answer{}, &Error{Kind: KindBadRequest, Err: err}
	}
	if key != nil {
		req.Header["Idempotency-Key"] = key
	}
	if body != nil {
		req.Header["Content-Type"] = c.jsonType
	}
	req.Header["Accept"] = c.jsonType
	req.Header["User-Agent"] = c.userAgent
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, c.transportError(ctx, actx, 0, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		a.readErr = c.transportError(ctx, actx, resp.StatusCode, err)
	}
	// Drain a little so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return a, nil
}

func (c *Client) transportError(ctx, actx context.Context, status int, err error) *Error {
	// *url.Error quotes the request's whole URL: show its scheme and host.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	if ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", c.timeout, err)
	}
	return &Error{Kind: KindUnknown, StatusCode: status, NotSent: status == 0 && notSent(err), Err: err}
}

// notSent reports whether err shows that the request never left: the
// connection was refused (or the address could not be resolved), so nothing
// reached the provider.
func notSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// classify turns an answer into a charge or an error. It reads nothing but
// its arguments, so it can be fuzzed.
func classify(status int, replayed string, body []byte) (Charge, *Error) {
	if status >= 200 && status < 300 {
		var ch Charge
		if err := json.Unmarshal(body, &ch); err != nil {
			return Charge{}, &Error{Kind: KindUnknown, StatusCode: status, Reason: "undecodable success answer", Err: err}
		}
		if ch.ID == "" {
			return Charge{}, &Error{Kind: KindUnknown, StatusCode: status, Reason: "success answer without a charge id"}
		}
		if ch.Status != StatusSucceeded {
			return Charge{}, &Error{Kind: KindUnknown, StatusCode: status, Reason: "charge status is " + strconv.Quote(clip(printable(ch.Status)))}
		}
		ch.Replayed = strings.EqualFold(replayed, "true")
		return ch, nil
	}
	e := &Error{Kind: kindOf(status), StatusCode: status}
	var er ErrorResponse
	if json.Unmarshal(body, &er) == nil {
		e.Type = printable(er.Error.Type)
		e.Reason = printable(er.Error.Message)
	}
	if e.Reason == "" {
		e.Reason = http.StatusText(status)
	}
	return Charge{}, e
}

func kindOf(status int) Kind {
	switch {
	case status == http.StatusPaymentRequired:
		return KindDeclined
	case status == http.StatusUnprocessableEntity:
		return KindKeyMismatch
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooManyRequests, status >= 500:
		return KindUnknown
	case status == http.StatusBadRequest:
		return KindBadRequest
	default:
		return KindDependency
	}
}

// maxReasonBytes bounds the provider text copied into an Error.
const maxReasonBytes = 256

// printable makes provider text safe for one log line: valid UTF-8, control
// characters replaced by spaces, at most maxReasonBytes bytes.
func printable(s string) string {
	if len(s) > maxReasonBytes {
		i := maxReasonBytes
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f || s[i] >= utf8.RuneSelf {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// backoff returns the wait before the attempt after attempt: full jitter
// below a ceiling that doubles from MinBackoff up to MaxBackoff, and no less
// than the answer's Retry-After, itself capped at MaxBackoff.
func (c *Client) backoff(attempt int, retryAfter string, now time.Time) time.Duration {
	ceiling := c.maxBackoff
	if shift := attempt - 1; shift < 62 {
		if d := c.minBackoff << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	var wait time.Duration
	if ceiling > 0 {
		wait = rand.N(ceiling)
	}
	if ra, ok := parseRetryAfter(retryAfter, now); ok && ra > wait {
		wait = min(ra, c.maxBackoff)
	}
	return wait
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// A date in the past means no wait.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
				return time.Duration(1<<63 - 1), true
			}
			return 0, false
		}
		if n > uint64((1<<63-1)/time.Second) {
			return time.Duration(1<<63 - 1), true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
