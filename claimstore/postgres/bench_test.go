package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// benchConcurrency is how many messages are in flight at once, the
// worker's default WORKER_CONCURRENCY.
const benchConcurrency = 16

// BenchmarkPostgresClaims measures, in one run and on one server, b.N
// messages' claim traffic at benchConcurrency: first the floor (raw pgx
// issuing the protocol's two statements per message, a plain INSERT and
// a plain UPDATE by key, with no conditions, no clock and no answer to
// read), then the store (Acquire and Complete). It reports both per
// message and the store's cost as a ratio of the floor's.
func BenchmarkPostgresClaims(b *testing.B) {
	pool := pgtest.Pool(b)
	table := pgtest.Table(b, pool)
	s, err := postgres.New(postgres.Config{DB: pool, Table: table})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := func(name string, msg func(key string) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, benchConcurrency)
		start := time.Now()
		for range benchConcurrency {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					if err := msg(fmt.Sprintf("%s-%d-%d", name, start.UnixNano(), i)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		select {
		case err := <-errs:
			b.Fatalf("%s: %v", name, err)
		default:
		}
		return elapsed / time.Duration(b.N)
	}
	// Open every connection first, so that neither row pays for them.
	run("warm", func(string) error {
		_, err := pool.Exec(ctx, "SELECT 1")
		return err
	})
	b.ResetTimer()
	floor := run("floor", func(key string) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, token, acq, lease_until, expires_at, first_at, attempts)
			VALUES ($1, 'IN_PROGRESS', 1, 'a', now(), now(), now(), 1)`, key)
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, `UPDATE `+table+` SET status = 'COMPLETED', result = 'ok' WHERE key = $1`, key)
		return err
	})
	store := run("store", func(key string) error {
		now := time.Now()
		a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "bench", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || a.Outcome != claimstore.Acquired {
			return fmt.Errorf("acquire: %v %w", a.Outcome, err)
		}
		return s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Hour)})
	})
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(floor.Microseconds()), "floor-µs/msg")
	b.ReportMetric(float64(store.Microseconds()), "store-µs/msg")
	b.ReportMetric(float64(store)/float64(floor), "store/floor")
}
