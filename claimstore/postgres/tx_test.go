package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// TestCompleteTx commits a handler's rows with the claim's completion, and
// rolls them back with it: a holder whose acquisition is gone writes
// nothing, a business rejection leaves the claim held, and the retry of a
// committed transaction succeeds without writing twice.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool)
	rows := pgtest.Name("effects")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+rows+" (id text PRIMARY KEY, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+rows) })
	clock := claimstoretest.NewClock()
	s := newStore(t, pool, table, clock.Now)
	insert := func(id string, token int64) postgres.Writes {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+rows+" (id, token) VALUES ($1, $2)", id, token)
			return err
		}
	}
	has := func(id string) bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+rows+" WHERE id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	acquire := func(key, owner string) claimstore.Claim {
		now := clock.Now()
		a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: owner, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)})
		if err != nil || a.Outcome != claimstore.Acquired {
			t.Fatalf("Acquire(%s) = %v, %v", key, a.Outcome, err)
		}
		return a.Claim
	}
	complete := func(c claimstore.Claim) claimstore.CompleteParams {
		return claimstore.CompleteParams{Holder: c.Holder(), Result: "applied", ExpiresAt: clock.Now().Add(time.Hour)}
	}

	t.Run("commits_both", func(t *testing.T) {
		key := pgtest.Name("k")
		c := acquire(key, "w1")
		if err := claimstore.CompleteTx(ctx, s, complete(c), insert(key, c.Token)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, key); err != nil || got.Status != claimstore.StatusCompleted || !has(key) {
			t.Fatalf("after CompleteTx: claim %+v, %v; row written %v", got, err, has(key))
		}
		// The retry of a transaction whose answer was lost: success, and
		// nothing is written twice (the insert would fail).
		if err := claimstore.CompleteTx(ctx, s, complete(c), insert(key, c.Token)); err != nil {
			t.Fatalf("retry of a committed CompleteTx: %v", err)
		}
	})
	t.Run("lease_lost_writes_nothing", func(t *testing.T) {
		key := pgtest.Name("k")
		old := acquire(key, "w1")
		clock.Advance(31 * time.Second)
		cur := acquire(key, "w2")
		err := claimstore.CompleteTx(ctx, s, complete(old), insert(key, old.Token))
		if !errors.Is(err, claimstore.ErrLeaseLost) {
			t.Fatalf("CompleteTx by a holder taken over: err = %v, want ErrLeaseLost", err)
		}
		if has(key) {
			t.Fatal("the stale holder's row was written")
		}
		if got, _ := s.Get(ctx, key); got.Status != claimstore.StatusInProgress || got.Acq != cur.Acq {
			t.Fatalf("claim after the stale CompleteTx = %+v, want the new holder's, in progress", got)
		}
	})
	t.Run("rejection_rolls_back_the_completion", func(t *testing.T) {
		key := pgtest.Name("k")
		if _, err := pool.Exec(ctx, "INSERT INTO "+rows+" (id, token) VALUES ($1, 99)", key); err != nil {
			t.Fatal(err)
		}
		c := acquire(key, "w1")
		err := claimstore.CompleteTx(ctx, s, complete(c), insert(key, c.Token))
		var wce *claimstore.WriteConditionError
		if !errors.As(err, &wce) {
			t.Fatalf("CompleteTx over an existing row: err = %v, want a WriteConditionError", err)
		}
		if got, _ := s.Get(ctx, key); got.Status != claimstore.StatusInProgress || got.Acq != c.Acq {
			t.Fatalf("claim after a rejected CompleteTx = %+v, want still held", got)
		}
		if err := s.Release(ctx, claimstore.ReleaseParams{Holder: c.Holder()}); err != nil {
			t.Fatalf("Release after a rejection: %v", err)
		}
	})
	t.Run("other_writes_refused", func(t *testing.T) {
		c := acquire(pgtest.Name("k"), "w1")
		err := s.CompleteTx(ctx, complete(c), otherWrites{})
		if !errors.Is(err, claimstore.ErrInvalidParams) {
			t.Fatalf("CompleteTx with another backend's writes: err = %v, want ErrInvalidParams", err)
		}
	})
}

type otherWrites struct{}

func (otherWrites) Len() int { return 1 }
