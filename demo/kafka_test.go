package demo

import (
	"context"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// TestKafka: experiment 9 at the default size and seed: the plain
// consumer charges some payments twice (the producer's retries and the
// records read again), the claim-based members charge each once and commit
// every record: the committed offsets equal the end offsets.
func TestKafka(t *testing.T) {
	t.Parallel()
	res, err := runKafka(t.Context(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	records := n + n/redeliverEvery
	for _, r := range []kafkaRow{res.Plain, res.Claims} {
		if r.Records != records || r.Payments != n {
			t.Fatalf("records %d, payments %d; want %d, %d", r.Records, r.Payments, records, n)
		}
	}
	for _, r := range []kafkaRow{res.Plain, res.Claims} {
		t.Logf("read again %d, charges %d, uncommitted %d, %s, in %s", r.ReadAgain, r.Charges, r.Uncommitted, r.effects, r.Elapsed.Round(100*time.Millisecond))
	}
	// Charged, then committed: every producer's retry and every record read
	// again is charged again.
	if p := res.Plain; p.Double != n/redeliverEvery+p.ReadAgain || p.Double == 0 || p.Lost != 0 || p.Uncommitted != 0 {
		t.Errorf("charge, then commit: double %d, lost %d, uncommitted %d; want the %d producer's retries plus the %d records read again charged twice, none lost, none uncommitted",
			p.Double, p.Lost, p.Uncommitted, n/redeliverEvery, p.ReadAgain)
	}
	if res.Claims.Charges != n || !res.Claims.OK() || res.Claims.Uncommitted != 0 {
		t.Errorf("claim first: charges %d, double %d, lost %d, uncommitted %d; want %d, 0, 0, 0 (committed offsets equal end offsets)",
			res.Claims.Charges, res.Claims.Double, res.Claims.Lost, res.Claims.Uncommitted, n)
	}
}

// TestKafkaRunsTheLibrary: the claim-based row runs the library's
// protocol over the claim store, so a store whose Acquire always wins
// shows in it: the producer's retries are charged twice.
func TestKafkaRunsTheLibrary(t *testing.T) {
	t.Parallel()
	opts := Options{Payments: 200, Seed: 1}
	opts.NewStore = func(_ context.Context, _ string, now func() time.Time) (claimstore.Store, error) {
		return everyoneWins{memory.New(memory.Config{Now: now})}, nil
	}
	if err := opts.setDefaults(); err != nil {
		t.Fatal(err)
	}
	ps := payments(opts.Payments, opts.Seed)
	row, err := runKafkaRow(t.Context(), opts, "kafka-broken", labelKafkaClaims, true, ps, choose(ps, redeliverEvery, opts.Seed, saltKafka))
	if err != nil {
		t.Fatal(err)
	}
	if row.Double < opts.Payments/redeliverEvery {
		t.Errorf("claims that everyone wins: double %d, want at least the %d producer's retries", row.Double, opts.Payments/redeliverEvery)
	}
	t.Logf("claims that everyone wins: charges %d, %s", row.Charges, row.effects)
}
