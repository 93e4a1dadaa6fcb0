package demo

import (
	"context"
	"time"

	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// everyoneWins is a broken claim store, one without its conditions: every
// Acquire says Acquired, and the holder's writes apply to whatever row is
// there.
type everyoneWins struct{ claimstore.Store }

func (s everyoneWins) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := s.Store.Acquire(ctx, p)
	if err == nil && a.Outcome != claimstore.Acquired {
		a.Outcome, a.Claim.LeaseUntil, a.Claim.Status = claimstore.Acquired, p.LeaseUntil, claimstore.StatusInProgress
	}
	return a, err
}

// current is h as the row stands: the write then applies whoever holds it.
func (s everyoneWins) current(ctx context.Context, h claimstore.Holder) claimstore.Holder {
	if c, err := s.Get(ctx, h.Key); err == nil {
		h.Acq, h.Token = c.Acq, c.Token
	}
	return h
}

func (s everyoneWins) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if c, err := s.Get(ctx, p.Key); err == nil && c.Status == claimstore.StatusCompleted {
		return nil // the other winner completed it: take that as ours
	}
	p.Holder = s.current(ctx, p.Holder)
	return s.Store.Complete(ctx, p)
}

func (s everyoneWins) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	p.Holder = s.current(ctx, p.Holder)
	return s.Store.Release(ctx, p)
}

// TestDemoRunsTheLibrary: the demo's claim-first rows run the library's
// code, so a broken library shows in them: with a claim store whose
// Acquire always wins, experiment 1's claim-first row charges payments
// twice (with the real store it charges each once).
func TestDemoRunsTheLibrary(t *testing.T) {
	t.Parallel()
	for _, broken := range []bool{false, true} {
		opts := Options{Payments: 400, Seed: 1}
		if broken {
			opts.NewStore = func(_ context.Context, _ string, now func() time.Time) (claimstore.Store, error) {
				return everyoneWins{memory.New(memory.Config{Now: now})}, nil
			}
		}
		res, err := runRace(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if double := res.ClaimFirst.Double; (double > 0) != broken {
			t.Errorf("store broken %v: claim-first row charged %d payments twice", broken, double)
		}
	}
}
