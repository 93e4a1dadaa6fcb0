package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// An operator reconciles a payment by hand: its claim was released after a
// failure whose outcome was unknown, the charge is found at the provider, and
// ForceComplete records it so that the redriven message is a duplicate.
func ExampleStore_ForceComplete() {
	ctx := context.Background()
	s := memory.New(memory.Config{})
	now := time.Now()
	a, _ := s.Acquire(ctx, claimstore.AcquireParams{Key: "pay_1", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	_ = s.Release(ctx, claimstore.ReleaseParams{Holder: a.Claim.Holder(), LastError: "provider timed out"})

	before, err := s.ForceComplete(ctx, claimstore.ForceCompleteParams{Key: "pay_1", Result: "ch_found", ExpiresAt: now.Add(24 * time.Hour)})
	fmt.Println(before.Status, "->", claimstore.StatusCompleted, err)

	d, _ := s.Acquire(ctx, claimstore.AcquireParams{Key: "pay_1", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	fmt.Println(d.Outcome, d.Claim.Result)

	_, err = s.ForceRelease(ctx, "pay_1")
	fmt.Println(errors.Is(err, claimstore.ErrWrongState))
	// Output:
	// RELEASED -> COMPLETED <nil>
	// duplicate ch_found
	// true
}
