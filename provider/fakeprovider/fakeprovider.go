package fakeprovider

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
	"github.com/claimfirst/claimfirst/provider"
)

// Config configures a Server. The zero Config is a well-behaved provider.
type Config struct {
	// FailBeforeCharge is the fraction of keys whose first attempt gets 503
	// without charging; the key stays unused, so a retry charges. Which keys
	// is decided by a hash of the key, the same in every run. Defaults to 0.
	FailBeforeCharge float64
	// ChargeThenTimeout is the fraction of keys whose first attempt charges
	// and then answers only after TimeoutDelay (or when the request is
	// cancelled, or the Server is closed): the caller sees a timeout though
	// the charge happened, and a retry with the key gets it replayed. Chosen
	// by a hash of the key like FailBeforeCharge, independently of it.
	// Defaults to 0.
	ChargeThenTimeout float64
	// TimeoutDelay is how long a ChargeThenTimeout answer is held back.
	// Defaults to 30s.
	TimeoutDelay time.Duration
	// Latency is added to every charge request while its key is held in
	// progress: the time charging takes. Defaults to 0.
	Latency time.Duration
	// IgnoreKeys makes every valid request charge anew, with or without a
	// key: the provider that shows what happens without idempotency keys.
	// Faults still apply to each key's (or, without a key, each payment's)
	// first request. Defaults to false.
	IgnoreKeys bool
	// FailFirst, if set, chooses the keys whose first attempt fails before
	// charging instead of FailBeforeCharge. Defaults to nil.
	FailFirst func(key string, p provider.Payment) bool
	// TimeoutFirst, if set, chooses the keys whose first attempt charges and
	// then times out instead of ChargeThenTimeout. A key chosen by both fails
	// before charging on its first attempt and is then no longer new.
	// Defaults to nil.
	TimeoutFirst func(key string, p provider.Payment) bool
	// KeyLifetime is how long a key is remembered after its first use: a
	// request with it after that is a new request and charges again, as with
	// a provider that prunes keys (Stripe: after 24 hours). Charges stay
	// listed by the lookup. Defaults to 0: keys are never forgotten.
	KeyLifetime time.Duration
	// DisableLookup makes GET /v1/charges answer 404, as a provider that
	// cannot look charges up. Defaults to false.
	DisableLookup bool
	// Now is the clock of KeyLifetime and of the charges' creation times.
	// Defaults to time.Now.
	Now func() time.Time
	// OnCharge, if set, is called with the request after each charge is
	// made and before it is answered: a test's hook into the moment the
	// effect exists and the caller does not know it yet (to kill the
	// caller there, say). The answer waits for it to return. Defaults to nil.
	OnCharge func(r *http.Request, p provider.Payment)
}

// Stats counts what a Server did.
type Stats struct {
	// Calls counts charge requests, valid or not.
	Calls int64 `json:"calls"`
	// Charges counts charges made.
	Charges int64 `json:"charges"`
	// Replays counts answers replayed from a key's stored result.
	Replays int64 `json:"replays"`
	// Conflicts counts 409s: the key was still being processed.
	Conflicts int64 `json:"conflicts"`
	// Mismatches counts 422s: the key was used with a different payment.
	Mismatches int64 `json:"mismatches"`
	// Declines counts payments declined (not replays of a decline).
	Declines int64 `json:"declines"`
	// Faults counts injected faults: failures before charging and timeouts
	// after charging.
	Faults int64 `json:"faults"`
	// Lookups counts charge lookups answered (GET /v1/charges).
	Lookups int64 `json:"lookups,omitempty"`
	// ChargesByPayment counts charges per payment_id.
	ChargesByPayment map[string]int64 `json:"charges_by_payment"`
	// ChargeLog lists the payment_id of every charge in the order they were
	// made (a payment charged twice appears twice): what order tests check.
	ChargeLog []string `json:"charge_log"`
}

// DuplicateCharges returns the payment ids charged more than once, sorted.
func (s Stats) DuplicateCharges() []string {
	var ids []string
	for id, n := range s.ChargesByPayment {
		if n > 1 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Server is the fake provider, an http.Handler. It is safe for concurrent use.
//
// Its charge route is the idempotency middleware over a memory claim store,
// around a handler that charges: request validation and the faults that
// happen before the key is looked at stay outside the middleware, latency and
// the decision to fail or hold inside it, and a held answer is held after
// the middleware has stored it, so a retry meanwhile gets the replay.
type Server struct {
	cfg    Config
	mux    *http.ServeMux
	charge http.Handler  // the middleware around chargeOnce
	store  *memory.Store // the middleware's claims
	done   chan struct{} // closed by Close
	once   sync.Once

	mu      sync.Mutex
	keys    map[string]*keyLife                // KeyLifetime: each key's current generation
	tried   map[string]bool                    // fault identities seen: keys, or (IgnoreKeys) payments
	charges map[string][]provider.ChargeRecord // by payment_id
	stats   Stats
}

// keyLife is a key's memory: a key first used longer than KeyLifetime ago
// is forgotten by moving it to a new generation, a new scope in the store.
type keyLife struct {
	gen      int
	firstUse time.Time
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.TimeoutDelay == 0 {
		cfg.TimeoutDelay = 30 * time.Second
	}
	if cfg.FailFirst == nil {
		cfg.FailFirst = fraction("fail-before-charge:", cfg.FailBeforeCharge)
	}
	if cfg.TimeoutFirst == nil {
		cfg.TimeoutFirst = fraction("charge-then-timeout:", cfg.ChargeThenTimeout)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cfg:     cfg,
		mux:     http.NewServeMux(),
		done:    make(chan struct{}),
		keys:    make(map[string]*keyLife),
		tried:   make(map[string]bool),
		charges: make(map[string][]provider.ChargeRecord),
		stats:   Stats{ChargesByPayment: make(map[string]int64)},
	}
	s.store = memory.New(memory.Config{})
	mw, err := idempotency.New(idempotency.Options{
		Store:           s.store,
		Required:        true,
		Methods:         []string{http.MethodPost},
		Scope:           func(r *http.Request) string { return requestFrom(r.Context()).scope },
		SharedKeys:      true, // one account: its clients share its keys, as one provider account's do
		MaxKeyBytes:     provider.MaxKeyBytes,
		MaxRequestBytes: maxBodyBytes,
		StoredHeaders:   []string{"Content-Type"},
		Fingerprint:     func(r *http.Request, _ []byte) string { return requestFrom(r.Context()).payment.fingerprint() },
		Retention:       100 * 365 * 24 * time.Hour, // KeyLifetime forgets keys, by generation
		Owner:           "fakeprovider",
		Reject:          s.reject,
		Observe:         s.observe,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic("fakeprovider: " + err.Error()) // the options above are constant
	}
	s.charge = mw(http.HandlerFunc(s.chargeOnce))
	s.mux.HandleFunc("POST "+provider.ChargesPath, s.serveCharge)
	s.mux.HandleFunc("GET "+provider.ChargesPath, s.serveLookup)
	s.mux.HandleFunc("GET /stats", s.serveStats)
	return s
}

// fraction chooses about frac of all keys, the same ones in every run: those
// whose FNV-1a hash, salted so that different faults choose independently,
// falls below frac.
func fraction(salt string, frac float64) func(string, provider.Payment) bool {
	if frac <= 0 {
		return func(string, provider.Payment) bool { return false }
	}
	return func(key string, _ provider.Payment) bool {
		return unit(salt, key) < frac
	}
}

// unit hashes salt+key to a number in [0, 1): 64-bit FNV-1a, then the
// MurmurHash3 finalizer, because FNV alone barely moves its high bits for a
// change in the last bytes (pay_0001, pay_0002, ...).
func unit(salt, key string) float64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(salt); i++ {
		h = (h ^ uint64(salt[i])) * prime
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return float64(h>>11) / (1 << 53)
}

// ServeHTTP serves POST /v1/charges, GET /v1/charges?payment_id= and GET /stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.ChargesByPayment = make(map[string]int64, len(s.stats.ChargesByPayment))
	for id, n := range s.stats.ChargesByPayment {
		st.ChargesByPayment[id] = n
	}
	st.ChargeLog = slices.Clone(s.stats.ChargeLog)
	return st
}

// Charges returns the charges of a payment, oldest first, as the lookup
// lists them.
func (s *Server) Charges(paymentID string) []provider.ChargeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.charges[paymentID])
}

// Close releases every request held back by Latency or TimeoutDelay, now and
// later, so that servers and tests stop promptly. The Server keeps serving.
func (s *Server) Close() { s.once.Do(func() { close(s.done) }) }

func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) serveLookup(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DisableLookup {
		writeError(w, http.StatusNotFound, provider.TypeInvalidRequest, "charges cannot be looked up here")
		return
	}
	id := r.URL.Query().Get(provider.PaymentIDParam)
	if id == "" {
		writeError(w, http.StatusBadRequest, provider.TypeInvalidRequest, "the payment_id query parameter is required")
		return
	}
	s.mu.Lock()
	s.stats.Lookups++
	list := provider.ChargeList{Data: slices.Clone(s.charges[id])}
	s.mu.Unlock()
	if list.Data == nil {
		list.Data = []provider.ChargeRecord{}
	}
	writeJSON(w, http.StatusOK, list)
}

// maxBodyBytes bounds a charge request's body.
const maxBodyBytes = 64 << 10

// request is what the charge route learns about a request before the
// middleware, for its fingerprint, scope and the handler under it.
type request struct {
	payment payment
	scope   string // the key's generation, "" for the first
	hold    bool   // set under the claim: hold the stored answer back
}

type payment provider.Payment

// fingerprint identifies a payment by its fields, however its JSON is spelled.
func (p payment) fingerprint() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%q|%d|%q", p.PaymentID, p.Amount, p.Currency))
	return hex.EncodeToString(sum[:])
}

type requestKey struct{}

func requestFrom(ctx context.Context) *request {
	rq, _ := ctx.Value(requestKey{}).(*request)
	if rq == nil {
		return &request{}
	}
	return rq
}

// serveCharge validates the request, then passes it to the middleware.
func (s *Server) serveCharge(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats.Calls++
	s.mu.Unlock()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, provider.TypeInvalidRequest, "the body is larger than 64 KiB")
			return
		}
		writeError(w, http.StatusBadRequest, provider.TypeInvalidRequest, "the body could not be read")
		return
	}
	p, err := provider.DecodePayment(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, provider.TypeInvalidRequest, err.Error())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if s.cfg.IgnoreKeys {
		s.chargeIgnoringKey(w, r, key, p)
		return
	}
	rq := &request{payment: payment(p), scope: s.scope(key)}
	r = r.WithContext(context.WithValue(r.Context(), requestKey{}, rq))
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The answer is buffered so that a held one can wait after the
	// middleware stored it.
	buf := &bufferedResponse{header: http.Header{}}
	s.charge.ServeHTTP(buf, r)
	if rq.hold {
		s.wait(r.Context().Done(), s.cfg.TimeoutDelay)
	}
	buf.writeTo(w)
}

// scope returns the store scope of key: its generation, moved on when the
// key's first use is KeyLifetime ago and no request with it is in progress.
func (s *Server) scope(key string) string {
	if s.cfg.KeyLifetime <= 0 || key == "" {
		return ""
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	switch {
	case k == nil:
		k = &keyLife{firstUse: now}
		s.keys[key] = k
	case now.Sub(k.firstUse) >= s.cfg.KeyLifetime && !s.inProgress(idempotency.StoreKey(genScope(k.gen), "", key)):
		k.gen++
		k.firstUse = now
	}
	return genScope(k.gen)
}

// genScope is the store scope of a key's generation gen.
func genScope(gen int) string {
	if gen == 0 {
		return ""
	}
	return "gen" + strconv.Itoa(gen) + "#"
}

// inProgress reports whether the claim of storeKey is held by a request
// still running: its key is not forgotten under it.
func (s *Server) inProgress(storeKey string) bool {
	c, err := s.store.Get(context.Background(), storeKey)
	return err == nil && c.Status == claimstore.StatusInProgress && time.Now().Before(c.LeaseUntil)
}

// chargeOnce runs under the key's claim: the first request with a key, or
// the retry after a failure released it.
func (s *Server) chargeOnce(w http.ResponseWriter, r *http.Request) {
	rq := requestFrom(r.Context())
	p := provider.Payment(rq.payment)
	key := r.Header.Get("Idempotency-Key")
	// A 5xx before charging: the middleware releases the key, so a retry charges.
	status, body, hold, ok := s.tryCharge(w, r, key, p)
	if !ok {
		return
	}
	rq.hold = hold
	writeBody(w, status, body)
}

// tryCharge is a first or retried charge of p under id: the configured
// faults decide, on id's first try, whether it fails before charging
// (written to w, ok false) or charges and then times out (hold true).
// Charging takes Latency, whether or not the caller waits for it; a charge
// made is passed to OnCharge.
func (s *Server) tryCharge(w http.ResponseWriter, r *http.Request, id string, p provider.Payment) (status int, body []byte, hold, ok bool) {
	s.mu.Lock()
	first := !s.tried[id]
	s.tried[id] = true
	fail := first && s.cfg.FailFirst(id, p)
	hold = first && !fail && s.cfg.TimeoutFirst(id, p)
	if fail || hold {
		s.stats.Faults++
	}
	s.mu.Unlock()
	if fail {
		writeError(w, http.StatusServiceUnavailable, provider.TypeUnavailable, "injected fault: failed before charging")
		return 0, nil, false, false
	}
	s.wait(nil, s.cfg.Latency)
	s.mu.Lock()
	status, body = s.result(p)
	s.mu.Unlock()
	if status == http.StatusOK && s.cfg.OnCharge != nil {
		s.cfg.OnCharge(r, p)
	}
	return status, body, hold, true
}

// reject writes the middleware's refusals in the provider's error format.
// A 409 carries no Retry-After, as the providers this fake stands for send none.
func (s *Server) reject(w http.ResponseWriter, _ *http.Request, rej idempotency.Rejection) {
	switch rej.Outcome {
	case idempotency.MissingKey, idempotency.InvalidKey:
		writeError(w, http.StatusBadRequest, provider.TypeInvalidRequest, "a valid Idempotency-Key header is required: "+rej.Detail)
	case idempotency.InFlight:
		writeError(w, http.StatusConflict, provider.TypeKeyInUse, "a request with this Idempotency-Key is still being processed")
	case idempotency.Mismatch:
		writeError(w, http.StatusUnprocessableEntity, provider.TypeKeyMismatch, "this Idempotency-Key was used with a different payment")
	case idempotency.RequestTooLarge:
		writeError(w, rej.Status, provider.TypeInvalidRequest, rej.Detail)
	default:
		writeError(w, rej.Status, provider.TypeUnavailable, rej.Detail)
	}
}

// observe counts the middleware's outcomes that Stats reports.
func (s *Server) observe(_ *http.Request, o idempotency.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch o {
	case idempotency.Replayed:
		s.stats.Replays++
	case idempotency.InFlight:
		s.stats.Conflicts++
	case idempotency.Mismatch:
		s.stats.Mismatches++
	}
}

func (s *Server) chargeIgnoringKey(w http.ResponseWriter, r *http.Request, key string, p provider.Payment) {
	id := key
	if id == "" {
		id = p.PaymentID
	}
	status, body, hold, ok := s.tryCharge(w, r, id, p)
	if !ok {
		return
	}
	if hold {
		s.wait(r.Context().Done(), s.cfg.TimeoutDelay)
	}
	writeBody(w, status, body)
}

// result charges or declines p and returns the answer. s.mu is held.
func (s *Server) result(p provider.Payment) (int, []byte) {
	if strings.HasPrefix(p.PaymentID, "decline") {
		s.stats.Declines++
		return http.StatusPaymentRequired, errorBody(provider.TypeCardDeclined, "the card was declined")
	}
	s.stats.Charges++
	s.stats.ChargesByPayment[p.PaymentID]++
	s.stats.ChargeLog = append(s.stats.ChargeLog, p.PaymentID)
	ch := provider.Charge{ID: newChargeID(), Status: provider.StatusSucceeded}
	s.charges[p.PaymentID] = append(s.charges[p.PaymentID], provider.ChargeRecord{
		ID: ch.ID, PaymentID: p.PaymentID, Amount: p.Amount, Currency: p.Currency, Status: ch.Status, Created: s.cfg.Now().UTC(),
	})
	body, _ := json.Marshal(ch)
	return http.StatusOK, body
}

// bufferedResponse holds an answer until writeTo.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	for k, vs := range b.header {
		w.Header()[k] = vs
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}

// wait sleeps d, returning early when cancel is closed or the Server is.
func (s *Server) wait(cancel <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cancel:
	case <-s.done:
	}
}

// newChargeID returns "ch_" and 16 random hex digits.
func newChargeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "ch_" + hex.EncodeToString(b[:])
}

func errorBody(typ, msg string) []byte {
	b, _ := json.Marshal(provider.ErrorResponse{Error: provider.ErrorDetail{Type: typ, Message: msg}})
	return b
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeBody(w, status, errorBody(typ, msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, status, b)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
