package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/internal/tcpproxy"
)

// eventually calls f until it succeeds or within is over, and returns
// how long that took and f's last error.
func eventually(within time.Duration, f func(ctx context.Context) error) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return time.Since(start), err
		}
		select {
		case <-ctx.Done():
			return time.Since(start), err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestNetworkFaultDuringCompleteTx: the network between a worker and the
// database fails after the handler's statements, before COMMIT reaches the
// server, and the worker gives up. With a freeze the server never learns
// it: the transaction sits idle holding the claim's row lock. Another
// worker's acquire and the retried completion, on connections of their
// own, must get through within a few seconds (the server ends the
// abandoned transaction), not wait until their deadlines.
func TestNetworkFaultDuringCompleteTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	rows := pgtest.Name("effects")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+rows+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+rows) })
	const (
		storeTimeout = time.Second     // the stores' own bound
		clientWait   = time.Second     // how long the first worker waits for its COMMIT
		within       = 5 * time.Second // how long the others may take
	)
	newStore := func(db postgres.DB) *postgres.Store {
		s, err := postgres.New(postgres.Config{DB: db, Table: table, KeyPrefix: "svc#", Timeout: storeTimeout})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	direct := newStore(pool)
	for _, tc := range []struct {
		name  string
		fault func(p *tcpproxy.Proxy)
	}{
		{"freeze", (*tcpproxy.Proxy).Freeze},
		{"cut", (*tcpproxy.Proxy).Cut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, err := tcpproxy.Start(pgtest.Addr(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			first := newStore(pgtest.PoolAt(t, proxy.Addr()))
			t.Cleanup(proxy.Cut) // before the pool closes: a frozen connection never answers its goodbye

			key := pgtest.Name("k")
			now := time.Now()
			a, err := first.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w1", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil || a.Outcome != claimstore.Acquired {
				t.Fatalf("Acquire = %v, %v", a.Outcome, err)
			}
			params := claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Hour)}
			insert := func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+rows+" (id) VALUES ($1)", key)
				return err
			}

			cctx, cancel := context.WithTimeout(ctx, clientWait)
			err = first.CompleteTx(cctx, params, postgres.Writes(func(ctx context.Context, tx pgx.Tx) error {
				if err := insert(ctx, tx); err != nil {
					return err
				}
				tc.fault(proxy) // the COMMIT goes into the fault
				return nil
			}))
			cancel()
			if err == nil {
				t.Fatal("CompleteTx through a failed network succeeded")
			}
			t.Logf("first try: %v", err)

			took, err := eventually(within, func(ctx context.Context) error {
				now := time.Now()
				b, err := direct.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w2", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
				if err == nil && b.Outcome != claimstore.HeldElsewhere {
					t.Fatalf("another worker's acquire = %v (%+v), want held elsewhere", b.Outcome, b.Claim)
				}
				return err
			})
			t.Logf("another worker's acquire answered after %v", took)
			if err != nil {
				t.Fatalf("another worker's acquire, retried for %v: %v", within, err)
			}

			took, err = eventually(within, func(ctx context.Context) error {
				return direct.CompleteTx(ctx, params, postgres.Writes(insert))
			})
			t.Logf("retried completion succeeded after %v", took)
			if err != nil {
				t.Fatalf("retried CompleteTx, for %v: %v", within, err)
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+rows+" WHERE id = $1", key).Scan(&n); err != nil || n != 1 {
				t.Fatalf("effect rows = %d, %v, want 1", n, err)
			}
			if got, err := direct.Get(ctx, key); err != nil || got.Status != claimstore.StatusCompleted {
				t.Fatalf("claim = %+v, %v, want completed", got, err)
			}
		})
	}
}

// TestStatementsBoundedOnTheServer: a statement that waits for a row lock
// held by a transaction that never ends fails after Config.Timeout, on the
// server, even when the caller set no deadline of its own.
func TestStatementsBoundedOnTheServer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	s, err := postgres.New(postgres.Config{DB: pool, Table: table, KeyPrefix: "svc#", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+table+" WHERE key = $1 FOR UPDATE", claimstore.StoredKey("svc#", key)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op string
		do func(ctx context.Context) error
	}{
		{"acquire", func(ctx context.Context) error {
			now := time.Now()
			_, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w2", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			return err
		}},
		{"renew", func(ctx context.Context) error {
			now := time.Now()
			return s.Renew(ctx, claimstore.RenewParams{Holder: a.Claim.Holder(), LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		}},
		{"complete_tx", func(ctx context.Context) error {
			return s.CompleteTx(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: time.Now().Add(time.Hour)},
				postgres.Writes(func(context.Context, pgx.Tx) error { return nil }))
		}},
	} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the test's own guard
		start := time.Now()
		err := tc.do(cctx)
		took := time.Since(start)
		cancel()
		var pge *pgconn.PgError
		// lock_timeout and statement_timeout are equal: either may fire.
		if !errors.As(err, &pge) || (pge.Code != "55P03" && pge.Code != "57014") || took > 5*timeout {
			t.Errorf("%s behind a row lock held forever: err = %v after %v, want lock_not_available (55P03) or query_canceled (57014) within %v",
				tc.op, err, took, 5*timeout)
		}
	}
}
