package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/origin"
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
	if d := f.p.process(ctx, &Message{ID: "a", Attempt: 1}, f.lease()); d.Action != Ack {
		t.Fatalf("first delivery: %v, want ack", d.Action)
	}
	if d := f.p.process(ctx, &Message{ID: "a", Attempt: 2}, f.lease()); d.Action != Ack {
		t.Fatalf("redelivery: %v, want ack", d.Action)
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
		{"redriven by worker redrive", Message{ID: "m-2", Body: "b", Attributes: map[string]string{OriginalIDAttribute: origin.Sign(testSecret, "m-1", "", "b")}}, "m-1"},
		{"unsigned: not believed", Message{ID: "m-2", Attributes: map[string]string{OriginalIDAttribute: "m-1"}}, "m-2"},
	} {
		m := tc.m
		verifyOrigin(&m, testSecret, slog.New(slog.DiscardHandler))
		if err := KeyFromMessageID.Decode(&m); err != nil || m.Key != tc.want {
			t.Errorf("%s: key %q, %v; want %q", tc.name, m.Key, err, tc.want)
		}
	}
}

// TestDuplicateLogCapsTheResult: a duplicate's log line carries a stored
// result as a completion's does: its first bytes and its size, never the
// whole of a large one (300 KB logged per duplicate otherwise).
func TestDuplicateLogCapsTheResult(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("r", 300*1024)
	f := newFixture(ok(big))
	var logs syncbuf.Buffer
	f.p.log = slog.New(slog.NewJSONHandler(&logs, nil))
	ctx := context.Background()
	for rc := 1; rc <= 2; rc++ {
		if d := f.p.process(ctx, &Message{ID: "a", Attempt: rc}, f.lease()); d.Action != Ack {
			t.Fatalf("delivery %d: %v, want ack", rc, d.Action)
		}
	}
	var dup map[string]any
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l["outcome"] == string(OutcomeDuplicate) {
			dup = l
		}
	}
	if dup == nil {
		t.Fatalf("no duplicate logged:\n%.2000s", logs.String())
	}
	r, _ := dup["result"].(string)
	if len(r) > maxLoggedResult+3 || dup["result_bytes"] != float64(len(big)) {
		t.Errorf("the duplicate's line carries %d bytes of the result and result_bytes %v; want at most %d and %d",
			len(r), dup["result_bytes"], maxLoggedResult+3, len(big))
	}
}

// TestValueHandlerResultThatDoesNotEncodeRunsOnce: a ValueHandler whose
// effect happened but whose result does not encode (a NaN in JSON) runs
// once: the claim is completed with the marker of a result not stored,
// never released, the message acked, and its redelivery acked as a
// duplicate without running the handler. Held or not, the failure is not
// retried in process.
func TestValueHandlerResultThatDoesNotEncodeRunsOnce(t *testing.T) {
	t.Parallel()
	type measured struct {
		Ratio float64 `json:"ratio"`
	}
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			f := newFixture(ValueHandler[measured]{Func: func(context.Context, *Message) (measured, error) {
				runs.Add(1)
				return measured{Ratio: math.NaN()}, nil
			}})
			l := f.lease()
			if held {
				l = holdingLease(make(chan struct{}))
			}
			ctx := context.Background()
			for rc := 1; rc <= 2; rc++ {
				if d := f.p.process(ctx, &Message{ID: "a", Attempt: rc}, l); d.Action != Ack {
					t.Fatalf("delivery %d: %+v, want ack", rc, d)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			if n, c, dup := f.metrics.ResultsNotStored(), f.metrics.Count(OutcomeCompleted), f.metrics.Count(OutcomeDuplicate); n != 1 || c != 1 || dup != 1 {
				t.Errorf("results not stored %d, completed %d, duplicates %d; want 1, 1, 1", n, c, dup)
			}
			c, err := f.store.Get(ctx, "a")
			if err != nil || c.Status != claimstore.StatusCompleted || !strings.Contains(c.Result, "unsupported value: NaN") {
				t.Errorf("claim %s with result %q (%v); want COMPLETED with the marker of a result that did not encode", c.Status, c.Result, err)
			}
		})
	}
}
