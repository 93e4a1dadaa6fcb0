package once_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/once"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends returns the conformance suite's two stores: memory, and DynamoDB
// on the emulator (skipped without one, failed under the emulator launcher).
func backends(t *testing.T) map[string]func(t *testing.T) claimstore.Store {
	return map[string]func(t *testing.T) claimstore.Store{
		"memory": func(*testing.T) claimstore.Store { return memory.New(memory.Config{KeyPrefix: "once#"}) },
		"dynamo": func(t *testing.T) claimstore.Store {
			client, table := awstest.ClaimTable(t, "once")
			s, err := dynamo.New(dynamo.Config{Client: client, Table: table, KeyPrefix: "once#"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// eachBackend runs test as a parallel subtest per backend.
func eachBackend(t *testing.T, test func(t *testing.T, s claimstore.Store, key string)) {
	t.Helper()
	for name, newStore := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newStore(t), awstest.Name("key"))
		})
	}
}

func TestExactlyOneOfSixteenConcurrentCallersRuns(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		const n = 16
		var runs atomic.Int32
		fn := func(ctx context.Context, c once.Call) (string, error) {
			runs.Add(1)
			time.Sleep(100 * time.Millisecond) // long enough that every caller finds it held
			return fmt.Sprintf("done by token %d", c.Token), nil
		}
		results := make([]string, n)
		errs := make([]error, n)
		var held atomic.Int32
		begin := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-begin
				_, err := once.Do(t.Context(), s, key, once.Options{}, fn)
				if errors.Is(err, once.ErrHeldElsewhere) {
					held.Add(1)
				}
				// Then wait for the result like a patient caller.
				results[i], errs[i] = once.Wait(t.Context(), s, key, once.Options{MinBackoff: 10 * time.Millisecond}, fn)
			})
		}
		close(begin)
		wg.Wait()
		if got := runs.Load(); got != 1 {
			t.Fatalf("fn ran %d times for one key, want 1", got)
		}
		if held.Load() < 1 {
			t.Errorf("no caller found the key held elsewhere while fn ran")
		}
		for i := range n {
			if errs[i] != nil || results[i] != "done by token 1" {
				t.Errorf("caller %d: %q, %v; want the stored result", i, results[i], errs[i])
			}
		}
		t.Logf("%d callers, one key: fn ran once, %d found it held elsewhere", n, held.Load())
	})
}

func TestStoredResultIsReturned(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		first, err := once.Run(t.Context(), s, key, once.Options{Fingerprint: "fp"}, func(_ context.Context, c once.Call) (string, error) {
			if c.Token != 1 || c.Attempt != 1 || c.FirstAt.IsZero() || c.Key != key {
				t.Errorf("call = %+v, want token 1, attempt 1, first_at set, key %q", c, key)
			}
			return "ch_1", nil
		})
		if err != nil || first.Value != "ch_1" || first.Replayed {
			t.Fatalf("first = %+v, %v", first, err)
		}
		again, err := once.Run(t.Context(), s, key, once.Options{Fingerprint: "fp"}, func(context.Context, once.Call) (string, error) {
			t.Error("fn ran again for a completed key")
			return "", nil
		})
		if err != nil || again.Value != "ch_1" || !again.Replayed || again.Token != 1 {
			t.Fatalf("again = %+v, %v; want ch_1 replayed from token 1", again, err)
		}
	})
}

func TestLeaseLossCancelsTheFunction(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		// Someone takes the claim from under the holder (an operator's
		// `worker claims release`, or a takeover): the next renewal fails.
		started := make(chan struct{})
		var cause error
		errc := make(chan error, 1)
		go func() {
			_, err := once.Do(t.Context(), s, key, once.Options{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond},
				func(ctx context.Context, _ once.Call) (string, error) {
					close(started)
					select {
					case <-ctx.Done():
						cause = context.Cause(ctx)
						return "", ctx.Err()
					case <-time.After(20 * time.Second):
						return "not cancelled", nil
					}
				})
			errc <- err
		}()
		<-started
		c, err := s.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), claimstore.ReleaseParams{Holder: c.Holder()}); err != nil {
			t.Fatal(err)
		}
		taken, err := s.Acquire(t.Context(), claimstore.AcquireParams{Key: key, Owner: "other", LeaseUntil: time.Now().Add(time.Minute), ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil || taken.Outcome != claimstore.Acquired {
			t.Fatalf("takeover = %v, %v", taken.Outcome, err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, once.ErrLeaseLost) || !errors.Is(cause, once.ErrLeaseLost) {
				t.Fatalf("Do = %v with fn's context cause %v, want ErrLeaseLost for both", err, cause)
			}
		case <-time.After(3 * time.Second): // well before the lease would run out
			t.Fatal("fn's context was not cancelled after the lease was lost")
		}
		// The new holder's claim is untouched: no release, no completion.
		if got, err := s.Get(t.Context(), key); err != nil || got.Status != claimstore.StatusInProgress || got.Owner != "other" {
			t.Errorf("claim after the lost holder returned = %+v, %v; want the new holder's", got, err)
		}
	})
}

func TestLeaseRunningOutCancelsTheFunction(t *testing.T) {
	t.Parallel()
	// Renewals cannot extend it (the hook says so): the watchdog cancels fn
	// when the lease ends, though nobody took the key over yet.
	s := memory.New(memory.Config{})
	begin := time.Now()
	_, err := once.Do(t.Context(), s, "k", once.Options{
		Lease: 200 * time.Millisecond, RenewEvery: 20 * time.Millisecond,
		Extend: func(context.Context) (time.Time, error) { return time.Time{}, errors.New("cannot extend") },
	}, func(ctx context.Context, _ once.Call) (string, error) {
		<-ctx.Done()
		return "", context.Cause(ctx)
	})
	if !errors.Is(err, once.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost", err)
	}
	// Stores keep times to the millisecond, so the lease may end up to 1 ms
	// before begin+200ms.
	if d := time.Since(begin); d < 199*time.Millisecond || d > 2*time.Second {
		t.Errorf("cancelled after %v, want at the lease's end (200ms)", d)
	}
}

func TestRenewalKeepsALongCallHeld(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	var renewals atomic.Int32
	got, err := once.Do(t.Context(), s, "k", once.Options{
		Lease: 150 * time.Millisecond, RenewEvery: 30 * time.Millisecond,
		Extend: func(context.Context) (time.Time, error) {
			renewals.Add(1)
			return time.Now().Add(150 * time.Millisecond), nil
		},
	}, func(ctx context.Context, _ once.Call) (string, error) {
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(600 * time.Millisecond): // four leases
		}
		_, err := once.Do(ctx, s, "k", once.Options{}, nil)
		if !errors.Is(err, once.ErrHeldElsewhere) {
			t.Errorf("another caller during a long call: %v, want ErrHeldElsewhere", err)
		}
		return "slow", nil
	})
	if err != nil || got != "slow" {
		t.Fatalf("Do = %q, %v", got, err)
	}
	if renewals.Load() < 4 {
		t.Errorf("%d renewals in four leases' time, want several", renewals.Load())
	}
}

func TestErrorReleasesAndTheNextCallRuns(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		boom := errors.New("downstream unavailable")
		_, err := once.Do(t.Context(), s, key, once.Options{}, func(context.Context, once.Call) (string, error) { return "", boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Do = %v, want fn's error", err)
		}
		if c, err := s.Get(t.Context(), key); err != nil || c.Status != claimstore.StatusReleased || c.LastError != boom.Error() {
			t.Fatalf("claim after a failure = %+v, %v; want RELEASED with the error", c, err)
		}
		v, err := once.Do(t.Context(), s, key, once.Options{}, func(_ context.Context, c once.Call) (string, error) {
			return fmt.Sprintf("token %d attempt %d", c.Token, c.Attempt), nil
		})
		if err != nil || v != "token 2 attempt 2" {
			t.Fatalf("retry = %q, %v; want it to run as token 2", v, err)
		}
		// A permanent failure releases too, and says so.
		_, err = once.Do(t.Context(), s, key+"-p", once.Options{}, func(context.Context, once.Call) (string, error) {
			return "", once.Permanent("account closed", nil)
		})
		if !once.IsPermanent(err) {
			t.Fatalf("Do = %v, want a permanent error", err)
		}
		if c, err := s.Get(t.Context(), key+"-p"); err != nil || c.Status != claimstore.StatusReleased {
			t.Fatalf("claim after a permanent failure = %+v, %v; want RELEASED", c, err)
		}
	})
}

func TestHeldElsewhereSaysUntilWhen(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	until := time.Now().Add(time.Minute)
	a, err := s.Acquire(t.Context(), claimstore.AcquireParams{Key: "k", Owner: "w1", LeaseUntil: until, ExpiresAt: until.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = once.Do(t.Context(), s, "k", once.Options{}, nil)
	var held *once.HeldError
	if !errors.As(err, &held) || !errors.Is(err, once.ErrHeldElsewhere) {
		t.Fatalf("Do = %v, want a *HeldError", err)
	}
	if held.Owner != "w1" || held.Token != a.Claim.Token || held.Until.UnixMilli() != until.UnixMilli() {
		t.Errorf("held = %+v, want owner w1 until %v", held, until)
	}
	// Wait gives up when its context ends, saying why.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = once.Wait(ctx, s, "k", once.Options{MinBackoff: 10 * time.Millisecond}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, once.ErrHeldElsewhere) {
		t.Errorf("Wait = %v, want the deadline and the hold", err)
	}
}

func TestWaitTakesOverAReleasedKey(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	a, err := s.Acquire(t.Context(), claimstore.AcquireParams{Key: "k", Owner: "w1", LeaseUntil: time.Now().Add(time.Minute), ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = s.Release(context.Background(), claimstore.ReleaseParams{Holder: a.Claim.Holder()}) })
	v, err := once.Wait(t.Context(), s, "k", once.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		func(_ context.Context, c once.Call) (string, error) { return fmt.Sprint("token ", c.Token), nil })
	if err != nil || v != "token 2" {
		t.Fatalf("Wait = %q, %v; want it to take over as token 2", v, err)
	}
}

func TestKeyReuse(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		ok := func(context.Context, once.Call) (string, error) { return "ok", nil }
		if _, err := once.Do(t.Context(), s, key, once.Options{Fingerprint: "amount=100"}, ok); err != nil {
			t.Fatal(err)
		}
		_, err := once.Do(t.Context(), s, key, once.Options{Fingerprint: "amount=200"}, ok)
		var reused *once.KeyReusedError
		if !errors.As(err, &reused) || !errors.Is(err, once.ErrKeyReused) {
			t.Fatalf("Do with another fingerprint = %v, want a *KeyReusedError", err)
		}
		if reused.Stored != "amount=100" || reused.Fingerprint != "amount=200" || !reused.HeldUntil.IsZero() {
			t.Errorf("reused = %+v", reused)
		}
	})
}

func TestPanicReleasesTheClaim(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the panic to go on", v)
			}
		}()
		_, _ = once.Do(t.Context(), s, "k", once.Options{}, func(context.Context, once.Call) (string, error) { panic("boom") })
	}()
	if c, err := s.Get(t.Context(), "k"); err != nil || c.Status != claimstore.StatusReleased {
		t.Fatalf("claim after a panic = %+v, %v; want RELEASED", c, err)
	}
}

func TestInvalidKey(t *testing.T) {
	t.Parallel()
	_, err := once.Do(t.Context(), memory.New(memory.Config{}), "", once.Options{}, nil)
	if !errors.Is(err, claimstore.ErrInvalidKey) {
		t.Fatalf("Do with an empty key = %v, want claimstore.ErrInvalidKey", err)
	}
}

func TestLeaseHooksAlignTheClaimWithAnotherLease(t *testing.T) {
	t.Parallel()
	// The SQS worker's use: the first lease ends with the message's
	// visibility, the first renewal is due counted from the receipt (here:
	// already), and each renewal extends the visibility first.
	s := memory.New(memory.Config{})
	begin := time.Now()
	leaseUntil := begin.Add(400 * time.Millisecond)
	var extended atomic.Int64
	_, err := once.Do(t.Context(), s, "k", once.Options{
		Fingerprint:  "fp",
		LeaseUntil:   leaseUntil,
		FirstRenewal: begin,
		RenewEvery:   time.Hour,
		Extend: func(context.Context) (time.Time, error) {
			until := time.Now().Add(time.Minute)
			extended.Store(until.UnixMilli())
			return until, nil
		},
	}, func(ctx context.Context, c once.Call) (string, error) {
		// The first renewal was already due and ran before fn: the claim
		// holds the lease end the renewal extended it to (or, had that
		// failed, the given one).
		claim, err := s.Get(ctx, "k")
		if lu := claim.LeaseUntil.UnixMilli(); err != nil || (lu != leaseUntil.UnixMilli() && lu != extended.Load()) || claim.Fingerprint != "fp" {
			t.Errorf("claim as acquired = %+v, %v; want the given lease end (or its renewal) and fingerprint", claim, err)
		}
		deadline := time.Now().Add(time.Second)
		for extended.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // the renewal follows the extension
		claim, _ = s.Get(ctx, "k")
		if want := extended.Load(); want == 0 || claim.LeaseUntil.UnixMilli() != want {
			t.Errorf("lease after the first renewal = %v, want the extension's %d ms", claim.LeaseUntil, want)
		}
		time.Sleep(500 * time.Millisecond) // past the first lease: it was extended
		return "ok", ctx.Err()
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
}
