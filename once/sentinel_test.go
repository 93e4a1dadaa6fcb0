package once_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// TestOneSentinelPerMeaning: a lost lease is one error value whichever
// package names it, so errors.Is holds against either name.
func TestOneSentinelPerMeaning(t *testing.T) {
	if !errors.Is(once.ErrLeaseLost, claimstore.ErrLeaseLost) {
		t.Error("once.ErrLeaseLost is not claimstore.ErrLeaseLost")
	}
	if !errors.Is(once.ErrResultTooLarge, claimstore.ErrResultTooLarge) {
		t.Error("once.ErrResultTooLarge is not claimstore.ErrResultTooLarge")
	}
	// A claim taken over while the function runs: the call's error is the
	// store's sentinel too.
	s := memory.New(memory.Config{})
	ctx := context.Background()
	_, err := once.Do(ctx, s, "k", once.Options{Lease: time.Second, RenewEvery: 100 * time.Millisecond}, func(ctx context.Context, c once.Call) (string, error) {
		if _, err := s.ForceRelease(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		return "", ctx.Err()
	})
	if !errors.Is(err, claimstore.ErrLeaseLost) || !errors.Is(err, once.ErrLeaseLost) {
		t.Errorf("err = %v, want one that is claimstore.ErrLeaseLost and once.ErrLeaseLost", err)
	}
}
