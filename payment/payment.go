// Package payment is the reference application of the worker: it decodes
// payment messages ({"payment_id", "amount", "currency"}), keys them by
// payment (or message id, or a message attribute), and charges them through
// the provider client with the idempotency key forwarded, mapping the
// provider's answers onto the worker's outcomes:
//
//	2xx (charged or replayed)   -> result "ch_...": claim completed, message acked
//	402 declined                -> result "declined: ...": a business outcome, completed
//	422 key reused, 400 invalid -> permanent: dead-lettered with the reason
//	409 key in flight there     -> retried no sooner than InFlightBackoff, same key
//	5xx, 429, timeouts          -> the provider is down or the outcome unknown:
//	401, 403, 404, other 4xx       a dependency failure, retried with the same key,
//	                               never dead-lettered (the worker holds and backs off)
package payment

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/worker"
)

// KeySource names where a message's idempotency key comes from.
type KeySource string

// The key sources.
const (
	// KeyPaymentID keys a message by its payment_id: a producer's retry (a
	// new message for the same payment) is deduplicated too. The default.
	KeyPaymentID KeySource = "payment_id"
	// KeyMessageID keys a message by the id it was published with
	// (worker.Message.PublishedID): its SQS message id, or its SNS or
	// EventBridge envelope's id, so only redeliveries of one message (and
	// the copies of one publication) are deduplicated. A message the worker
	// dead-lettered and that was redriven keeps its key when the worker
	// has an original-id secret (see worker.Protocol.OriginalIDSecret);
	// without one it gets its new id as key.
	KeyMessageID KeySource = "message_id"
	// KeyAttributePrefix, followed by a name, keys a message by that message
	// attribute: "attribute:Idempotency-Key".
	KeyAttributePrefix = "attribute:"
	// KeyJMESPathPrefix, followed by a JMESPath expression, keys a message
	// by what the expression finds in its body (see package keyexpr):
	// "jmespath:payment_id", "jmespath:join(':', [currency, payment_id])".
	KeyJMESPathPrefix = "jmespath:"
)

// ParseKeySource checks s: "payment_id", "message_id", "attribute:NAME" or
// "jmespath:EXPR" (an expression that compiles).
func ParseKeySource(s string) (KeySource, error) {
	switch {
	case strings.HasPrefix(s, KeyJMESPathPrefix):
		if _, err := keyexpr.New(keyexpr.Config{Key: strings.TrimPrefix(s, KeyJMESPathPrefix)}); err != nil {
			return "", fmt.Errorf("key source %q: %w", s, err)
		}
		return KeySource(s), nil
	case s == "" || s == string(KeyPaymentID):
		return KeyPaymentID, nil
	case s == string(KeyMessageID):
		return KeyMessageID, nil
	case strings.HasPrefix(s, KeyAttributePrefix) && len(s) > len(KeyAttributePrefix):
		return KeySource(s), nil
	default:
		return "", fmt.Errorf("key source %q: want payment_id, message_id, attribute:NAME or jmespath:EXPR", s)
	}
}

// Decoder is the worker.Decoder for payment messages. A message that is not
// a valid payment, or has no valid key, is poison. Fields other than
// payment_id, amount and currency are ignored unless Strict: each new field
// name is logged once, and the messages carrying any are counted
// (UnknownFields). Use a *Decoder; it is safe for concurrent use.
type Decoder struct {
	// KeyFrom says where the idempotency key comes from. Defaults to KeyPaymentID.
	KeyFrom KeySource
	// Strict refuses (dead-letters) a message with any field other than
	// payment_id, amount and currency. Defaults to false: such fields are
	// ignored, and the fingerprint covers the payment's own fields only.
	Strict bool
	// Logger logs each unknown field name the first time it is seen.
	// Defaults to slog.Default().
	Logger *slog.Logger

	mu      sync.Mutex
	seen    map[string]bool // unknown field names logged
	unknown atomic.Int64    // messages with unknown fields
	// KeyExpr is KeyFrom's expression when it is "jmespath:EXPR", compiled
	// once (see NewDecoder). Defaults to nil: compiled at each message.
	KeyExpr *keyexpr.Expr
}

// NewDecoder returns the Decoder for src, its expression compiled if it is
// "jmespath:EXPR".
func NewDecoder(src KeySource) (*Decoder, error) {
	d := &Decoder{KeyFrom: src}
	if expr, ok := strings.CutPrefix(string(src), KeyJMESPathPrefix); ok {
		e, err := keyexpr.New(keyexpr.Config{Key: expr})
		if err != nil {
			return nil, err
		}
		d.KeyExpr = e
	}
	return d, nil
}

var _ worker.Decoder = (*Decoder)(nil)

// maxUnknownNames bounds the unknown field names remembered (and logged):
// the names come from producers.
const maxUnknownNames = 100

// UnknownFields returns how many messages carried fields the decoder
// ignored.
func (d *Decoder) UnknownFields() int64 { return d.unknown.Load() }

// Decode implements worker.Decoder: m.Payload becomes a provider.Payment.
func (d *Decoder) Decode(m *worker.Message) error {
	var p provider.Payment
	var unknown []string
	var err error
	if d.Strict {
		p, err = provider.DecodePayment([]byte(m.Body))
	} else {
		p, unknown, err = provider.DecodePaymentTolerant([]byte(m.Body))
	}
	if err != nil {
		return worker.Permanent("invalid payment message", err)
	}
	if len(unknown) > 0 {
		d.ignored(unknown, m.ID)
	}
	m.Payload = p
	switch src := d.KeyFrom; {
	case src == "" || src == KeyPaymentID:
		m.Key = p.PaymentID
	case src == KeyMessageID:
		m.Key = m.PublishedID()
	case strings.HasPrefix(string(src), KeyAttributePrefix):
		name := strings.TrimPrefix(string(src), KeyAttributePrefix)
		v, ok := m.Attributes[name]
		if !ok {
			return worker.Permanentf("message attribute %q (the idempotency key) is missing", name)
		}
		m.Key = v
	case strings.HasPrefix(string(src), KeyJMESPathPrefix):
		e := d.KeyExpr
		if e == nil {
			var err error
			if e, err = keyexpr.New(keyexpr.Config{Key: strings.TrimPrefix(string(src), KeyJMESPathPrefix)}); err != nil {
				return fmt.Errorf("payment: key source %q: %w", src, err)
			}
		}
		x, err := e.ExtractInput(worker.KeyInput(m), new(any))
		if err != nil {
			return worker.Permanent("no idempotency key", err)
		}
		m.Key = x.Key
	default:
		return fmt.Errorf("payment: unknown key source %q", src)
	}
	if err := provider.CheckKey(m.Key); err != nil {
		return worker.Permanent("invalid idempotency key", err)
	}
	m.Fingerprint = Fingerprint(p)
	return nil
}

// ignored counts a message with unknown fields and logs the names not seen
// before.
func (d *Decoder) ignored(names []string, messageID string) {
	d.unknown.Add(1)
	d.mu.Lock()
	var fresh []string
	for _, n := range names {
		if !d.seen[n] && len(d.seen) < maxUnknownNames {
			if d.seen == nil {
				d.seen = map[string]bool{}
			}
			d.seen[n] = true
			fresh = append(fresh, n)
		}
	}
	d.mu.Unlock()
	log := cmp.Or(d.Logger, slog.Default())
	for _, n := range fresh {
		log.Info("payment message has a field the decoder ignores (logged once per field name)",
			slog.String("field", n), slog.String("message_id", messageID))
	}
}

// Fingerprint is what a payment is, for its claim: a hash over its payment
// id, amount and currency. The same key with another fingerprint is a
// payment id reused for another payment, not a duplicate.
func Fingerprint(p provider.Payment) string {
	h := sha256.New()
	// Length-prefixed fields, so that no two payments hash alike by shifting
	// bytes between them.
	fmt.Fprintf(h, "%d:%s|%d|%d:%s", len(p.PaymentID), p.PaymentID, p.Amount, len(p.Currency), p.Currency)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Charger charges a payment with an idempotency key; *provider.Client is one.
type Charger interface {
	Charge(ctx context.Context, key string, p provider.Payment) (provider.Charge, error)
}

// Looker lists a payment's charges at the provider; *provider.Client is one.
type Looker interface {
	Lookup(ctx context.Context, paymentID string) ([]provider.ChargeRecord, error)
}

// DefaultKeyLifetime is how long a provider is assumed to remember an
// idempotency key when Handler.KeyLifetime is zero (Stripe: 24 hours).
const DefaultKeyLifetime = 24 * time.Hour

// ReasonReconcile is the dead-letter reason of a payment retried past the
// provider's key lifetime that could not be looked up, after its code
// worker.CodeReconcile ("reconcile: outcome unknown ...").
const ReasonReconcile = "outcome unknown past the provider's key lifetime"

// Handler is the worker.Handler that charges payments.
type Handler struct {
	// Provider charges; the message's idempotency key is forwarded to it.
	Provider Charger
	// Lookup, if set, lists a payment's charges: a retry whose key the
	// provider may have forgotten (see KeyLifetime) completes with a charge
	// found there, or charges when there is none. Nil: such a retry is
	// dead-lettered with ReasonReconcile, never charged blindly.
	Lookup Looker
	// KeyLifetime is how long the provider remembers a key after its first
	// use. A message whose key was first acquired (Message.FirstAt) longer
	// ago than KeyLifetime minus a margin (see PastKeyLifetime) is looked up
	// before it is charged. Defaults to DefaultKeyLifetime.
	KeyLifetime time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// KeyLifetimeMargin is how long before the provider's key lifetime ends a
// retry is already treated as past it: a twenty-fourth of the lifetime, at
// most an hour, for clock skew and for the time the charge takes.
func KeyLifetimeMargin(lifetime time.Duration) time.Duration {
	return min(lifetime/24, time.Hour)
}

// PastKeyLifetime reports whether a key first used at firstAt may have been
// forgotten by a provider that remembers keys for lifetime: it is at least
// lifetime minus KeyLifetimeMargin old at now. A zero firstAt (a claim
// stored before first use was recorded) is treated as past: its age is
// unknown.
func PastKeyLifetime(firstAt, now time.Time, lifetime time.Duration) bool {
	if firstAt.IsZero() {
		return true
	}
	return now.Sub(firstAt) >= lifetime-KeyLifetimeMargin(lifetime)
}

var _ worker.Handler = Handler{}

// DeclinedPrefix starts the stored result of a declined payment.
const DeclinedPrefix = "declined: "

// Handle implements worker.Handler.
func (h Handler) Handle(ctx context.Context, m *worker.Message) (string, error) {
	p, ok := m.Payload.(provider.Payment)
	if !ok {
		return "", worker.Permanentf("payload is %T, not a payment: use payment.Decoder", m.Payload)
	}
	if h.pastKeyLifetime(m) {
		id, found, err := h.reconcile(ctx, m, p)
		if err != nil || found {
			return id, err
		}
	}
	ch, err := h.Provider.Charge(ctx, m.Key, p)
	if err == nil {
		return ch.ID, nil
	}
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return "", err // unknown outcome: retry with the same key
	}
	switch {
	case pe.Kind == provider.KindDeclined:
		return DeclinedPrefix + pe.Reason, nil
	case pe.Kind == provider.KindKeyMismatch:
		return "", &worker.PermanentError{Code: worker.CodeKeyReused, Reason: "idempotency key reused with a different payment", Err: err}
	case pe.Kind == provider.KindBadRequest:
		return "", worker.Permanent("provider rejected the request", err)
	case pe.StatusCode == http.StatusConflict:
		// The key is in flight at the provider: our own earlier attempt.
		return "", worker.RetryAfter(InFlightBackoff, err)
	default:
		// Down, refusing our credentials, or the outcome unknown: not the
		// payment's fault. Retried with the same key, never dead-lettered.
		return "", worker.Dependency("provider", err)
	}
}

func (h Handler) pastKeyLifetime(m *worker.Message) bool {
	lifetime := h.KeyLifetime
	if lifetime <= 0 {
		lifetime = DefaultKeyLifetime
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	return PastKeyLifetime(m.FirstAt, now(), lifetime)
}

// reconcile looks up a payment whose key the provider may have forgotten:
// a charge found there is the result; none found means it may be charged.
func (h Handler) reconcile(ctx context.Context, m *worker.Message, p provider.Payment) (string, bool, error) {
	if h.Lookup == nil {
		return "", false, &worker.PermanentError{Code: worker.CodeReconcile, Reason: fmt.Sprintf("%s (first attempt %s, lookup off)", ReasonReconcile, firstAt(m))}
	}
	charges, err := h.Lookup.Lookup(ctx, p.PaymentID)
	switch {
	case errors.Is(err, provider.ErrNoLookup):
		return "", false, &worker.PermanentError{Code: worker.CodeReconcile, Reason: fmt.Sprintf("%s (first attempt %s)", ReasonReconcile, firstAt(m)), Err: err}
	case err != nil:
		var pe *provider.Error
		if errors.As(err, &pe) && pe.Kind == provider.KindBadRequest {
			return "", false, worker.Permanent("provider rejected the lookup", err)
		}
		return "", false, worker.Dependency("provider", err)
	}
	for _, c := range charges {
		if c.Status != provider.StatusSucceeded {
			continue
		}
		if c.Amount != p.Amount || c.Currency != p.Currency {
			return "", false, &worker.PermanentError{Code: worker.CodeKeyReused, Reason: fmt.Sprintf("payment %q was charged %d %s at the provider (charge %s), not %d %s: payment id reused",
				p.PaymentID, c.Amount, c.Currency, c.ID, p.Amount, p.Currency)}
		}
		return c.ID, true, nil
	}
	return "", false, nil
}

func firstAt(m *worker.Message) string {
	if m.FirstAt.IsZero() {
		return "unknown"
	}
	return m.FirstAt.UTC().Format(time.RFC3339)
}

// InFlightBackoff is the least wait before retrying a payment whose key the
// provider says is still in flight (409).
const InFlightBackoff = 5 * time.Second
