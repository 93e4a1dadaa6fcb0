package worker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
)

// TestProcessResultTooLarge: a handler whose result does not fit the claim
// row runs once; the claim completes without the result, the message is
// acked and counted, and a redelivery is a duplicate, acked without running
// the handler.
func TestProcessResultTooLarge(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	big := strings.Repeat("r", claimstore.MaxResultBytes+1)
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
		runs.Add(1)
		return big, nil
	}))
	ctx := context.Background()
	if d := f.p.process(ctx, &Message{ID: "a", ReceiveCount: 1}, f.lease()); d.action != actAck {
		t.Fatalf("first delivery: %v, want ack", d.action)
	}
	if d := f.p.process(ctx, &Message{ID: "a", ReceiveCount: 2}, f.lease()); d.action != actAck {
		t.Fatalf("redelivery: %v, want ack", d.action)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if n, c, dup, se := f.metrics.ResultsNotStored(), f.metrics.Count(OutcomeCompleted), f.metrics.Count(OutcomeDuplicate), f.metrics.Count(OutcomeStoreError); n != 1 || c != 1 || dup != 1 || se != 0 {
		t.Errorf("results not stored %d, completed %d, duplicates %d, store errors %d; want 1, 1, 1, 0", n, c, dup, se)
	}
	c, err := f.store.Get(ctx, "a")
	if size, _, ok := claimstore.ParseOmittedResult(c.Result); err != nil || c.Status != claimstore.StatusCompleted || !ok || size != len(big) {
		t.Errorf("claim %s with result %.40q (%v); want COMPLETED with the marker of %d bytes", c.Status, c.Result, err, len(big))
	}
}

// TestKeyFromMessageIDKeepsTheOriginalID: a message the worker dead-lettered
// and redrive moved back has a new id and carries the first one; the
// default decoder keys it by the first, so it finds the claim its first
// delivery completed.
func TestKeyFromMessageIDKeepsTheOriginalID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    Message
		want string
	}{
		{"first delivery", Message{ID: "m-1"}, "m-1"},
		{"redriven by worker redrive", Message{ID: "m-2", Attributes: map[string]string{OriginalIDAttribute: "m-1"}}, "m-1"},
	} {
		m := tc.m
		if err := KeyFromMessageID.Decode(&m); err != nil || m.Key != tc.want {
			t.Errorf("%s: key %q, %v; want %q", tc.name, m.Key, err, tc.want)
		}
	}
}
