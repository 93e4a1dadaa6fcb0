package demo

import (
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// TestRacePostgres runs experiment 1 with claims in PostgreSQL: exactly
// one charge per payment.
func TestRacePostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	const n = 100
	res, err := runRace(t.Context(), Options{Payments: n, Seed: 1, NewStore: PostgresStores(pool, table)})
	if err != nil {
		t.Fatal(err)
	}
	if res.ClaimFirst.Charges != n || res.ClaimFirst.Deliveries != n+n/20 {
		t.Errorf("claim first on PostgreSQL: deliveries %d, charges %d; want %d, %d",
			res.ClaimFirst.Deliveries, res.ClaimFirst.Charges, n+n/20, n)
	}
}

// TestLedgerPostgres runs experiment 7 with the claims and the ledger in
// PostgreSQL: written first and completed after, crashed entries are
// written twice; in one transaction with the completion, exactly once.
func TestLedgerPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	pl := PostgresLedger{DB: pool, Tables: pgtest.Name("demo_ledger")}
	if err := CreatePostgresLedger(t.Context(), pl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(t.Context(), "DROP TABLE "+pl.Tables+"_journal, "+pl.Tables+"_balances") })
	const n = 100
	res, err := runLedger(t.Context(), Options{Payments: n, Seed: 1, NewStore: PostgresStores(pool, table), PostgresLedger: &pl})
	if err != nil {
		t.Fatal(err)
	}
	if w := res.WriteThenComplete; w.Crashed != n/50 || w.Entries != n+n/50 || w.Double != n/50 || w.BalanceError == 0 {
		t.Errorf("write, then complete on PostgreSQL: %+v; want %d crashed, %d entries, double %d, balances off", w, n/50, n+n/50, n/50)
	}
	if o := res.OneTransaction; o.Crashed != n/50 || o.Entries != n || !o.OK() || o.BalanceError != 0 {
		t.Errorf("one transaction on PostgreSQL: %+v; want %d crashed, %d entries, ok, balances exact", o, n/50, n)
	}
}

// TestKafkaPostgres runs experiment 9's claim-based row with its claims in
// PostgreSQL: each payment charged once, every record committed.
func TestKafkaPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	const n = 400
	opts := Options{Payments: n, Seed: 1, NewStore: PostgresStores(pool, table)}
	if err := opts.setDefaults(); err != nil {
		t.Fatal(err)
	}
	ps := payments(n, opts.Seed)
	r, err := runKafkaRow(t.Context(), opts, "kafka-claims", labelKafkaClaims, true, ps, choose(ps, redeliverEvery, opts.Seed, saltKafka))
	if err != nil {
		t.Fatal(err)
	}
	if r.Charges != n || !r.OK() || r.Uncommitted != 0 {
		t.Errorf("claim first on PostgreSQL: charges %d, %s, uncommitted %d; want %d, ok, 0", r.Charges, r.effects, r.Uncommitted, n)
	}
	t.Logf("claim first on PostgreSQL: read again %d, charges %d, %s, in %s", r.ReadAgain, r.Charges, r.effects, r.Elapsed.Round(100*time.Millisecond))
}
