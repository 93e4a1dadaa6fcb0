package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestOutagePostgres stops a private PostgreSQL server for some seconds
// while two workers process payments, and starts it again: a store outage
// is a dependency failure, so every payment is charged exactly once, none
// is dead-lettered, and the workers' breakers open and close. HOLD_FOR=1s
// makes deliveries give up their in-process holds and return to the queue
// during the outage; the provider honors keys, since a charge whose
// completion could not be written is retried after its lease ends. The
// suite's shared server is never stopped.
func TestOutagePostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := pgtest.Name("claims")
	if err := postgres.CreateSchema(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	c := &pgClaims{url: srv.URL(), table: table}

	e := newEnv(t, envOptions{fake: fakeprovider.Config{Latency: 20 * time.Millisecond}})
	ps := payments("pgout", 120)
	e.sendPayments(ps)
	// HOLD_FOR=1s: held messages go back to the queue during the outage
	// (spending receives) instead of riding it out in process.
	w1 := e.start("ow1", c.worker("ow1", 4, "HOLD_FOR=1s"))
	w2 := e.start("ow2", c.worker("ow2", 4, "HOLD_FOR=1s"))
	// The outage begins once both workers are charging (each connected at
	// start): a worker that cannot reach its database at start refuses to
	// run, which is not the outage under test.
	waitFor(t, 40*time.Second, "both workers started and payments charged before the outage", func() bool {
		return w1.logCount("worker started") > 0 && w2.logCount("worker started") > 0 && e.fake.Stats().Charges >= 8
	})
	srv.Stop()
	stopped := time.Now()
	time.Sleep(6 * time.Second)
	srv.Start()
	t.Logf("server down %s", time.Since(stopped).Round(100*time.Millisecond))
	e.waitDrained(45 * time.Second)
	st := e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	var opened, closed []int
	for _, w := range []*proc{w1, w2} {
		if code := w.stop(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", w.name, code)
		}
		opened = append(opened, w.logCount("breaker open"))
		closed = append(closed, w.logCount("breaker closed"))
	}
	returned := w1.logCount("acquire failed; the message will be retried") + w2.logCount("acquire failed; the message will be retried")
	t.Logf("payments %d, provider calls %d, charges %d; breaker opened/closed ow1 %d/%d ow2 %d/%d; acquires returned to the queue ow1 %d ow2 %d",
		len(ps), st.Calls, st.Charges, opened[0], closed[0], opened[1], closed[1],
		w1.logCount("acquire failed; the message will be retried"), w2.logCount("acquire failed; the message will be retried"))
	if opened[0]+opened[1] == 0 {
		t.Error("no breaker opened during the store outage")
	}
	if returned == 0 {
		t.Error("no delivery returned to the queue during the outage: the test exercised only in-process holds")
	}
	if closed[0]+closed[1] == 0 {
		t.Error("no breaker closed after the store came back")
	}
}
