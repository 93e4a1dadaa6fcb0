package once_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// A side effect that does not come from SQS (a webhook, a cron job, a Kafka
// consumer) made to happen at most once per key. In production the store is
// claimstore/dynamo, shared by every process that may run the work.
func Example() {
	store := memory.New(memory.Config{KeyPrefix: "welcome#"})
	sendWelcome := func(ctx context.Context, c once.Call) (string, error) {
		// c.Key is claimed by this caller alone until it returns; ctx ends
		// if the claim is lost. c.Token fences a superseded holder downstream.
		return fmt.Sprintf("mail %s sent (token %d)", c.Key, c.Token), nil
	}
	for range 2 { // the webhook is delivered twice
		r, err := once.Run(context.Background(), store, "cust_42", once.Options{}, sendWelcome)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s, replayed: %v\n", r.Value, r.Replayed)
	}
	// Output:
	// mail cust_42 sent (token 1), replayed: false
	// mail cust_42 sent (token 1), replayed: true
}

// Concurrent callers: one runs the function; the others find the key held
// elsewhere, and Wait waits for its result.
func ExampleWait() {
	store := memory.New(memory.Config{})
	var runs atomic.Int32
	report := func(ctx context.Context, c once.Call) (string, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond) // the nightly report takes a while
		return "report-2026-12-03.csv", nil
	}
	var wg sync.WaitGroup
	results := make([]string, 4)
	for i := range results {
		wg.Go(func() {
			v, err := once.Wait(context.Background(), store, "nightly:2026-12-03", once.Options{MinBackoff: 10 * time.Millisecond}, report)
			if err != nil {
				log.Fatal(err)
			}
			results[i] = v
		})
	}
	wg.Wait()
	fmt.Println(results, "runs:", runs.Load())
	// Output:
	// [report-2026-12-03.csv report-2026-12-03.csv report-2026-12-03.csv report-2026-12-03.csv] runs: 1
}

// The errors a caller decides on: a failure releases the key (the next call
// runs again), and the same key with another fingerprint is key reuse.
func ExampleDo_errors() {
	store := memory.New(memory.Config{})
	ctx := context.Background()
	opts := once.Options{Fingerprint: "amount=1999"}
	_, err := once.Do(ctx, store, "refund_7", opts, func(context.Context, once.Call) (string, error) {
		return "", errors.New("bank unavailable")
	})
	fmt.Println("first:", err)
	v, err := once.Do(ctx, store, "refund_7", opts, func(_ context.Context, c once.Call) (string, error) {
		return fmt.Sprintf("refunded on attempt %d", c.Attempt), nil
	})
	fmt.Println("retry:", v, err)
	_, err = once.Do(ctx, store, "refund_7", once.Options{Fingerprint: "amount=2500"}, nil)
	fmt.Println("reused:", errors.Is(err, once.ErrKeyReused))
	// Output:
	// first: bank unavailable
	// retry: refunded on attempt 2 <nil>
	// reused: true
}

// The steps of Run, for a caller that holds the claim around work of its own
// shape: here, retrying a flaky call in process under one claim before
// giving the key up.
func ExampleAcquire() {
	store := memory.New(memory.Config{})
	ctx := context.Background()
	c, stored, err := once.Acquire(ctx, store, "export-7", once.Options{Lease: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if c == nil { // completed before
		fmt.Println("already done:", stored.Value)
		return
	}
	export := func(try int) error { // times out once, then works
		if try == 1 {
			return errors.New("export timed out")
		}
		return nil
	}
	tries := 0
	err = c.Hold(ctx, func(ctx context.Context) error { // ctx ends if the lease is lost
		var err error
		for tries = 1; tries <= 3 && ctx.Err() == nil; tries++ {
			if err = export(tries); err == nil {
				return nil
			}
		}
		return err
	})
	switch {
	case errors.Is(err, once.ErrLeaseLost):
		return // another holder owns the key: touch nothing
	case err != nil:
		if rerr := c.Release(ctx, err.Error()); rerr != nil {
			log.Print(rerr)
		}
		return
	}
	if err := c.Complete(ctx, fmt.Sprintf("exported after %d tries", tries)); err != nil {
		log.Fatal(err)
	}
	_, again, _ := once.Acquire(ctx, store, "export-7", once.Options{})
	fmt.Println(again.Value, "| replayed:", again.Replayed)
	// Output:
	// exported after 2 tries | replayed: true
}
