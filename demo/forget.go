package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
)

// Experiment 8's timing, on the store's clock: the provider remembers a key
// for keyLifetime (Stripe's 24 hours), and the handler judges a key by the
// payment handler's own rule (payment.PastKeyLifetime); the dead-letter
// queue is redriven redriveAfter after the payments were first received. The
// heading spells these out.
const (
	keyLifetime  = payment.DefaultKeyLifetime
	redriveAfter = 48 * time.Hour
)

// errAnswerLost is the simulated provider's answer that never arrived: the
// caller cannot tell whether it charged.
var errAnswerLost = errors.New("the provider's answer was lost: outcome unknown")

// forgetfulProvider is the payment provider of experiments 6 and 8, in
// process and on the experiment's clock: it honours idempotency keys for
// lifetime after a key's first use and then forgets them, while the charges
// stay listed for a lookup by payment id, as the fake provider's
// --key-lifetime does. A lifetime of zero remembers no key: every call
// charges, as a provider that ignores keys does.
type forgetfulProvider struct {
	now      func() time.Time
	lifetime time.Duration
	// lose, if set, says whether the answer to a charge of this payment is
	// lost on the way back (the charge, or the replay, happened).
	lose atomic.Pointer[func(paymentID string) bool]

	mu        sync.Mutex
	keys      map[string]keyMemory
	byPayment map[string][]string // charge ids
	seq       int
	stats     forgetfulStats
}

type keyMemory struct {
	chargeID string
	firstAt  time.Time
}

type forgetfulStats struct {
	calls, charges, replays, forgotten, lookups int
}

func newForgetfulProvider(now func() time.Time, lifetime time.Duration) *forgetfulProvider {
	return &forgetfulProvider{now: now, lifetime: lifetime, keys: make(map[string]keyMemory), byPayment: make(map[string][]string)}
}

// charge charges p under key, or replays the charge the key made if the
// provider still remembers it.
func (f *forgetfulProvider) charge(key string, p provider.Payment) (string, error) {
	f.mu.Lock()
	f.stats.calls++
	now := f.now()
	k, ok := f.keys[key]
	if ok && now.Sub(k.firstAt) >= f.lifetime {
		delete(f.keys, key)
		f.stats.forgotten++
		ok = false
	}
	if ok {
		f.stats.replays++
	} else {
		f.seq++
		k = keyMemory{chargeID: fmt.Sprintf("ch_%06d", f.seq), firstAt: now}
		f.keys[key] = k
		f.byPayment[p.PaymentID] = append(f.byPayment[p.PaymentID], k.chargeID)
		f.stats.charges++
	}
	f.mu.Unlock()
	if lose := f.lose.Load(); lose != nil && (*lose)(p.PaymentID) {
		return "", errAnswerLost
	}
	return k.chargeID, nil
}

// lookup returns the ids of the charges made for a payment, as
// GET /v1/charges?payment_id= lists them.
func (f *forgetfulProvider) lookup(paymentID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.lookups++
	return append([]string(nil), f.byPayment[paymentID]...)
}

// chargesByPayment returns the number of charges per payment id.
func (f *forgetfulProvider) chargesByPayment() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	by := make(map[string]int, len(f.byPayment))
	for id, cs := range f.byPayment {
		by[id] = len(cs)
	}
	return by
}

// forgetResult is what experiment 8 measured: payments whose outcome was
// unknown are retried two days later, after the provider forgot their keys.
type forgetResult struct {
	// RetryWithKey retries with the same key, trusting the provider to
	// replay the first charge.
	RetryWithKey forgetRow
	// LookUp looks the payment's charges up at the provider before charging
	// a key that may have been forgotten, and completes with what it finds.
	LookUp forgetRow
}

// forgetRow is one handler's numbers in experiment 8.
type forgetRow struct {
	// Payments is the number of distinct payments.
	Payments int
	// Late counts the retries that came after the provider's key lifetime:
	// the dead-lettered messages, redriven.
	Late int
	// Charges is the number of charges the provider made.
	Charges int
	// Forgotten counts the charge requests whose key the provider had
	// forgotten.
	Forgotten int
	// Lookups counts the lookups by payment id.
	Lookups int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r forgetResult) rows() []tableRow {
	row := func(label string, x forgetRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"late retries", x.Late}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("retry with the forgotten key", r.RetryWithKey),
		row("look up before charging", r.LookUp),
	}
}

// runForget runs experiment 8: for 1 in 50 payments (exactly opts.Payments/50,
// chosen by opts.Seed) the provider charges but its answers never arrive
// while the message is received, so each receive releases its claim with the
// outcome unknown, and the broker dead-letters the message after
// maxReceives. Two days later on the store's clock the dead-letter queue is
// redriven; the provider, which remembers keys for 24 hours, has forgotten
// them. The handlers are the full claim-first protocol with the key
// forwarded; the second also reads the claim's first acquisition (first_at,
// kept by takeovers) and looks the payment up instead of charging when the
// key may have been forgotten.
func runForget(ctx context.Context, opts Options) (forgetResult, error) {
	if err := opts.setDefaults(); err != nil {
		return forgetResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	unanswered := choose(ps, faultEvery, opts.Seed, saltForget)
	msgs := messages(ps, nil)
	run := func(id, label string, lookUp bool) (forgetRow, error) {
		c := &clock{}
		store, err := opts.NewStore(ctx, opts.namespace(id), c.Now)
		if err != nil {
			return forgetRow{}, fmt.Errorf("%s: claim store: %w", label, err)
		}
		prov := newForgetfulProvider(c.Now, keyLifetime)
		lose := func(paymentID string) bool { return unanswered[paymentID] }
		prov.lose.Store(&lose)
		b := &broker{workers: opts.Workers, clock: c, progress: opts.progress}
		h := keyedHandler(store, prov, c, retention, lookUp, new(atomic.Int64))
		opts.progress.row(label, len(msgs))
		bs, err := b.run(ctx, msgs, h)
		if err != nil {
			return forgetRow{}, fmt.Errorf("%s: %w", label, err)
		}
		prov.lose.Store(nil) // the answers arrive again
		c.Advance(redriveAfter)
		opts.progress.row(label+", redriven", len(bs.dead))
		if _, err := b.run(ctx, bs.dead, h); err != nil {
			return forgetRow{}, fmt.Errorf("%s: redrive: %w", label, err)
		}
		prov.mu.Lock()
		st := prov.stats
		prov.mu.Unlock()
		return forgetRow{
			Payments: len(ps), Late: len(bs.dead), Charges: st.charges,
			Forgotten: st.forgotten, Lookups: st.lookups,
			effects: countEffects(paymentIDs(ps), prov.chargesByPayment()),
		}, nil
	}
	var res forgetResult
	var err error
	if res.RetryWithKey, err = run("forget-key", "retry with the forgotten key", false); err != nil {
		return res, err
	}
	res.LookUp, err = run("forget-lookup", "look up before charging", true)
	return res, err
}

// keyedHandler is the claim-first handler of experiments 6 and 8, charging
// the in-process provider: it claims the payment id for keep, charges with
// it as the idempotency key, releases the claim when the outcome is unknown,
// and completes it with the charge id, kept for keep again. With lookUp, a
// claim whose key the provider may have forgotten (by the claim's first_at
// and the payment handler's rule) is completed with the charge a lookup finds, and charged only if there is
// none. It counts the duplicates it acks in dups.
func keyedHandler(store claimstore.Store, prov *forgetfulProvider, c *clock, keep time.Duration, lookUp bool, dups *atomic.Int64) handler {
	return func(ctx context.Context, m message) (verdict, error) {
		key := m.payment.PaymentID
		now := c.Now()
		cl, _, err := once.Acquire(ctx, store, key, once.Options{
			Owner: "demo", Lease: visibilityTimeout - leaseMargin, Retention: keep, Now: c.Now,
		})
		var held *once.HeldError
		switch {
		case errors.As(err, &held):
			return later, nil
		case err != nil:
			return 0, err
		case cl == nil: // completed before
			dups.Add(1)
			return ack, nil
		}
		var chargeID string
		if lookUp && payment.PastKeyLifetime(cl.FirstAt, now, prov.lifetime) {
			if found := prov.lookup(m.payment.PaymentID); len(found) > 0 {
				chargeID = found[0]
			}
		}
		if chargeID == "" {
			chargeID, err = prov.charge(key, m.payment)
			if err != nil {
				if !errors.Is(err, errAnswerLost) {
					return 0, err
				}
				if err := cl.Release(ctx, err.Error()); err != nil {
					return 0, fmt.Errorf("release: %w", err)
				}
				return later, nil
			}
		}
		if err := cl.Complete(ctx, chargeID); err != nil {
			return 0, fmt.Errorf("complete: %w", err)
		}
		return ack, nil
	}
}
