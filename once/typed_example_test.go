package once_test

import (
	"context"
	"fmt"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// Results of your own type: stored as JSON with the completed claim, and
// decoded into the type again on a replay.
func ExampleRunValue() {
	type Receipt struct {
		ChargeID string `json:"charge_id"`
		Amount   int64  `json:"amount"`
	}
	store := memory.New(memory.Config{})
	charge := func(context.Context, once.Call) (Receipt, error) {
		return Receipt{ChargeID: "ch_123", Amount: 1999}, nil
	}
	for range 2 {
		r, err := once.RunValue(context.Background(), store, "order-7", once.Options{}, charge)
		fmt.Printf("%+v replayed=%v err=%v\n", r.Value, r.Replayed, err)
	}
	// Output:
	// {ChargeID:ch_123 Amount:1999} replayed=false err=<nil>
	// {ChargeID:ch_123 Amount:1999} replayed=true err=<nil>
}
