package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/worker"
)

// TestSQLEntryAppliedOnce is TestEntryAppliedOnce on PostgreSQL: an entry
// moves its balance once with its claim's completion, and the same entry
// under another claim is recognized by its row.
func TestSQLEntryAppliedOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tables := pgtest.Name("ledger")
	if err := CreateSQLTables(ctx, pool, tables); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+tables+"_entries, "+tables+"_accounts") })
	store, err := postgres.New(postgres.Config{DB: pool, Table: pgtest.Table(t, pool)})
	if err != nil {
		t.Fatal(err)
	}
	h := SQLHandler{Tables: tables}
	apply := func(key string, e Entry) error {
		now := time.Now()
		a, err := store.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "t", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || a.Outcome != claimstore.Acquired {
			t.Fatalf("Acquire = %v, %v", a.Outcome, err)
		}
		return claimstore.CompleteTx(ctx, store, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: ResultApplied, ExpiresAt: now.Add(time.Hour)},
			h.Writes(e, a.Claim.Token))
	}
	account := func(name string) Account {
		a, err := ReadSQLAccount(ctx, pool, tables, name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	acct := pgtest.Name("acct")
	e := Entry{EntryID: pgtest.Name("e"), Account: acct, Amount: 700}
	if err := apply(e.EntryID, e); err != nil {
		t.Fatal(err)
	}
	if err := apply(pgtest.Name("e"), Entry{EntryID: pgtest.Name("e"), Account: acct, Amount: -200}); err != nil {
		t.Fatal(err)
	}
	if got := account(acct); got != (Account{Balance: 500, Entries: 2}) {
		t.Fatalf("account = %+v, want balance 500 from 2 entries", got)
	}
	for _, tc := range []struct {
		name   string
		e      Entry
		result string
	}{
		{"same entry", e, ResultAlreadyApplied},
		{"id reused", Entry{EntryID: e.EntryID, Account: acct, Amount: 701}, ""},
	} {
		err := apply(pgtest.Name("forgotten"), tc.e)
		var wce *claimstore.WriteConditionError
		if !errors.As(err, &wce) || wce.Index != 0 {
			t.Fatalf("%s: CompleteTx = %v, want the entry's condition to fail", tc.name, err)
		}
		result, herr := rejectedSQL(tc.e)(wce)
		switch {
		case tc.result != "" && (herr != nil || result != tc.result):
			t.Errorf("%s: rejected = %q, %v; want %q", tc.name, result, herr, tc.result)
		case tc.result == "" && !worker.IsPermanent(herr):
			t.Errorf("%s: rejected = %q, %v; want a permanent error", tc.name, result, herr)
		}
	}
	if got := account(acct); got != (Account{Balance: 500, Entries: 2}) {
		t.Errorf("account = %+v after the repeats, want balance 500 from 2 entries", got)
	}
}
