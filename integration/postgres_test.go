package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/ledger"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
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
		takeovers += p.outcomeCountWhere("completed", func(l logLine) bool { return l.Msg == "completed" && l.Token > 1 })
		duplicates += p.outcomeCount("duplicate")
		leaseLost += p.outcomeCount("lease_lost")
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

// pgClaims is a claim table in PostgreSQL for payment workers.
type pgClaims struct {
	pool  *pgxpool.Pool
	url   string
	table string
}

func newPGClaims(t *testing.T) *pgClaims {
	t.Helper()
	pool := pgtest.Pool(t)
	return &pgClaims{pool: pool, url: pgtest.URL(t), table: pgtest.Table(t, pool)}
}

// worker is a payment worker on the PostgreSQL claim table whose
// connections carry name as their application_name.
func (c *pgClaims) worker(name string, concurrency int, extra ...string) workerOptions {
	sep := "?"
	if strings.Contains(c.url, "?") {
		sep = "&"
	}
	env := append([]string{"STORE=postgres", "CLAIM_TABLE=" + c.table, "DATABASE_URL=" + c.url + sep + "application_name=" + name}, extra...)
	return workerOptions{concurrency: concurrency, extraEnv: env}
}

// claim returns key's row: its status and token.
func (c *pgClaims) claim(t *testing.T, key string) (string, int64) {
	t.Helper()
	var status string
	var token int64
	if err := c.pool.QueryRow(context.Background(), "SELECT status, token FROM "+c.table+" WHERE key = $1", key).Scan(&status, &token); err != nil {
		t.Fatalf("claim %s: %v", key, err)
	}
	return status, token
}

// TestConcurrentDuplicatesPostgres is TestConcurrentDuplicates with the
// claims in PostgreSQL: every payment twice, adjacent copies racing, to two
// workers, a provider that ignores keys; each payment is charged once.
func TestConcurrentDuplicatesPostgres(t *testing.T) {
	t.Parallel()
	c := newPGClaims(t)
	e := newEnv(t, envOptions{fake: fakeprovider.Config{IgnoreKeys: true, Latency: 5 * time.Millisecond}})
	ps := payments("pgdup", 150)
	var msgs []provider.Payment
	for _, p := range ps {
		msgs = append(msgs, p, p)
	}
	e.sendPayments(msgs)
	w1 := e.start("w1", c.worker("w1", 8))
	w2 := e.start("w2", c.worker("w2", 8))
	e.waitDrained(2 * time.Minute)
	st := e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	dups := w1.outcomeCount("duplicate") + w2.outcomeCount("duplicate")
	t.Logf("payments %d, deliveries %d, charges %d, provider calls %d, duplicates acked %d", len(ps), len(msgs), st.Charges, st.Calls, dups)
	if dups == 0 {
		t.Error("no duplicate was acked: the test did not exercise deduplication")
	}
}

// TestCrashPostgres is TestCrash with the claims in PostgreSQL: victims
// SIGKILLed in the middle of provider calls and after completions, two
// steady workers; every payment charged once, none dead-lettered.
func TestCrashPostgres(t *testing.T) {
	// Not parallel, as TestCrash: its 3 s leases.
	c := newPGClaims(t)
	e := newEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 250 * time.Millisecond}})
	ps := payments("pgcrash", 200)
	e.sendPayments(ps)
	e.start("steady-1", c.worker("steady-1", 8, "LOG_LEVEL=debug"))
	e.start("steady-2", c.worker("steady-2", 8, "LOG_LEVEL=debug"))
	kills := 0
	deadline := time.Now().Add(3 * time.Minute)
	drained := func() bool { return e.queueDepth(e.queueURL) == 0 }
	for kills < 6 && !drained() && time.Now().Before(deadline) {
		name := fmt.Sprintf("victim-%d", kills)
		victim := e.start(name, c.worker(name, 4, "LOG_LEVEL=debug"))
		wait, poll, pause := "completed", 50*time.Millisecond, time.Duration(rand.IntN(1500))*time.Millisecond
		if kills%2 == 0 { // in the middle of a provider call
			wait, poll, pause = "claim acquired", 10*time.Millisecond, time.Duration(rand.IntN(100))*time.Millisecond
		}
		for i := 1; victim.logCount(wait) == 0 && time.Now().Before(deadline); i++ {
			if i%(int(time.Second/poll)) == 0 && drained() {
				break
			}
			time.Sleep(poll)
		}
		time.Sleep(pause)
		victim.kill()
		kills++
	}
	e.waitDrained(2 * time.Minute)
	st := e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	takeovers := 0
	for _, p := range e.procs {
		takeovers += p.outcomeCountWhere("completed", func(l logLine) bool { return l.Token > 1 })
	}
	t.Logf("payments %d, kills %d, provider calls %d, charges %d, replays %d, completed after a takeover %d",
		len(ps), kills, st.Calls, st.Charges, st.Replays, takeovers)
	if kills < 3 {
		t.Errorf("only %d kills: the queue drained too fast to test crashes", kills)
	}
	if takeovers == 0 {
		t.Error("no claim was completed after a takeover: no kill hit a message in flight")
	}
}

// TestStalledWorkerPostgres is TestStalledWorker with the claims in
// PostgreSQL: a worker stopped past its lease while calling the provider
// is taken over; resumed, it finds its lease lost and never completes.
func TestStalledWorkerPostgres(t *testing.T) {
	// Not parallel, as TestStalledWorker: its 3 s leases.
	c := newPGClaims(t)
	e := newEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 1500 * time.Millisecond}})
	ps := payments("pgstall", 1)
	e.sendPayments(ps)
	a := e.start("stalled", c.worker("stalled", 1))
	waitFor(t, 30*time.Second, "the first worker to call the provider", func() bool { return e.fake.Stats().Calls >= 1 })
	_ = a.cmd.Process.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	b := e.start("taker", c.worker("taker", 1))
	waitFor(t, 60*time.Second, "the second worker to complete the payment", func() bool { return b.outcomeCount("completed") == 1 })
	time.Sleep(time.Until(stoppedAt.Add(6 * time.Second)))
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, 30*time.Second, "the stalled worker to notice its lease is lost", func() bool {
		return a.outcomeCount("lease_lost") >= 1 || a.logCount("lease expired") >= 1
	})
	e.waitDrained(time.Minute)
	time.Sleep(time.Second)
	if n := a.outcomeCount("completed"); n != 0 {
		t.Errorf("the stalled worker completed %d claims after losing its lease", n)
	}
	if status, token := c.claim(t, ps[0].PaymentID); status != "COMPLETED" || token != 2 {
		t.Errorf("claim = %s token %d, want COMPLETED with the taker's token 2", status, token)
	}
	e.assertChargedOnce(ps)
}

// TestConnectionKillsPostgres terminates the workers' database connections
// that are in a statement or a transaction, 30 times (pg_terminate_backend),
// while they process payments with a provider that ignores keys: statements
// fail mid-flight with an unknown outcome, and the workers retry them on new
// connections. Every payment is charged once and none is dead-lettered.
func TestConnectionKillsPostgres(t *testing.T) {
	t.Parallel()
	c := newPGClaims(t)
	e := newEnv(t, envOptions{fake: fakeprovider.Config{IgnoreKeys: true, Latency: 20 * time.Millisecond}})
	ps := payments("pgkill", 150)
	e.sendPayments(ps)
	e.start("kw1", c.worker("kw1", 8))
	e.start("kw2", c.worker("kw2", 8))
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		killed := 0
		for {
			select {
			case <-stop:
				done <- killed
				return
			case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
			}
			if killed >= 30 { // enough; let the queue drain
				continue
			}
			var n int
			_ = c.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name IN ('kw1', 'kw2') AND state <> 'idle'`).Scan(&n)
			killed += n
		}
	}()
	e.waitDrained(2 * time.Minute)
	close(stop)
	killed := <-done
	st := e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	t.Logf("payments %d, connections terminated in a statement or transaction %d, provider calls %d, charges %d", len(ps), killed, st.Calls, st.Charges)
	if killed == 0 {
		t.Error("no connection was terminated in a statement: the test exercised nothing")
	}
}
