package payment_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/worker"
)

// TestPastKeyLifetimeBoundaries: just inside the lifetime less its margin a
// key is still remembered; at and past it, it may be forgotten; a zero
// first use is of unknown age and treated as past.
func TestPastKeyLifetimeBoundaries(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const day = 24 * time.Hour
	edge := day - payment.KeyLifetimeMargin(day) // 23h
	if edge != 23*time.Hour {
		t.Fatalf("margin of 24h = %v, want 1h", payment.KeyLifetimeMargin(day))
	}
	cases := []struct {
		age  time.Duration
		past bool
	}{{0, false}, {edge - time.Millisecond, false}, {edge, true}, {edge + time.Millisecond, true}, {30 * day, true}}
	for _, tc := range cases {
		if got := payment.PastKeyLifetime(now.Add(-tc.age), now, day); got != tc.past {
			t.Errorf("age %v: past = %v, want %v", tc.age, got, tc.past)
		}
	}
	if !payment.PastKeyLifetime(time.Time{}, now, day) {
		t.Error("zero first use: not past, want past (age unknown)")
	}
	if m := payment.KeyLifetimeMargin(time.Second); m <= 0 || m >= time.Second/10 {
		t.Errorf("margin of 1s = %v", m)
	}
}

type chargerFunc func(ctx context.Context, key string, p provider.Payment) (provider.Charge, error)

func (f chargerFunc) Charge(ctx context.Context, key string, p provider.Payment) (provider.Charge, error) {
	return f(ctx, key, p)
}

type lookerFunc func(ctx context.Context, id string) ([]provider.ChargeRecord, error)

func (f lookerFunc) Lookup(ctx context.Context, id string) ([]provider.ChargeRecord, error) {
	return f(ctx, id)
}

// TestLateRetryIsLookedUp: past the key lifetime the handler looks the
// payment up: a charge found is the result, none found charges, a provider
// that cannot look up (or lookup off) sets the message aside to reconcile;
// inside the lifetime it charges without looking.
func TestLateRetryIsLookedUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	p := provider.Payment{PaymentID: "pay_1", Amount: 1999, Currency: "EUR"}
	var charges, lookups atomic.Int64
	charger := chargerFunc(func(context.Context, string, provider.Payment) (provider.Charge, error) {
		charges.Add(1)
		return provider.Charge{ID: "ch_new", Status: provider.StatusSucceeded}, nil
	})
	found := lookerFunc(func(_ context.Context, id string) ([]provider.ChargeRecord, error) {
		lookups.Add(1)
		return []provider.ChargeRecord{{ID: "ch_old", PaymentID: id, Amount: 1999, Currency: "EUR", Status: provider.StatusSucceeded}}, nil
	})
	none := lookerFunc(func(context.Context, string) ([]provider.ChargeRecord, error) {
		lookups.Add(1)
		return nil, nil
	})
	cannot := lookerFunc(func(context.Context, string) ([]provider.ChargeRecord, error) {
		lookups.Add(1)
		return nil, &provider.Error{Kind: provider.KindDependency, StatusCode: 404, Err: provider.ErrNoLookup}
	})
	other := lookerFunc(func(_ context.Context, id string) ([]provider.ChargeRecord, error) {
		return []provider.ChargeRecord{{ID: "ch_x", PaymentID: id, Amount: 5, Currency: "EUR", Status: provider.StatusSucceeded}}, nil
	})
	down := lookerFunc(func(context.Context, string) ([]provider.ChargeRecord, error) {
		return nil, &provider.Error{Kind: provider.KindUnknown, StatusCode: 503}
	})
	late, early := now.Add(-25*time.Hour), now.Add(-time.Hour)
	cases := []struct {
		name        string
		look        payment.Looker
		firstAt     time.Time
		wantResult  string
		wantCharges int64
		wantLookups int64
		permanent   bool
		dependency  bool
		noCount     bool // the lookup does not count
		otherReason bool // permanent for another reason than reconcile
	}{
		{name: "inside the lifetime", look: found, firstAt: early, wantResult: "ch_new", wantCharges: 1},
		{name: "found", look: found, firstAt: late, wantResult: "ch_old", wantLookups: 1},
		{name: "none found", look: none, firstAt: late, wantResult: "ch_new", wantCharges: 1, wantLookups: 1},
		{name: "cannot look up", look: cannot, firstAt: late, wantLookups: 1, permanent: true},
		{name: "lookup off", firstAt: late, permanent: true},
		{name: "found with another amount", look: other, firstAt: late, permanent: true, otherReason: true, noCount: true},
		{name: "lookup down", look: down, firstAt: late, dependency: true, noCount: true},
	}
	for _, tc := range cases {
		charges.Store(0)
		lookups.Store(0)
		h := payment.Handler{Provider: charger, Lookup: tc.look, Now: func() time.Time { return now }}
		m := &worker.Message{Key: "pay_1", Payload: p, FirstAt: tc.firstAt}
		res, err := h.Handle(context.Background(), m)
		switch {
		case tc.permanent:
			if !worker.IsPermanent(err) {
				t.Errorf("%s: %q, %v; want permanent", tc.name, res, err)
			}
			if !tc.otherReason && !strings.Contains(err.Error(), payment.ReasonReconcile) {
				t.Errorf("%s: %v; want the reconcile reason", tc.name, err)
			}
		case tc.dependency:
			var de *worker.DependencyError
			if !errors.As(err, &de) {
				t.Errorf("%s: %v; want a dependency failure", tc.name, err)
			}
		default:
			if err != nil || res != tc.wantResult {
				t.Errorf("%s: %q, %v; want %q", tc.name, res, err, tc.wantResult)
			}
		}
		if charges.Load() != tc.wantCharges || (!tc.noCount && lookups.Load() != tc.wantLookups) {
			t.Errorf("%s: charges %d lookups %d, want %d and %d", tc.name, charges.Load(), lookups.Load(), tc.wantCharges, tc.wantLookups)
		}
	}
}
