package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// waitBlocked waits until a statement on table waits for a lock.
func waitBlocked(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no statement on %s waited for the row lock within 10s", table)
}

// TestRetryWhileFirstTryCommits: a holder's write retried while its first
// try holds the row (its COMMIT in flight) waits for the row, then finds
// the first try applied: success, not ErrLeaseLost. The first try runs in
// a transaction of its own (a store on a pgx.Tx), the retry through the
// pool; the first commits once the retry waits for its row lock.
func TestRetryWhileFirstTryCommits(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	ctx := context.Background()
	s := newStore(t, pool, table, nil)
	nothing := postgres.Writes(func(context.Context, pgx.Tx) error { return nil })
	for _, tc := range []struct {
		op   string
		want claimstore.Status
		do   func(s *postgres.Store, c claimstore.Claim) error
	}{
		{"complete", claimstore.StatusCompleted, func(s *postgres.Store, c claimstore.Claim) error {
			return s.Complete(ctx, claimstore.CompleteParams{Holder: c.Holder(), Result: "ok", ExpiresAt: time.Now().Add(time.Hour)})
		}},
		{"complete_tx", claimstore.StatusCompleted, func(s *postgres.Store, c claimstore.Claim) error {
			return s.CompleteTx(ctx, claimstore.CompleteParams{Holder: c.Holder(), Result: "ok", ExpiresAt: time.Now().Add(time.Hour)}, nothing)
		}},
		{"release", claimstore.StatusReleased, func(s *postgres.Store, c claimstore.Claim) error {
			return s.Release(ctx, claimstore.ReleaseParams{Holder: c.Holder(), LastError: "transient"})
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			key := pgtest.Name("k")
			now := time.Now()
			a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w1", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil || a.Outcome != claimstore.Acquired {
				t.Fatalf("Acquire = %v, %v", a.Outcome, err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			first, err := postgres.New(postgres.Config{DB: tx, Table: table, KeyPrefix: "svc#"})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.do(first, a.Claim); err != nil {
				t.Fatalf("first try: %v", err)
			}
			retried := make(chan error, 1)
			go func() { retried <- tc.do(s, a.Claim) }()
			waitBlocked(t, pool, table)
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit of the first try: %v", err)
			}
			if err := <-retried; err != nil {
				t.Fatalf("%s retried while the first try committed: %v, want success", tc.op, err)
			}
			if got, err := s.Get(ctx, key); err != nil || got.Status != tc.want || got.Acq != a.Claim.Acq {
				t.Fatalf("claim after the retry = %+v, %v, want %s under the holder's acq", got, err, tc.want)
			}
		})
	}
}
