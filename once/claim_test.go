package once_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// TestClaimStepByStep: Acquire, Hold, Complete as separate steps (the SQS
// worker's use) do what Run does, and a key completed before comes back from
// Acquire as a stored result, not a claim.
func TestClaimStepByStep(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		c, _, err := once.Acquire(t.Context(), s, key, once.Options{Fingerprint: "fp"})
		if err != nil || c == nil || c.Token != 1 || c.Key != key || c.FirstAt.IsZero() {
			t.Fatalf("Acquire = %+v, %v; want a held claim, token 1", c, err)
		}
		ran := false
		if err := c.Hold(t.Context(), func(context.Context) error { ran = true; return nil }); err != nil || !ran || c.Lost() {
			t.Fatalf("Hold = %v (ran %v, lost %v)", err, ran, c.Lost())
		}
		if err := c.Complete(t.Context(), "done"); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		again, r, err := once.Acquire(t.Context(), s, key, once.Options{Fingerprint: "fp"})
		if err != nil || again != nil || !r.Replayed || r.Value != "done" || r.Token != 1 {
			t.Fatalf("Acquire after completion = %+v, %+v, %v; want the stored result", again, r, err)
		}
	})
}

// TestOverdueRenewalRunsBeforeTheWork: when the first renewal is due before
// the work starts (winning the claim took long) and the claim was taken over
// meanwhile, the work never runs.
func TestOverdueRenewalRunsBeforeTheWork(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	c, _, err := once.Acquire(t.Context(), s, "k", once.Options{FirstRenewal: time.Now(), RenewEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := once.Acquire(t.Context(), s, "k", once.Options{Owner: "taker"}); err != nil {
		t.Fatal(err)
	}
	ran := false
	err = c.Hold(t.Context(), func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, once.ErrLeaseLost) || ran || !c.Lost() {
		t.Fatalf("Hold = %v, ran %v, lost %v; want ErrLeaseLost before the work ran", err, ran, c.Lost())
	}
	if err := c.Release(t.Context(), "x"); !errors.Is(err, once.ErrLeaseLost) {
		t.Errorf("Release of a lost claim = %v, want ErrLeaseLost", err)
	}
	if got, _ := s.Get(t.Context(), "k"); got.Owner != "taker" || got.Token != 2 || got.Status != claimstore.StatusInProgress {
		t.Errorf("claim = %+v, want the taker's, untouched", got)
	}
}

// countingRenew counts Renew calls.
type countingRenew struct {
	claimstore.Store
	n atomic.Int32
}

func (s *countingRenew) Renew(ctx context.Context, p claimstore.RenewParams) error {
	s.n.Add(1)
	return s.Store.Renew(ctx, p)
}

// TestNoRenewalsEndAtTheLease: a negative RenewEvery renews nothing, and the
// work's context still ends when the lease does.
func TestNoRenewalsEndAtTheLease(t *testing.T) {
	t.Parallel()
	s := &countingRenew{Store: memory.New(memory.Config{})}
	begin := time.Now()
	_, err := once.Do(t.Context(), s, "k", once.Options{Lease: 150 * time.Millisecond, RenewEvery: -1},
		func(ctx context.Context, _ once.Call) (string, error) {
			<-ctx.Done()
			return "", context.Cause(ctx)
		})
	if !errors.Is(err, once.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost", err)
	}
	if d := time.Since(begin); d < 149*time.Millisecond || d > 2*time.Second {
		t.Errorf("cancelled after %v, want at the lease's end (150ms)", d)
	}
	if n := s.n.Load(); n != 0 {
		t.Errorf("%d renewals, want none", n)
	}
}

// TestRenewedIsTold: the Renewed hook hears each extension, and the lease
// running out.
func TestRenewedIsTold(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	var extended, expired atomic.Int32
	var tries atomic.Int32
	_, err := once.Do(t.Context(), s, "k", once.Options{
		Lease: 300 * time.Millisecond, RenewEvery: 20 * time.Millisecond,
		Extend: func(context.Context) (time.Time, error) {
			if tries.Add(1) > 3 {
				return time.Time{}, errors.New("cannot extend")
			}
			return time.Now().Add(300 * time.Millisecond), nil
		},
		Renewed: func(r once.Renewal) {
			switch {
			case r.Expired:
				if !r.Lost || !errors.Is(r.Err, once.ErrLeaseLost) {
					t.Errorf("expiry told as %+v, want lost with ErrLeaseLost", r)
				}
				expired.Add(1)
			case r.Extended:
				extended.Add(1)
			case r.Err == nil:
				t.Errorf("a renewal neither extended nor failed: %+v", r)
			}
		},
	}, func(ctx context.Context, _ once.Call) (string, error) {
		<-ctx.Done()
		return "", context.Cause(ctx)
	})
	if !errors.Is(err, once.ErrLeaseLost) || extended.Load() != 3 || expired.Load() != 1 {
		t.Errorf("Do = %v, extended %d, expired %d; want ErrLeaseLost, 3, 1", err, extended.Load(), expired.Load())
	}
}

// failingComplete fails every Complete.
type failingComplete struct{ claimstore.Store }

func (failingComplete) Complete(context.Context, claimstore.CompleteParams) error {
	return errors.New("store unavailable")
}

// TestRetryDecidesAboutFailedCompletions: the Retry hook is asked after
// each failed completion, and giving up is ErrNotStored.
func TestRetryDecidesAboutFailedCompletions(t *testing.T) {
	t.Parallel()
	s := failingComplete{memory.New(memory.Config{})}
	var tries []int
	_, err := once.Do(t.Context(), s, "k", once.Options{
		Retry: func(_ context.Context, op string, try int, err error) bool {
			if op != "complete" || err == nil {
				t.Errorf("Retry(%q, %d, %v)", op, try, err)
			}
			tries = append(tries, try)
			return try < 2
		},
	}, func(context.Context, once.Call) (string, error) { return "v", nil })
	var se *once.StoreError
	if !errors.Is(err, once.ErrNotStored) || !errors.As(err, &se) || se.Op != "complete" {
		t.Fatalf("Do = %v, want ErrNotStored with the store's error", err)
	}
	if len(tries) != 3 || tries[2] != 2 {
		t.Errorf("Retry asked at tries %v, want 0, 1, 2", tries)
	}
}

// TestCompleteTxWithoutTransactions: a store without transactions refuses
// writes with the completion, clearly, and the claim is still held.
func TestCompleteTxWithoutTransactions(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	c, _, err := once.Acquire(t.Context(), s, "k", once.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.CompleteTx(t.Context(), "v", txWrites(1))
	if !errors.Is(err, claimstore.ErrTxUnsupported) {
		t.Fatalf("CompleteTx = %v, want ErrTxUnsupported", err)
	}
	if err := c.Complete(t.Context(), "v"); err != nil {
		t.Errorf("Complete after the refused transaction = %v, want the claim still held", err)
	}
}

// txWrites is n writes of nothing in particular.
type txWrites int

func (w txWrites) Len() int { return int(w) }

// blipRenew fails every Renew with a store error (not ErrLeaseLost) while
// failing is set: a store blip, which says nothing about who holds the key.
type blipRenew struct {
	claimstore.Store
	failing atomic.Bool
	failed  atomic.Int32
}

func (s *blipRenew) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if s.failing.Load() {
		s.failed.Add(1)
		return errors.New("dynamodb: 500 internal server error")
	}
	return s.Store.Renew(ctx, p)
}

// TestLocalExpiryStillCompletes: renewals fail with store errors for
// longer than a lease, so the lease runs out on the holder's clock and the
// function's context ends; the function succeeds all the same, and nobody
// took the key over. The claim is completed (the completion is conditioned
// on the acquisition, so it is safe), the caller gets the result, and a
// later call replays it: one run. Only the store saying the lease is lost
// means not completing.
func TestLocalExpiryStillCompletes(t *testing.T) {
	t.Parallel()
	s := &blipRenew{Store: memory.New(memory.Config{})}
	s.failing.Store(true)
	var runs, expired atomic.Int32
	opts := once.Options{Lease: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond,
		Renewed: func(r once.Renewal) {
			if r.Expired {
				expired.Add(1)
			}
		}}
	fn := func(ctx context.Context, _ once.Call) (string, error) {
		runs.Add(1)
		<-ctx.Done() // the watchdog: the lease ran out on this clock
		if !errors.Is(context.Cause(ctx), once.ErrLeaseLost) {
			t.Errorf("cause %v, want one matching ErrLeaseLost", context.Cause(ctx))
		}
		s.failing.Store(false)
		return "sent", nil // the effect happened before it noticed
	}
	v, err := once.Do(t.Context(), s, "k", opts, fn)
	if err != nil || v != "sent" {
		t.Fatalf("Do = %q, %v; want the result, completed after the local expiry", v, err)
	}
	if expired.Load() != 1 || s.failed.Load() == 0 {
		t.Fatalf("expired %d times after %d failed renewals; want the lease to have run out", expired.Load(), s.failed.Load())
	}
	r, err := once.Run(t.Context(), s, "k", opts, fn)
	if err != nil || !r.Replayed || r.Value != "sent" || runs.Load() != 1 {
		t.Fatalf("second call = %+v, %v after %d runs; want the result replayed, one run", r, err, runs.Load())
	}
}

// TestLocalExpiryAfterTakeoverDoesNotComplete: the lease ran out on the
// holder's clock and another caller took the key over meanwhile: the late
// completion is refused by the store (ErrLeaseLost) and the taker's claim
// is untouched.
func TestLocalExpiryAfterTakeoverDoesNotComplete(t *testing.T) {
	t.Parallel()
	s := &blipRenew{Store: memory.New(memory.Config{})}
	s.failing.Store(true)
	opts := once.Options{Lease: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond}
	_, err := once.Do(t.Context(), s, "k", opts, func(ctx context.Context, _ once.Call) (string, error) {
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // past the store's lease end too
		if _, _, err := once.Acquire(t.Context(), s, "k", once.Options{Owner: "taker"}); err != nil {
			t.Errorf("takeover: %v", err)
		}
		return "late", nil
	})
	if !errors.Is(err, once.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost from the completion", err)
	}
	if got, _ := s.Get(t.Context(), "k"); got.Owner != "taker" || got.Status != claimstore.StatusInProgress {
		t.Errorf("claim = %+v, want the taker's, untouched", got)
	}
}

// TestRenewalsOutliveTheCallersContext: the caller's context ends (a
// shutdown) while the function ignores it and runs on past its lease. The
// lease is renewed until the function returns, so another caller finds the
// key held and never runs it alongside; the function's result is stored.
func TestRenewalsOutliveTheCallersContext(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	var running, overlapped, runs atomic.Int32
	fn := func(context.Context, once.Call) (string, error) {
		runs.Add(1)
		if running.Add(1) > 1 {
			overlapped.Add(1)
		}
		defer running.Add(-1)
		cancel()
		time.Sleep(800 * time.Millisecond) // ignores its context: four leases
		return "done", nil
	}
	opts := once.Options{Lease: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond}
	first := make(chan error, 1)
	go func() {
		_, err := once.Do(ctx, s, "k", opts, fn)
		first <- err
	}()
	deadline := time.Now().Add(700 * time.Millisecond)
	for time.Now().Before(deadline) && runs.Load() < 2 {
		time.Sleep(50 * time.Millisecond)
		if _, err := once.Do(t.Context(), s, "k", opts, fn); err != nil && !errors.Is(err, once.ErrHeldElsewhere) {
			t.Errorf("second caller: %v", err)
		}
	}
	if err := <-first; err != nil {
		t.Errorf("first caller: %v", err)
	}
	if n, o := runs.Load(), overlapped.Load(); n != 1 || o != 0 {
		t.Fatalf("the function ran %d times, %d of them alongside another; want once: the lease lapsed while it ran", n, o)
	}
	if v, err := once.Do(t.Context(), s, "k", opts, fn); v != "done" || err != nil {
		t.Errorf("after = %q, %v; want the result replayed", v, err)
	}
}
