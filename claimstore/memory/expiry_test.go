package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// fill acquires and completes n new keys, each kept for retention.
func fill(t *testing.T, s *memory.Store, clock *claimstoretest.Clock, prefix string, n int, retention time.Duration) error {
	t.Helper()
	for i := range n {
		now := clock.Now()
		a, err := s.Acquire(context.Background(), claimstore.AcquireParams{
			Key: fmt.Sprintf("%s-%d", prefix, i), Owner: "w",
			LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(retention),
		})
		if err != nil {
			return err
		}
		h := claimstore.Holder{Key: a.Claim.Key, Token: a.Claim.Token, Acq: a.Claim.Acq}
		if err := s.Complete(context.Background(), claimstore.CompleteParams{Holder: h, Result: "r", ExpiresAt: now.Add(retention)}); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

func TestExpiredRowsAreDropped(t *testing.T) {
	t.Parallel()
	clock := claimstoretest.NewClock()
	s := memory.New(memory.Config{Now: clock.Now})
	if err := fill(t, s, clock, "a", 5000, time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute) // every row expired
	if err := fill(t, s, clock, "b", 5000, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n > 6000 {
		t.Errorf("the store holds %d rows after 5000 expired and 5000 live ones, want the expired ones dropped", n)
	}
}

func TestMaxClaimsBoundsTheStore(t *testing.T) {
	t.Parallel()
	clock := claimstoretest.NewClock()
	s := memory.New(memory.Config{Now: clock.Now, MaxClaims: 100})
	if err := fill(t, s, clock, "a", 100, time.Minute); err != nil {
		t.Fatal(err)
	}
	err := fill(t, s, clock, "b", 1, time.Minute)
	if !errors.Is(err, memory.ErrFull) {
		t.Fatalf("the 101st live key: err = %v, want ErrFull", err)
	}
	clock.Advance(2 * time.Minute) // the 100 expire: room again
	if err := fill(t, s, clock, "c", 100, time.Minute); err != nil {
		t.Fatalf("after the rows expired: %v", err)
	}
	if n := s.Len(); n > 100 {
		t.Errorf("the store holds %d rows, more than MaxClaims 100", n)
	}
}
