package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

func newStore(t testing.TB, pool *pgxpool.Pool, table string, now func() time.Time) *postgres.Store {
	t.Helper()
	s, err := postgres.New(postgres.Config{DB: pool, Table: table, KeyPrefix: "svc#", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	claimstoretest.Run(t, "postgres", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
		return newStore(t, pool, table, clock.Now)
	}, claimstoretest.Options{KeyPrefix: "svc#", Prefixed: func(t *testing.T, clock *claimstoretest.Clock, prefix string) claimstore.Store {
		s, err := postgres.New(postgres.Config{DB: pool, Table: table, KeyPrefix: prefix, Now: clock.Now}) // one table: the prefixes share it
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

// TestRaceOneWinner races 16 goroutines, each with its own store (as
// separate workers), for one absent key, 50 times, on the database's clock.
func TestRaceOneWinner(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	const racers, rounds = 16, 50
	stores := make([]*postgres.Store, racers)
	for i := range stores {
		stores[i] = newStore(t, pool, table, nil)
	}
	ctx := context.Background()
	for round := range rounds {
		key := pgtest.Name("race")
		var wg sync.WaitGroup
		outcomes := make([]claimstore.Outcome, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				now := time.Now()
				a, err := stores[i].Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
				outcomes[i], errs[i] = a.Outcome, err
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i := range racers {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d: racer %d: %v", round, i, errs[i])
			case outcomes[i] == claimstore.Acquired:
				won++
			case outcomes[i] != claimstore.HeldElsewhere:
				t.Fatalf("round %d: racer %d: outcome %v, want acquired or held elsewhere", round, i, outcomes[i])
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d winners of %d racers, want 1", round, won, racers)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := postgres.New(postgres.Config{Table: "Claims; DROP"})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"DB is required", "Table"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestCreateSchemaIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = postgres.CreateSchema(ctx, pool, table) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var comment string
	if err := pool.QueryRow(ctx, "SELECT obj_description($1::regclass, 'pg_class')", table).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if want := "schema version 1"; !strings.Contains(comment, want) {
		t.Errorf("table comment %q does not say %q", comment, want)
	}
}

// TestNULKeyRejected: a key with a NUL byte is an invalid key, not a
// backend error retried forever (PostgreSQL text cannot hold it).
func TestNULKeyRejected(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := newStore(t, pool, pgtest.Table(t, pool), nil)
	now := time.Now()
	_, err := s.Acquire(context.Background(), claimstore.AcquireParams{Key: "a\x00b", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if !errors.Is(err, claimstore.ErrInvalidKey) {
		t.Fatalf("Acquire with a NUL in the key: err = %v, want ErrInvalidKey", err)
	}
	if _, err := s.Get(context.Background(), "a\x00b"); !errors.Is(err, claimstore.ErrInvalidKey) {
		t.Fatalf("Get with a NUL in the key: err = %v, want ErrInvalidKey", err)
	}
}
