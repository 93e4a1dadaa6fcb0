package fakeprovider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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
type Server struct {
	cfg  Config
	mux  *http.ServeMux
	done chan struct{} // closed by Close
	once sync.Once

	mu    sync.Mutex
	keys  map[string]*entry
	tried map[string]bool // IgnoreKeys: fault identities seen
	stats Stats
}

// entry is the state of one idempotency key.
type entry struct {
	state   state
	payment provider.Payment // the payment of the request that holds or set the result
	status  int              // the stored answer, once done
	body    []byte
}

type state int

const (
	inProgress state = iota + 1
	failed           // the first attempt failed before charging: nothing stored
	done             // status and body are the key's result
)

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
	s := &Server{
		cfg:   cfg,
		mux:   http.NewServeMux(),
		done:  make(chan struct{}),
		keys:  make(map[string]*entry),
		tried: make(map[string]bool),
		stats: Stats{ChargesByPayment: make(map[string]int64)},
	}
	s.mux.HandleFunc("POST /v1/charges", s.charge)
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

// ServeHTTP serves POST /v1/charges and GET /stats.
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

// Close releases every request held back by Latency or TimeoutDelay, now and
// later, so that servers and tests stop promptly. The Server keeps serving.
func (s *Server) Close() { s.once.Do(func() { close(s.done) }) }

func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// maxBodyBytes bounds a charge request's body.
const maxBodyBytes = 64 << 10

func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
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
		s.chargeIgnoringKey(r.Context(), w, key, p)
		return
	}
	if err := provider.CheckKey(key); err != nil {
		writeError(w, http.StatusBadRequest, provider.TypeInvalidRequest, "a valid Idempotency-Key header is required: "+err.Error())
		return
	}

	s.mu.Lock()
	e, seen := s.keys[key]
	if seen {
		switch e.state {
		case inProgress:
			s.stats.Conflicts++
			s.mu.Unlock()
			writeError(w, http.StatusConflict, provider.TypeKeyInUse, "a request with this Idempotency-Key is still being processed")
			return
		case done:
			if e.payment != p {
				s.stats.Mismatches++
				s.mu.Unlock()
				writeError(w, http.StatusUnprocessableEntity, provider.TypeKeyMismatch, "this Idempotency-Key was used with a different payment")
				return
			}
			s.stats.Replays++
			status, stored := e.status, e.body
			s.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			writeBody(w, status, stored)
			return
		case failed:
			// Nothing was stored: this request starts over.
		}
	} else {
		e = &entry{}
		s.keys[key] = e
	}
	e.state, e.payment = inProgress, p
	fail := !seen && s.cfg.FailFirst(key, p)
	hold := !seen && !fail && s.cfg.TimeoutFirst(key, p)
	if fail || hold {
		s.stats.Faults++
	}
	if fail {
		e.state = failed
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, provider.TypeUnavailable, "injected fault: failed before charging")
		return
	}
	s.mu.Unlock()

	// Charging takes Latency, whether or not the caller waits for it.
	s.wait(nil, s.cfg.Latency)

	s.mu.Lock()
	e.status, e.body = s.result(p)
	e.state = done
	status, stored := e.status, e.body
	s.mu.Unlock()

	if hold {
		s.wait(r.Context().Done(), s.cfg.TimeoutDelay)
	}
	writeBody(w, status, stored)
}

func (s *Server) chargeIgnoringKey(ctx context.Context, w http.ResponseWriter, key string, p provider.Payment) {
	id := key
	if id == "" {
		id = p.PaymentID
	}
	s.mu.Lock()
	first := !s.tried[id]
	s.tried[id] = true
	fail := first && s.cfg.FailFirst(id, p)
	hold := first && !fail && s.cfg.TimeoutFirst(id, p)
	if fail || hold {
		s.stats.Faults++
	}
	s.mu.Unlock()
	if fail {
		writeError(w, http.StatusServiceUnavailable, provider.TypeUnavailable, "injected fault: failed before charging")
		return
	}
	s.wait(nil, s.cfg.Latency)
	s.mu.Lock()
	status, body := s.result(p)
	s.mu.Unlock()
	if hold {
		s.wait(ctx.Done(), s.cfg.TimeoutDelay)
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
	body, _ := json.Marshal(provider.Charge{ID: newChargeID(), Status: provider.StatusSucceeded})
	return http.StatusOK, body
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
