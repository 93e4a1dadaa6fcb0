package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// rowSpec describes the world of one row: the provider's faults and
// behaviour, and how the client calls it.
type rowSpec struct {
	// id names the row's claims (the store namespace) and progress lines.
	id, label string
	// fake configures the fake provider.
	fake fakeprovider.Config
	// client configures the provider client; BaseURL and HTTPClient are set
	// by the row.
	client provider.Config
	// claims says whether the row uses a claim store.
	claims bool
}

// row is one row's running world: a fake provider served over loopback
// HTTP, a provider client, and a claim store on its own clock.
type row struct {
	fake      *fakeprovider.Server
	server    *httptest.Server
	transport *http.Transport
	client    *provider.Client
	store     claimstore.Store
	clock     *clock
	broker    *broker

	// Counts kept by the handlers.
	takeovers atomic.Int64 // acquisitions with a token above 1
	skipped   atomic.Int64 // messages acked because their key was claimed
	crashed   atomic.Int64 // workers that died between claim and charge
}

func newRow(ctx context.Context, opts Options, spec rowSpec) (_ *row, err error) {
	r := &row{clock: &clock{}}
	r.broker = &broker{workers: opts.Workers, clock: r.clock, progress: opts.progress}
	r.fake = fakeprovider.New(spec.fake)
	r.server = httptest.NewServer(r.fake)
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	r.transport = &http.Transport{
		MaxIdleConns:        4 * opts.Workers,
		MaxIdleConnsPerHost: 4 * opts.Workers,
		IdleConnTimeout:     10 * time.Second,
	}
	cc := spec.client
	cc.BaseURL = r.server.URL
	cc.HTTPClient = &http.Client{Transport: r.transport}
	if r.client, err = provider.NewClient(cc); err != nil {
		return nil, fmt.Errorf("%s: provider client: %w", spec.label, err)
	}
	if spec.claims {
		if r.store, err = opts.NewStore(ctx, opts.namespace(spec.id), r.clock.Now); err != nil {
			return nil, fmt.Errorf("%s: claim store: %w", spec.label, err)
		}
	}
	opts.progress.row(spec.label, opts.Payments)
	return r, nil
}

// close stops the provider: it releases the answers still held back, then
// waits for the requests being served.
func (r *row) close() {
	r.fake.Close()
	r.server.Close()
	r.transport.CloseIdleConnections()
}

// charge charges m's payment with its id as the idempotency key.
func (r *row) charge(ctx context.Context, m message) (provider.Charge, error) {
	return r.client.Charge(ctx, m.payment.PaymentID, m.payment)
}

// unknown reports whether err is a charge whose outcome is unknown, the
// failure a handler answers by leaving the message for a redelivery. Any
// other error is unexpected in the demo and stops it.
func unknown(err error) bool {
	var pe *provider.Error
	return errors.As(err, &pe) && pe.Retryable()
}

// noDedup charges every delivery.
func (r *row) noDedup() handler {
	return func(ctx context.Context, m message) (verdict, error) {
		if _, err := r.charge(ctx, m); err != nil {
			if unknown(err) {
				return later, nil
			}
			return 0, err
		}
		return ack, nil
	}
}

// checkThenAct looks the key up in the set of remembered keys, charges, and
// then remembers it: two copies that both look before either remembers are
// both charged.
func (r *row) checkThenAct() handler {
	var (
		mu         sync.Mutex
		remembered = make(map[string]bool)
	)
	seen := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		return remembered[key]
	}
	return func(ctx context.Context, m message) (verdict, error) {
		key := m.payment.PaymentID
		if seen(key) {
			r.skipped.Add(1)
			return ack, nil
		}
		if _, err := r.charge(ctx, m); err != nil {
			if unknown(err) {
				return later, nil
			}
			return 0, err
		}
		mu.Lock()
		remembered[key] = true
		mu.Unlock()
		return ack, nil
	}
}

// claimPolicy is how a claim-first handler uses its claims. The zero
// parts are the ones the protocol has; the rows that show what a part is
// for leave it out.
type claimPolicy struct {
	// lease is how long a claim holds before a redelivery may take it over.
	// Zero means as long as the claim is remembered: a claim without a lease.
	lease time.Duration
	// release gives the claim up when the charge fails, so that the
	// redelivery takes over. Without it the store is told to release and
	// keeps the claim (keptOnRelease).
	release bool
	// deferHeld leaves a message whose key is held elsewhere for a
	// redelivery, as the protocol does. Without it the handler acks it as if
	// it were done: what a handler does that treats any claim as a result.
	deferHeld bool
	// crash, if set, picks the receives on which the worker dies right
	// after claiming: no charge, no release, no ack.
	crash func(m message) bool
}

// claimFirst claims the key with package once (once.Acquire, then the
// claim's Complete or Release: the code the worker runs), charges only if
// it won the claim, and completes the claim with the charge id.
func (r *row) claimFirst(pol claimPolicy) handler {
	store := r.store
	if !pol.release {
		store = keptOnRelease{store}
	}
	lease := pol.lease
	if lease == 0 {
		lease = retention
	}
	opts := once.Options{Owner: "demo", Lease: lease, Retention: retention, Now: r.clock.Now}
	return func(ctx context.Context, m message) (verdict, error) {
		c, _, err := once.Acquire(ctx, store, m.payment.PaymentID, opts)
		var held *once.HeldError
		switch {
		case errors.As(err, &held) && pol.deferHeld:
			return later, nil
		case errors.As(err, &held), err == nil && c == nil: // held, or completed before
			r.skipped.Add(1)
			return ack, nil
		case err != nil:
			return 0, err
		}
		if c.Token > 1 {
			r.takeovers.Add(1)
		}
		if pol.crash != nil && pol.crash(m) {
			r.crashed.Add(1)
			return later, nil
		}
		ch, err := r.charge(ctx, m)
		if err != nil {
			if !unknown(err) {
				return 0, err
			}
			if err := c.Release(ctx, err.Error()); err != nil {
				return 0, fmt.Errorf("release: %w", err)
			}
			return later, nil
		}
		if err := c.Complete(ctx, ch.ID); err != nil {
			return 0, fmt.Errorf("complete: %w", err)
		}
		return ack, nil
	}
}

// keptOnRelease is a store that is told to release a claim and keeps it:
// the handler that holds its claim through a failure.
type keptOnRelease struct{ claimstore.Store }

func (keptOnRelease) Release(context.Context, claimstore.ReleaseParams) error { return nil }

// runRow runs msgs through h in a fresh world made from spec and returns the
// broker's and the provider's counts.
func runRow(ctx context.Context, opts Options, spec rowSpec, msgs []message, h func(*row) handler) (*row, brokerStats, fakeprovider.Stats, error) {
	r, err := newRow(ctx, opts, spec)
	if err != nil {
		return nil, brokerStats{}, fakeprovider.Stats{}, err
	}
	bs, err := r.broker.run(ctx, msgs, h(r))
	r.close()
	if err != nil {
		return nil, bs, fakeprovider.Stats{}, fmt.Errorf("%s: %w", spec.label, err)
	}
	return r, bs, r.fake.Stats(), nil
}
