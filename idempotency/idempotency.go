package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/once"
)

// DefaultHeader is the request header that carries the key.
const DefaultHeader = "Idempotency-Key"

// ReplayedHeader marks a replayed response: "Idempotent-Replayed: true".
const ReplayedHeader = "Idempotent-Replayed"

// MaxStorableResponseBytes is the largest Options.MaxResponseBytes: the body
// is stored base64-encoded in the claim, and a DynamoDB item holds 400 KB.
const MaxStorableResponseBytes = 256 << 10

// Options configure the middleware.
type Options struct {
	// Store holds the claims and the stored responses. Required.
	Store claimstore.Store
	// Header is the request header that carries the key. Defaults to
	// "Idempotency-Key".
	Header string
	// Required makes a request without a key a 400; otherwise it passes to
	// the handler unclaimed. Defaults to false.
	Required bool
	// Methods are the request methods the middleware claims; others pass
	// through. Defaults to POST and PATCH.
	Methods []string
	// Scope returns the prefix of a request's key in the store (a route, an
	// API), so that one table serves many APIs and keys of different scopes
	// never meet: the scope is stored apart from the key (StoreKey). Prefix
	// builds a constant one. Defaults to none.
	Scope func(r *http.Request) string
	// Client names the client that sent a request (an account, an
	// authenticated principal): every key is bound to it, so that a client
	// that sends another client's key never gets that client's response.
	// Principal and AuthorizationHash (keyed with a server Secret) build
	// one. An error answers 401
	// without running the handler. Required unless SharedKeys is set.
	// Defaults to nil.
	Client func(r *http.Request) (string, error)
	// SharedKeys says that keys are not bound to a client: every client
	// shares one key space. UNSAFE for an API with more than one client:
	// whoever sends another client's key (guessed, or seen in a log) with
	// the same request gets that client's stored response, and the handler,
	// with any authorization inside it, does not run. Only for an API with
	// a single client. Defaults to false.
	SharedKeys bool
	// ReleaseStatuses are the non-5xx statuses that release the key as a
	// 5xx does: answers that say nothing about the operation, so that a
	// retry runs the handler again rather than replaying them. An empty,
	// non-nil list releases on 5xx only. Defaults to 401, 403, 408 and 429.
	ReleaseStatuses []int
	// MaxKeyBytes is the longest key accepted, without the scope. Defaults to 255.
	MaxKeyBytes int
	// MaxRequestBytes bounds the request body the fingerprint reads: a
	// larger one gets 413. Defaults to 1 MiB.
	MaxRequestBytes int64
	// MaxResponseBytes is the largest response stored for replay, its body
	// and stored headers counted together, at most MaxStorableResponseBytes.
	// Defaults to 64 KiB.
	MaxResponseBytes int
	// StoredHeaders are the response headers stored and replayed. Defaults
	// to Content-Type, Content-Language, Content-Location and Location.
	StoredHeaders []string
	// Fingerprint says what a request is: a repeat of the key with another
	// fingerprint gets 422. body is the whole request body. Defaults to a
	// SHA-256 of the method, the escaped URL path, the query and the body
	// (RequestFingerprint).
	Fingerprint func(r *http.Request, body []byte) string
	// Lease is how long the first request holds its key without a renewal;
	// it is renewed while the handler runs. Defaults to 30s.
	Lease time.Duration
	// Retention is how long a key's response is kept for replay. Defaults to 24h.
	Retention time.Duration
	// RetryAfter is the most a 409 asks the client to wait (the answer
	// never asks past the holder's lease, and at least one second). Defaults to 1s.
	RetryAfter time.Duration
	// Owner names this server in its claims, for diagnostics. Defaults to
	// "idempotency".
	Owner string
	// Reject writes the answer to a request the middleware refuses, in the
	// API's own error format; it should send rej.RetryAfterSeconds() as
	// Retry-After where there is one. Defaults to Rejection.WriteProblem
	// (application/problem+json).
	Reject func(w http.ResponseWriter, r *http.Request, rej Rejection)
	// Observe, if set, is told every request's outcome (for metrics); it is
	// called concurrently, and must not block. Defaults to nil.
	Observe func(r *http.Request, o Outcome)
	// Logger logs lost leases and responses that could not be stored.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Prefix returns a Scope that prefixes every key with p.
func Prefix(p string) func(*http.Request) string {
	return func(*http.Request) string { return p }
}

// ErrNoClient means a request does not say which client sent it: a Client
// function found no principal or no Authorization header.
var ErrNoClient = errors.New("idempotency: the request does not identify its client")

// Principal returns a Client that reads the authenticated principal an
// outer middleware put in the request's context under ctxKey: a string, or
// a fmt.Stringer. A request without one gets ErrNoClient (401).
// Authentication belongs outside this middleware, so that an
// unauthenticated request never reaches a key.
func Principal(ctxKey any) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		var p string
		switch v := r.Context().Value(ctxKey).(type) {
		case string:
			p = v
		case fmt.Stringer:
			p = v.String()
		}
		if p == "" {
			return "", ErrNoClient
		}
		return p, nil
	}
}

func (o *Options) setDefaults() {
	if o.Header == "" {
		o.Header = DefaultHeader
	}
	if len(o.Methods) == 0 {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if o.Scope == nil {
		o.Scope = Prefix("")
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = 255
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = 1 << 20
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = 64 << 10
	}
	if o.ReleaseStatuses == nil {
		o.ReleaseStatuses = []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests}
	}
	if o.StoredHeaders == nil {
		o.StoredHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location"}
	}
	if o.Fingerprint == nil {
		o.Fingerprint = RequestFingerprint
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Owner == "" {
		o.Owner = "idempotency"
	}
	if o.Reject == nil {
		o.Reject = func(w http.ResponseWriter, _ *http.Request, rej Rejection) { rej.WriteProblem(w) }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("Store is required"))
	}
	if o.Client == nil && !o.SharedKeys {
		errs = append(errs, errors.New("Client is required: keys must be bound to the client that sends them (Principal, AuthorizationHash), unless SharedKeys says every client shares them"))
	}
	if o.Client != nil && o.SharedKeys {
		errs = append(errs, errors.New("Client and SharedKeys are exclusive"))
	}
	for _, st := range o.ReleaseStatuses {
		if st < 200 || st > 499 {
			errs = append(errs, fmt.Errorf("ReleaseStatuses must be 200 to 499 (every 5xx releases), got %d", st))
		}
	}
	if o.MaxKeyBytes < 1 || o.MaxKeyBytes > claimstore.MaxKeyBytes {
		errs = append(errs, fmt.Errorf("MaxKeyBytes must be 1 to %d, got %d", claimstore.MaxKeyBytes, o.MaxKeyBytes))
	}
	if o.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes must not be negative, got %d", o.MaxRequestBytes))
	}
	if o.MaxResponseBytes < 0 || o.MaxResponseBytes > MaxStorableResponseBytes {
		errs = append(errs, fmt.Errorf("MaxResponseBytes must be 1 to %d, got %d", MaxStorableResponseBytes, o.MaxResponseBytes))
	}
	if o.Lease < 0 || o.Retention < 0 || o.RetryAfter < 0 {
		errs = append(errs, errors.New("Lease, Retention and RetryAfter must not be negative"))
	}
	return errors.Join(errs...)
}

// Outcome is what the middleware did with a request, as Options.Observe
// sees it.
type Outcome string

// The outcomes of a request.
const (
	// Executed: the first request with its key ran the handler, and its
	// response is stored.
	Executed Outcome = "executed"
	// Replayed: a repeat got the stored response.
	Replayed Outcome = "replayed"
	// Released: the handler answered 5xx, one of Options.ReleaseStatuses,
	// panicked, or returned without writing after its context ended (503);
	// the key is free again.
	Released Outcome = "released"
	// InFlight: a repeat came while the first request ran (409).
	InFlight Outcome = "in_flight"
	// Mismatch: the key was used with another fingerprint (422).
	Mismatch Outcome = "mismatch"
	// MissingKey: a required key was missing (400).
	MissingKey Outcome = "missing_key"
	// InvalidKey: the key was too long or malformed (400).
	InvalidKey Outcome = "invalid_key"
	// RequestTooLarge: the body was over MaxRequestBytes (413).
	RequestTooLarge Outcome = "request_too_large"
	// NotReplayable: a repeat of a key whose response was too large to
	// store (500); the handler ran once and does not run again.
	NotReplayable Outcome = "not_replayable"
	// StoreFailed: the claim store failed; before the handler ran that is a
	// 503, after it the response was written but not stored.
	StoreFailed Outcome = "store_failed"
	// LeaseLost: the handler's claim was lost while it ran; its response
	// was written but not stored.
	LeaseLost Outcome = "lease_lost"
	// Unkeyed: a request without a key where none is required passed through.
	Unkeyed Outcome = "unkeyed"
	// NoClient: Options.Client could not name the request's client (401).
	NoClient Outcome = "no_client"
)

// Rejection is an answer the middleware gives instead of the handler's.
type Rejection struct {
	// Status is the HTTP status: 400, 401, 409, 413, 422, 500 or 503.
	Status int
	// Outcome says why.
	Outcome Outcome
	// Detail explains it to the client in a sentence.
	Detail string
	// RetryAfter, for 409 and 503, is when to try again; zero otherwise.
	RetryAfter time.Duration
}

// RetryAfterSeconds is RetryAfter as the value of a Retry-After header:
// whole seconds, rounded up; "" if there is none.
func (rej Rejection) RetryAfterSeconds() string {
	if rej.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64(math.Ceil(rej.RetryAfter.Seconds())), 10)
}

// WriteProblem writes rej as an RFC 9457 problem (application/problem+json),
// with Retry-After when rej has one.
func (rej Rejection) WriteProblem(w http.ResponseWriter) {
	if s := rej.RetryAfterSeconds(); s != "" {
		w.Header().Set("Retry-After", s)
	}
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(rej.Status), rej.Status, rej.Detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(rej.Status)
	_, _ = w.Write(body)
}

// RequestFingerprint is the default fingerprint: a SHA-256 of the method,
// the URL path as sent (escaped: /a%2Fb and /a/b are two paths), the raw
// query (with whether there was a "?") and the body, each prefixed with its
// length so that no two requests run together.
func RequestFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	query := ""
	if r.URL.ForceQuery || r.URL.RawQuery != "" {
		query = "?" + r.URL.RawQuery
	}
	for _, field := range [][]byte{[]byte(r.Method), []byte(r.URL.EscapedPath()), []byte(query), body} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(field)))
		_, _ = h.Write(n[:])
		_, _ = h.Write(field)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ScopeSeparator stands between a scope and the rest of a stored key
// (StoreKey). A key never contains it (keys with control characters are
// refused), so keys of different scopes never meet: scopes "pay" and
// "payout" store key "out-1" and key "-1" as "pay\x1eout-1" and
// "payout\x1e-1". It is the ASCII record separator, U+001E.
const ScopeSeparator = "\x1e"

// StoreKey is the key in the store of the request key key, sent by client
// (what Options.Client named; "" with SharedKeys) in scope (what
// Options.Scope returned), for a tool that reads the store beside the
// middleware. The client is stored as a fixed-length tag, the first 128
// bits of a SHA-256 of its name, so that its name never reaches the store
// and cannot run into the key: tag, "#", key. A non-empty scope comes
// first, then ScopeSeparator; without a scope the layout is as it always
// was.
func StoreKey(scope, client, key string) string {
	if client != "" {
		tag := sha256.Sum256([]byte(client))
		key = hex.EncodeToString(tag[:16]) + "#" + key
	}
	if scope == "" {
		return key
	}
	return scope + ScopeSeparator + key
}

// callKey is the context key of the handler's once.Call.
type callKey struct{}

// FromContext returns the claim a handler runs under: its key (scoped),
// fencing token and first acquisition. ok is false outside the middleware.
func FromContext(ctx context.Context) (c once.Call, ok bool) {
	c, ok = ctx.Value(callKey{}).(once.Call)
	return c, ok
}

// New returns the middleware for opts, or an error naming each bad option.
func New(opts Options) (func(http.Handler) http.Handler, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	m := &middleware{o: opts, methods: make(map[string]bool, len(opts.Methods)), release: make(map[int]bool, len(opts.ReleaseStatuses))}
	for _, meth := range opts.Methods {
		m.methods[meth] = true
	}
	for _, st := range opts.ReleaseStatuses {
		m.release[st] = true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}, nil
}

type middleware struct {
	o       Options
	methods map[string]bool
	release map[int]bool
}

// errReleased is the failure a 5xx response (or one of ReleaseStatuses)
// makes of the handler's call: the claim is released.
type errReleased struct{ status int }

func (e errReleased) Error() string { return fmt.Sprintf("handler answered %d", e.status) }

// errUnanswered is the failure of a handler that returned without writing
// anything after its context ended: the claim is released.
type errUnanswered struct{ cause error }

func (e errUnanswered) Error() string {
	return fmt.Sprintf("handler returned without answering after its context ended: %v", e.cause)
}

func (m *middleware) observe(r *http.Request, o Outcome) {
	if m.o.Observe != nil {
		m.o.Observe(r, o)
	}
}

func (m *middleware) reject(w http.ResponseWriter, r *http.Request, rej Rejection) {
	m.observe(r, rej.Outcome)
	m.o.Reject(w, r, rej)
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(m.o.Header)
	if len(values) == 0 || values[0] == "" && len(values) == 1 {
		if m.o.Required {
			m.reject(w, r, Rejection{Status: http.StatusBadRequest, Outcome: MissingKey, Detail: "the " + m.o.Header + " header is missing"})
			return
		}
		m.observe(r, Unkeyed)
		next.ServeHTTP(w, r)
		return
	}
	key, err := m.parseKey(values)
	if err != nil {
		m.reject(w, r, Rejection{Status: http.StatusBadRequest, Outcome: InvalidKey, Detail: err.Error()})
		return
	}
	var client string
	if m.o.Client != nil {
		client, err = m.o.Client(r)
		if err != nil || client == "" {
			m.reject(w, r, Rejection{Status: http.StatusUnauthorized, Outcome: NoClient, Detail: "the request does not say which client sent it"})
			return
		}
	}
	storeKey := StoreKey(m.o.Scope(r), client, key)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.o.MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			m.reject(w, r, Rejection{Status: http.StatusRequestEntityTooLarge, Outcome: RequestTooLarge,
				Detail: fmt.Sprintf("the request body is larger than %d bytes", m.o.MaxRequestBytes)})
			return
		}
		m.reject(w, r, Rejection{Status: http.StatusBadRequest, Outcome: RequestTooLarge, Detail: "the request body could not be read"})
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fingerprint := m.o.Fingerprint(r, body)

	// The claim is held (renewed, completed) on a context that the client
	// going away does not end, bounded by the request's own deadline: the
	// handler's work, once begun, is finished and stored for the retry.
	ctx := context.WithoutCancel(r.Context())
	if deadline, ok := r.Context().Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var rec *recorder
	res, err := once.Run(ctx, m.o.Store, storeKey, once.Options{
		Owner: m.o.Owner, Fingerprint: fingerprint, Lease: m.o.Lease, Retention: m.o.Retention,
	}, func(ctx context.Context, c once.Call) (string, error) {
		rec = &recorder{w: w, max: m.o.MaxResponseBytes}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, callKey{}, c)))
		if !rec.wrote {
			if err := ctx.Err(); err != nil {
				// Stopped by the deadline before it answered: it has not
				// said the operation is done, so a retry runs it.
				return "", errUnanswered{context.Cause(ctx)}
			}
			rec.WriteHeader(http.StatusOK)
		}
		if rec.status >= 500 || m.release[rec.status] {
			return "", errReleased{rec.status}
		}
		return m.encode(rec)
	})
	log := m.o.Logger.With(slog.String("idempotency_key", key), slog.String("method", r.Method), slog.String("path", r.URL.Path))
	var held *once.HeldError
	var reused *once.KeyReusedError
	switch {
	case err == nil && res.Replayed:
		m.replay(w, r, res.Value)
	case err == nil:
		m.observe(r, Executed)
		if rec.over || rec.tooLarge {
			log.Warn("response too large to store: repeats of the key will get 500", slog.Int64("body_bytes", rec.size),
				slog.Int("max_response_bytes", m.o.MaxResponseBytes))
		}
	case rec != nil && errors.As(err, new(errUnanswered)):
		// Nothing reached the client: tell it, if it still listens, to retry.
		m.reject(w, r, Rejection{Status: http.StatusServiceUnavailable, Outcome: Released, RetryAfter: m.o.RetryAfter,
			Detail: "the request was not completed before its deadline; retry with the same " + m.o.Header})
	case rec != nil: // the handler ran and wrote its answer; only the claim is left
		var se errReleased
		switch {
		case errors.As(err, &se):
			m.observe(r, Released)
		case errors.Is(err, once.ErrResultTooLarge):
			m.observe(r, Executed)
			log.Warn("response too large to store with its headers: repeats of the key will get 500", slog.Any("error", err))
		case errors.Is(err, once.ErrLeaseLost):
			m.observe(r, LeaseLost)
			log.Warn("lease lost while the handler ran: its response was not stored", slog.Any("error", err))
		default:
			m.observe(r, StoreFailed)
			log.Error("the handler's response could not be stored", slog.Any("error", err))
		}
	case errors.As(err, &held):
		m.reject(w, r, Rejection{Status: http.StatusConflict, Outcome: InFlight, RetryAfter: m.retryAfter(held.Until),
			Detail: "a request with this " + m.o.Header + " is still being processed"})
	case errors.As(err, &reused) && !reused.HeldUntil.IsZero():
		// Nothing is stored yet to compare with: it is in flight, as for a repeat.
		m.reject(w, r, Rejection{Status: http.StatusConflict, Outcome: InFlight, RetryAfter: m.retryAfter(reused.HeldUntil),
			Detail: "a request with this " + m.o.Header + " is still being processed"})
	case errors.As(err, &reused):
		m.reject(w, r, Rejection{Status: http.StatusUnprocessableEntity, Outcome: Mismatch,
			Detail: "this " + m.o.Header + " was used with a different request"})
	case errors.Is(err, once.ErrResultTooLarge):
		m.reject(w, r, Rejection{Status: http.StatusInternalServerError, Outcome: NotReplayable,
			Detail: "the request with this " + m.o.Header + " was processed, but its response was too large to store and cannot be replayed"})
	case errors.Is(err, claimstore.ErrInvalidKey):
		m.reject(w, r, Rejection{Status: http.StatusBadRequest, Outcome: InvalidKey, Detail: "the " + m.o.Header + " is too long or not valid UTF-8"})
	default:
		log.Error("claim store failed", slog.Any("error", err))
		m.reject(w, r, Rejection{Status: http.StatusServiceUnavailable, Outcome: StoreFailed, RetryAfter: m.o.RetryAfter,
			Detail: "the idempotency store is unavailable; retry with the same " + m.o.Header})
	}
}

// parseKey returns the key in the header's values, or what is wrong with
// it. The draft defines the header as a Structured Field string ("..."),
// parsed as RFC 8941 says; a bare value is taken as it is, because clients
// written before the draft send bare UUIDs, and a quoted key and the same
// key bare are one key.
func (m *middleware) parseKey(values []string) (string, error) {
	h := m.o.Header
	if len(values) > 1 {
		return "", fmt.Errorf("the %s header is sent %d times", h, len(values))
	}
	key := values[0]
	if strings.HasPrefix(key, `"`) {
		var err error
		if key, err = parseSFString(key); err != nil {
			return "", fmt.Errorf("the %s is not a valid structured-field string: %w", h, err)
		}
		if key == "" {
			return "", fmt.Errorf("the %s is empty", h)
		}
	}
	return key, m.checkKey(key)
}

// parseSFString parses an RFC 8941 sf-string: printable ASCII between
// double quotes, with \" and \\ the only escapes.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || v[i] != '"' && v[i] != '\\' {
				return "", errors.New("a backslash escapes only \" and \\")
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("characters after the closing quote")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte 0x%02x is not printable ASCII", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("no closing quote")
}

// checkKey reports what is wrong with a key.
func (m *middleware) checkKey(key string) error {
	h := m.o.Header
	switch {
	case len(key) > m.o.MaxKeyBytes:
		return fmt.Errorf("the %s is %d bytes, more than %d", h, len(key), m.o.MaxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("the %s is not valid UTF-8", h)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("the %s has a control character at byte %d", h, i)
		}
	}
	return nil
}

// retryAfter is the wait a 409 asks for: RetryAfter, or less if the
// holder's lease ends sooner.
func (m *middleware) retryAfter(until time.Time) time.Duration {
	d := m.o.RetryAfter
	if left := time.Until(until); left < d {
		d = left
	}
	return max(d, time.Second)
}

// response is a response as stored with the claim.
type response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// TooLarge says that the response, of BodyBytes with its stored
	// headers, was over MaxResponseBytes
	// and was not stored: the response cannot be replayed.
	TooLarge  bool  `json:"too_large,omitempty"`
	BodyBytes int64 `json:"body_bytes,omitempty"`
}

// maxEncodedBytes bounds a stored response as encoded (JSON, the body in
// base64), under DynamoDB's 400 KB item with the claim's own attributes.
const maxEncodedBytes = 360 << 10

// encode is rec as stored: its status, stored headers and body, or, when
// the headers and body together are over MaxResponseBytes, a marker that
// the response was too large to store.
func (m *middleware) encode(rec *recorder) (string, error) {
	resp := response{Status: rec.status, Header: http.Header{}}
	size := rec.size
	for _, name := range m.o.StoredHeaders {
		if vs := rec.header.Values(name); len(vs) > 0 {
			name = http.CanonicalHeaderKey(name)
			resp.Header[name] = vs
			for _, v := range vs {
				size += int64(len(name) + len(v))
			}
		}
	}
	if !rec.over && size <= int64(m.o.MaxResponseBytes) {
		resp.Body = rec.body.Bytes()
		if b, err := json.Marshal(resp); err != nil || len(b) <= maxEncodedBytes {
			return string(b), err
		}
	}
	rec.tooLarge = true
	b, err := json.Marshal(response{Status: rec.status, TooLarge: true, BodyBytes: size})
	return string(b), err
}

func (m *middleware) replay(w http.ResponseWriter, r *http.Request, stored string) {
	var resp response
	if err := json.Unmarshal([]byte(stored), &resp); err != nil || resp.Status < 200 {
		m.reject(w, r, Rejection{Status: http.StatusInternalServerError, Outcome: NotReplayable,
			Detail: "the stored result of this " + m.o.Header + " is not a response"})
		return
	}
	if resp.TooLarge {
		m.reject(w, r, Rejection{Status: http.StatusInternalServerError, Outcome: NotReplayable,
			Detail: fmt.Sprintf("the request with this %s was processed, but its response (%d bytes with its headers, more than the %d stored) cannot be replayed",
				m.o.Header, resp.BodyBytes, m.o.MaxResponseBytes)})
		return
	}
	m.observe(r, Replayed)
	for name, vs := range resp.Header {
		w.Header()[name] = vs
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder passes the handler's response through to the client and keeps
// a copy of its status, headers and body, up to max body bytes.
type recorder struct {
	w      http.ResponseWriter
	max    int
	wrote  bool
	status int
	header http.Header // as at WriteHeader
	body   bytes.Buffer
	size   int64
	over   bool
	// tooLarge: the response, headers and body, was too large to store.
	tooLarge bool
}

// Header implements http.ResponseWriter.
func (r *recorder) Header() http.Header { return r.w.Header() }

// WriteHeader implements http.ResponseWriter.
func (r *recorder) WriteHeader(code int) {
	if r.wrote {
		return
	}
	if code >= 100 && code < 200 { // informational: passed on, not the answer
		r.w.WriteHeader(code)
		return
	}
	r.wrote, r.status, r.header = true, code, r.w.Header().Clone()
	r.w.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	r.size += int64(len(b))
	if !r.over {
		if r.body.Len()+len(b) > r.max {
			r.over = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(b)
		}
	}
	return r.w.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// Flush implements http.Flusher for handlers that stream.
func (r *recorder) Flush() {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.w).Flush()
}
