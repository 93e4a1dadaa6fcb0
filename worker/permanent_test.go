package worker_test

import (
	"errors"
	"testing"

	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/worker"
)

// TestOnePermanent: an error marked permanent by either package is
// permanent to both, so a handler built on once dead-letters a permanent
// failure, and once.Wait stops retrying a worker.Permanent one.
func TestOnePermanent(t *testing.T) {
	cause := errors.New("card number invalid")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"once.Permanent", once.Permanent("invalid card", cause)},
		{"worker.Permanent", worker.Permanent("invalid card", cause)},
		{"worker.Permanentf", worker.Permanentf("invalid card %d", 4)},
	} {
		if !worker.IsPermanent(tc.err) {
			t.Errorf("%s: worker.IsPermanent = false", tc.name)
		}
		if !once.IsPermanent(tc.err) {
			t.Errorf("%s: once.IsPermanent = false", tc.name)
		}
	}
	if worker.IsPermanent(cause) || once.IsPermanent(cause) {
		t.Error("a plain error is permanent")
	}
}
