package once_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/once"
)

// TestResultTooLargeRunsOnce: a function whose result is larger than a
// claim row holds (here 400 KB, DynamoDB's limit for the whole item) runs
// once. Its claim is completed without the result, the first call gets the
// result and ErrResultTooLarge, and later calls get ErrResultTooLarge
// without running it. On DynamoDB (the emulator behind a proxy that refuses
// items over 400 KB, as DynamoDB does) nothing is sent that it would refuse.
func TestResultTooLargeRunsOnce(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) claimstore.Store{
		"memory": func(*testing.T) claimstore.Store { return memory.New(memory.Config{}) },
		"dynamo": func(t *testing.T) claimstore.Store {
			_, table := awstest.ClaimTable(t, "once")
			cfg, _ := awstest.WithItemLimit(t)
			s, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: table, KeyPrefix: "once#"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	big := strings.Repeat("r", 400*1024)
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, key := newStore(t), awstest.Name("big")
			var runs atomic.Int32
			fn := func(context.Context, once.Call) (string, error) {
				runs.Add(1)
				return big, nil
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			opts := once.Options{Lease: 2 * time.Second}
			// Three calls, each after the one before has ended (its lease
			// too, when it could not complete).
			var vs [3]string
			var errs [3]error
			for i := range vs {
				vs[i], errs[i] = once.Do(ctx, s, key, opts, fn)
				if errors.Is(errs[i], once.ErrNotStored) {
					time.Sleep(opts.Lease)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the function ran %d times, want 1 (errors: %v)", n, errs)
			}
			var tl *once.ResultTooLargeError
			if !errors.As(errs[0], &tl) || !errors.Is(errs[0], once.ErrResultTooLarge) || vs[0] != big {
				t.Fatalf("first call: %d bytes, err %v; want the result and a *ResultTooLargeError", len(vs[0]), errs[0])
			}
			if tl.Size != len(big) || len(tl.SHA256) != 64 {
				t.Errorf("error says size %d sha256 %q; want %d and a hex hash", tl.Size, tl.SHA256, len(big))
			}
			for i := 1; i < len(vs); i++ {
				if !errors.Is(errs[i], once.ErrResultTooLarge) || vs[i] != "" {
					t.Errorf("later call %d: %d bytes, err %v; want ErrResultTooLarge", i, len(vs[i]), errs[i])
				}
			}
		})
	}
}
