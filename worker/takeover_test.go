package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
)

// TestTakeoverLoggedAndCounted: a delivery that takes over a claim whose
// holder's lease ended, or that its holder released, says so in a log line
// naming the previous owner and the tokens, and counts it in
// claimfirst_takeovers_total by what it took over.
func TestTakeoverLoggedAndCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, from string
		release    bool
	}{
		{"expired lease", "expired", false},
		{"released", "released", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(ok("ch_1"))
			logs := &syncbuf.Buffer{}
			f.p.log = slog.New(slog.NewJSONHandler(logs, nil))
			ctx := context.Background()
			a, err := f.store.Acquire(ctx, claimstore.AcquireParams{
				Key: "m1", Owner: "crashed", LeaseUntil: f.clock.Now().Add(time.Second), ExpiresAt: f.clock.Now().Add(time.Hour),
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.release {
				if err := f.store.Release(ctx, claimstore.ReleaseParams{Holder: a.Claim.Holder(), LastError: "provider unavailable"}); err != nil {
					t.Fatal(err)
				}
			}
			f.clock.Advance(time.Minute)
			if d := f.p.process(ctx, &Message{ID: "m1", Body: "{}", Attempt: 2}, f.lease()); d.Action != Ack {
				t.Fatalf("%+v, want ack", d)
			}
			var line map[string]any
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(m["msg"].(string), "took over") {
					line = m
				}
			}
			if line == nil {
				t.Fatalf("no takeover line in:\n%s", logs.String())
			}
			if line["previous_owner"] != "crashed" || line["previous_token"] != 1.0 || line["token"] != 2.0 || line["from"] != tc.from {
				t.Errorf("takeover line %v: want previous_owner crashed, previous_token 1, token 2, from %s", line, tc.from)
			}
			if n := f.metrics.Takeovers(tc.from); n != 1 {
				t.Errorf("takeovers{from=%q} = %d, want 1", tc.from, n)
			}
		})
	}
}
