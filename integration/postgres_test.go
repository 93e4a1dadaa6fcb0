package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/ledger"
)

// pgLedger is a ledger whose claims and entries are in PostgreSQL.
type pgLedger struct {
	pool          *pgxpool.Pool
	url           string
	claims, books string
}

func newPGLedger(t *testing.T) *pgLedger {
	t.Helper()
	pool := pgtest.Pool(t)
	l := &pgLedger{pool: pool, url: pgtest.URL(t), claims: pgtest.Table(t, pool), books: pgtest.Name("ledger")}
	if err := ledger.CreateSQLTables(context.Background(), pool, l.books); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+l.books+"_entries, "+l.books+"_accounts")
	})
	return l
}

// worker is a ledger worker on PostgreSQL whose connections carry name as
// their application_name, so that the test can find them.
func (l *pgLedger) worker(name string) workerOptions {
	sep := "?"
	if strings.Contains(l.url, "?") {
		sep = "&"
	}
	o := ledgerWorker(l.books, "STORE=postgres", "CLAIM_TABLE="+l.claims, "DATABASE_URL="+l.url+sep+"application_name="+name, "LOG_LEVEL=debug")
	o.concurrency = 4
	return o
}

// assert checks every entry is in the table once, under its own account
// and amount, and every balance and entry count is exact.
func (l *pgLedger) assert(t *testing.T, es []ledger.Entry, want map[string]ledger.Account) {
	t.Helper()
	ctx := context.Background()
	var n int
	if err := l.pool.QueryRow(ctx, "SELECT count(*) FROM "+l.books+"_entries").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(es) {
		t.Errorf("ledger has %d entries, want %d", n, len(es))
	}
	for _, en := range es {
		var acct string
		var amount int64
		err := l.pool.QueryRow(ctx, "SELECT account, amount FROM "+l.books+"_entries WHERE entry_id = $1", en.EntryID).Scan(&acct, &amount)
		if err != nil || acct != en.Account || amount != en.Amount {
			t.Errorf("entry %s = %s %d (%v), want %s %d", en.EntryID, acct, amount, err, en.Account, en.Amount)
		}
	}
	for name, w := range want {
		got, err := ledger.ReadSQLAccount(ctx, l.pool, l.books, name)
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("account %s = balance %d from %d entries, want %d from %d", name, got.Balance, got.Entries, w.Balance, w.Entries)
		}
	}
}

// waiting reports whether a connection of the worker named app waits for a lock.
func (l *pgLedger) waiting(t *testing.T, app string) bool {
	var n int
	err := l.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestLedgerCrashPostgres is TestLedgerCrash with the claims and the ledger
// in PostgreSQL: ledger entries, a third of them twice, go to two steady
// workers and a victim that is SIGKILLed again and again between its
// handler and its claim's completion. The test holds the accounts table
// locked while a victim starts, finds the victim's completion transaction
// waiting on it (the claim's row updated, the entry inserted, nothing
// committed), kills the victim and lets go: the server rolls the dead
// worker's transaction back. Every entry is applied once and every balance
// is exact; the killed transactions' entries are applied after a takeover.
func TestLedgerCrashPostgres(t *testing.T) {
	t.Parallel()
	l := newPGLedger(t)
	e := newEnv(t, envOptions{visibility: 3 * time.Second, maxReceive: 10})
	es, want := ledgerEntries("pgcrash", 150)
	msgs := append([]ledger.Entry(nil), es...)
	for i := 0; i < len(es); i += 3 {
		msgs = append(msgs, es[i])
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	e.sendEntries(msgs)

	e.start("steady-1", l.worker("steady-1"))
	e.start("steady-2", l.worker("steady-2"))
	ctx := context.Background()
	var kills, caught int
	deadline := time.Now().Add(2 * time.Minute)
	drained := func() bool { return e.queueDepth(e.queueURL) == 0 }
	for kills < 6 && !drained() && time.Now().Before(deadline) {
		lock, err := l.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.Exec(ctx, "LOCK TABLE "+l.books+"_accounts IN EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("victim-%d", kills)
		victim := e.start(name, l.worker(name))
		for i := 1; !l.waiting(t, name) && time.Now().Before(deadline); i++ {
			if i%20 == 0 && drained() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if l.waiting(t, name) {
			caught++
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // let others pile up behind it
		victim.kill()
		kills++
		if err := lock.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n := completions(victim); n != 0 {
			t.Errorf("%s completed %d claims: its transactions were meant never to commit", victim.name, n)
		}
	}
	e.waitDrained(2 * time.Minute)
	e.assertNoDeadLetters()
	l.assert(t, es, want)

	takeovers, duplicates, leaseLost := 0, 0, 0
	for _, p := range e.procs {
		takeovers += p.logCountWhere("completed", func(l logLine) bool { return l.Msg == "completed" && l.Token > 1 })
		duplicates += p.logCount("duplicate")
		leaseLost += p.logCount("lease lost")
	}
	t.Logf("entries %d, messages %d, kills %d with a completion in flight %d, completed after a takeover %d, duplicates acked %d, lease lost %d",
		len(es), len(msgs), kills, caught, takeovers, duplicates, leaseLost)
	if caught == 0 {
		t.Error("no victim was killed with its completion in flight")
	}
	if takeovers == 0 {
		t.Error("no claim completed after a takeover: no killed transaction was redelivered")
	}
	if duplicates < len(msgs)-len(es) {
		t.Errorf("duplicates acked %d, want at least the %d producer retries", duplicates, len(msgs)-len(es))
	}
}
