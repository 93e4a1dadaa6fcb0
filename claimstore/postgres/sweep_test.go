package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

func count(t *testing.T, pool *pgxpool.Pool, table string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSweepDeletesExpiredRowsWhileClaimsContinue deletes 100,000 expired
// rows in batches while workers keep claiming and completing keys; the
// table ends with exactly the live rows.
func TestSweepDeletesExpiredRowsWhileClaimsContinue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	ctx := context.Background()
	const expired = 100_000
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, token, acq, lease_until, expires_at, first_at, attempts, result)
		SELECT 'svc#old-' || i, 'COMPLETED', 1, md5(i::text), now() - interval '2 days', now() - interval '1 day' + i * interval '1 millisecond',
			now() - interval '2 days', 1, 'ch_' || i FROM generate_series(1, $1) AS i`, expired); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, table, nil)

	// A bounded sweep stops at its bound.
	n, err := s.Sweep(ctx, postgres.SweepParams{Batch: 700, MaxRows: 5000})
	if err != nil || n != 5000 {
		t.Fatalf("Sweep(MaxRows 5000) = %d, %v; want 5000", n, err)
	}

	// Claims go on beside the sweep.
	var live atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now()
				a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: fmt.Sprintf("live-%d-%d", w, i), Owner: "w",
					LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
				if err != nil || a.Outcome != claimstore.Acquired {
					t.Errorf("Acquire during the sweep = %v, %v", a.Outcome, err)
					return
				}
				if err := s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Hour)}); err != nil {
					t.Errorf("Complete during the sweep: %v", err)
					return
				}
				live.Add(1)
			}
		})
	}
	start := time.Now()
	n, err = s.Sweep(ctx, postgres.SweepParams{Batch: 1000})
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n != expired-5000 {
		t.Errorf("Sweep deleted %d rows, want %d", n, expired-5000)
	}
	if got, want := count(t, pool, table), live.Load(); got != want {
		t.Errorf("rows after the sweep = %d, want the %d live ones", got, want)
	}
	t.Logf("swept %d rows in %v while %d claims were made and completed", n, elapsed, live.Load())
}

// TestSweepKeepsTheTableBounded runs steady traffic (keys remembered for a
// minute) for twenty minutes of the store's clock with a sweep every minute: the
// table holds at most the keys of the last retention period, whatever the
// total.
func TestSweepKeepsTheTableBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	clock := claimstoretest.NewClock()
	s := newStore(t, pool, table, clock.Now)
	ctx := context.Background()
	const perMinute, minutes = 100, 20
	var maxRows int64
	for m := range minutes {
		for i := range perMinute {
			now := clock.Now()
			a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: fmt.Sprintf("k-%d-%d", m, i), Owner: "w",
				LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
		if _, err := s.Sweep(ctx, postgres.SweepParams{Batch: 150}); err != nil {
			t.Fatal(err)
		}
		maxRows = max(maxRows, count(t, pool, table))
	}
	// A key completed at second s of minute m expires within the minute
	// after: after each sweep only the last minute's keys can remain.
	if maxRows > perMinute {
		t.Errorf("the table held up to %d rows under %d keys a minute remembered for a minute, want at most %d", maxRows, perMinute, perMinute)
	}
	t.Logf("%d keys over %d minutes; at most %d rows after a sweep", perMinute*minutes, minutes, maxRows)
}

// TestSweepEvery is the worker's sweeper: rows that expire are deleted at
// the next tick, live ones kept, and it stops with its context.
func TestSweepEvery(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	clock := claimstoretest.NewClock()
	s := newStore(t, pool, table, clock.Now)
	ctx := context.Background()
	for i := range 10 {
		now := clock.Now()
		exp := now.Add(time.Minute)
		if i%2 == 0 {
			exp = now.Add(time.Hour)
		}
		if _, err := s.Acquire(ctx, claimstore.AcquireParams{Key: fmt.Sprint("k", i), LeaseUntil: now.Add(time.Second), ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.SweepEvery(sctx, 20*time.Millisecond, postgres.SweepParams{Batch: 2}, nil); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for count(t, pool, table) != 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if got := count(t, pool, table); got != 5 {
		t.Fatalf("rows after the sweeper ran = %d, want the 5 live ones", got)
	}
}
