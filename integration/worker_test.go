package integration

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestConcurrentDuplicates sends every payment twice (a producer's retry is
// a new message for the same payment) to two worker processes, with a
// provider that ignores keys: only the claims stand between a duplicate and
// a second charge.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fake: fakeprovider.Config{IgnoreKeys: true, Latency: 5 * time.Millisecond}})
	ps := payments("dup", 150)
	var msgs []provider.Payment
	for _, p := range ps {
		msgs = append(msgs, p, p) // adjacent copies race each other in one batch
	}
	e.sendPayments(msgs)
	w1 := e.start("w1", workerOptions{})
	w2 := e.start("w2", workerOptions{})
	e.waitDrained(2 * time.Minute)
	st := e.assertChargedOnce(ps)
	for _, w := range []*proc{w1, w2} {
		if code := w.stop(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", w.name, code)
		}
	}
	dups := w1.outcomeCount("duplicate") + w2.outcomeCount("duplicate")
	deferred := w1.outcomeCount("deferred") + w2.outcomeCount("deferred")
	t.Logf("payments %d, deliveries %d, charges %d, provider calls %d, duplicates acked %d, deferred %d",
		len(ps), len(msgs), st.Charges, st.Calls, dups, deferred)
	if dups == 0 {
		t.Error("no duplicate was acked: the test did not exercise deduplication")
	}
	e.assertNoDeadLetters()
}

// TestProviderFaults injects failures before charging and timeouts after
// charging with a provider that honours keys: every payment is charged
// exactly once and none is lost.
func TestProviderFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fake: fakeprovider.Config{
		FailBeforeCharge: 0.15, ChargeThenTimeout: 0.15, TimeoutDelay: 3 * time.Second,
	}})
	ps := payments("fault", 150)
	e.sendPayments(ps)
	// One attempt per provider call: every fault reaches the worker, which
	// holds the claim and retries in process with the same key (or, past
	// its hold, releases the claim for SQS's redelivery).
	w := e.start("w1", workerOptions{extraEnv: []string{"PROVIDER_TIMEOUT=300ms", "PROVIDER_ATTEMPTS=1"}})
	e.waitDrained(3 * time.Minute)
	st := e.assertChargedOnce(ps)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	retried := w.logCount("retrying in process") + w.logCount("claim released")
	if st.Faults == 0 || st.Replays == 0 || retried == 0 {
		t.Errorf("faults %d, replays %d, retried %d: the faults were not exercised", st.Faults, st.Replays, retried)
	}
	t.Logf("payments %d, provider calls %d, charges %d, injected faults %d, replays %d, retried %d",
		len(ps), st.Calls, st.Charges, st.Faults, st.Replays, retried)
	e.assertNoDeadLetters()
}

// TestCrash kills one of three workers with SIGKILL, up to six times while
// messages flow, restarting it each time; the others take the claims it held
// over once the leases end (token +1), and every payment is charged once,
// none dead-lettered.
//
// Every other victim dies within 100 ms of acquiring its first claim, in the
// middle of that claim's 250 ms provider call, so at least those kills leave
// a claim to take over. The rest die a random moment (up to 1.5 s) after
// their first completion, which lands anywhere: in a handler, between the
// provider's answer and the completion, between the completion and the
// delete. A kill timed only at random once landed, on a fast run, outside
// every handler four times out of four.
//
// Each kill costs the messages the victim held one of the queue's five
// receives, and with a 3 s visibility a claim must be taken within 3 s of
// its receipt. The loop watches the victim's log often but the queue's depth
// only about once a second: each depth query makes the emulator count every
// message, and polling it every 50 ms once delayed claims past the
// visibility until messages were dead-lettered.
func TestCrash(t *testing.T) {
	// Not parallel: with a 3 s visibility, a claim must be taken within 3 s
	// of its receipt, which the outage and FIFO tests running beside it
	// (make test runs four at a time) can make the emulator miss. Go runs
	// the tests that are not parallel first, one at a time.
	e := newEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 250 * time.Millisecond}})
	ps := payments("crash", 300)
	e.sendPayments(ps)
	// Debug logs record each claim's lease, so a failure shows every
	// message's history.
	debug := []string{"LOG_LEVEL=debug"}
	opts := workerOptions{concurrency: 8, extraEnv: debug}
	e.start("steady-1", opts)
	e.start("steady-2", opts)
	// Six kills at most: each one costs the messages the victim held a
	// receive, and more, on a fast run, brought a message to its fifth.
	const maxKills = 6
	kills := 0
	deadline := time.Now().Add(3 * time.Minute)
	drained := func() bool { return e.queueDepth(e.queueURL) == 0 }
	for kills < maxKills && !drained() && time.Now().Before(deadline) {
		victim := e.start(fmt.Sprintf("victim-%d", kills), workerOptions{concurrency: 4, extraEnv: debug})
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
	maxReceives := 0
	for _, p := range e.procs {
		takeovers += p.outcomeCountWhere("completed", func(l logLine) bool { return l.Token > 1 })
		p.logCountWhere("", func(l logLine) bool { maxReceives = max(maxReceives, l.ReceiveCount); return false })
	}
	t.Logf("payments %d, kills %d, provider calls %d, charges %d, replays %d, completed after a takeover %d, most receives of one message %d",
		len(ps), kills, st.Calls, st.Charges, st.Replays, takeovers, maxReceives)
	if kills < 3 {
		t.Errorf("only %d kills: the queue drained too fast to test crashes", kills)
	}
	if takeovers == 0 {
		t.Error("no claim was completed after a takeover: no kill hit a message in flight")
	}
}

// TestStalledWorker stops a worker (SIGSTOP) while it holds a claim and
// waits on the provider, for longer than its lease; another worker takes the
// message over and completes it. When the first resumes, its lease watchdog
// or its renew finds the lease lost, and its late completion never happens:
// the claim keeps the taker's token and the payment is charged once.
func TestStalledWorker(t *testing.T) {
	// Not parallel, for the same reason as TestCrash: its 3 s leases.
	e := newEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 1500 * time.Millisecond}})
	ps := payments("stall", 1)
	e.sendPayments(ps)
	a := e.start("stalled", workerOptions{concurrency: 1})
	waitFor(t, 30*time.Second, "the first worker to call the provider", func() bool { return e.fake.Stats().Calls >= 1 })
	_ = a.cmd.Process.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	b := e.start("taker", workerOptions{concurrency: 1})
	waitFor(t, 60*time.Second, "the second worker to complete the payment", func() bool { return b.outcomeCount("completed") == 1 })
	time.Sleep(time.Until(stoppedAt.Add(6 * time.Second))) // twice the stalled worker's lease
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, 30*time.Second, "the stalled worker to notice its lease is lost", func() bool {
		return a.outcomeCount("lease_lost") >= 1 || a.logCount("lease expired") >= 1
	})
	e.waitDrained(time.Minute)
	time.Sleep(time.Second) // let the resumed worker finish whatever it would still do
	if n := a.outcomeCount("completed"); n != 0 {
		t.Errorf("the stalled worker completed %d claims after losing its lease", n)
	}
	claim := e.claim(ps[0].PaymentID)
	if claim["status"] != "COMPLETED" || claim["token"] != "2" {
		t.Errorf("claim = %v, want COMPLETED with the taker's token 2", claim)
	}
	e.assertChargedOnce(ps)
	st := e.fake.Stats()
	t.Logf("provider calls %d, charges %d, replays %d; stalled worker: lease lost %d, lease expired %d, completed %d; claim %v",
		st.Calls, st.Charges, st.Replays, a.outcomeCount("lease_lost"), a.logCount("lease expired"), a.outcomeCount("completed"), claim)
}

// TestPoisonMessages sends messages that can never succeed among good ones:
// each lands in the DLQ with its reason, the good ones are charged, and the
// worker keeps going.
func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	poison := map[string]string{
		"not json":        `{"payment_id": "p1", "amount": 1`,
		"missing amount":  `{"payment_id": "p2", "currency": "EUR"}`,
		"fractional":      `{"payment_id": "p3", "amount": 19.99, "currency": "EUR"}`,
		"string amount":   `{"payment_id": "p4", "amount": "1999", "currency": "EUR"}`,
		"lower currency":  `{"payment_id": "p5", "amount": 1999, "currency": "eur"}`,
		"zero amount":     `{"payment_id": "p6", "amount": 0, "currency": "EUR"}`,
		"duplicate field": `{"payment_id": "p7", "amount": 1999, "amount": 1, "currency": "EUR"}`, // an unknown field is ignored: TestPaymentWithExtraField
		"key too long":    fmt.Sprintf(`{"payment_id": %q, "amount": 1999, "currency": "EUR"}`, strings.Repeat("x", 256)),
		"empty id":        `{"payment_id": "", "amount": 1999, "currency": "EUR"}`,
		"array":           `[1, 2, 3]`,
		"declined is not": `{"payment_id": "decline_1", "amount": 1999, "currency": "EUR"}`,
	}
	var bodies []string
	for name, b := range poison {
		if name != "declined is not" {
			bodies = append(bodies, b)
		}
	}
	good := payments("good", 20)
	e.sendPayments(good)
	e.send(bodies...)
	e.send(poison["declined is not"]) // a decline is an outcome, not poison
	w := e.start("w1", workerOptions{})
	e.waitDrained(time.Minute)
	e.assertChargedOnce(good)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	dead := e.dlqMessages()
	if len(dead) != len(bodies) {
		t.Fatalf("%d messages dead-lettered, want %d", len(dead), len(bodies))
	}
	got := map[string]bool{}
	for _, m := range dead {
		got[aws.ToString(m.Body)] = true
		r, ok := m.MessageAttributes["DeadLetterReason"]
		if !ok || aws.ToString(r.StringValue) == "" {
			t.Errorf("dead-lettered %q has no DeadLetterReason", aws.ToString(m.Body))
			continue
		}
		t.Logf("%.60s -> %s", aws.ToString(m.Body), aws.ToString(r.StringValue))
	}
	for _, b := range bodies {
		if !got[b] {
			t.Errorf("poison message %.60q not in the DLQ", b)
		}
	}
	if st := e.fake.Stats(); st.Declines != 1 {
		t.Errorf("declines = %d, want 1 (the declined payment is completed, not dead-lettered)", st.Declines)
	}
}

// TestShutdown sends SIGTERM while messages are in flight: the worker exits 0,
// and a second worker finishes the rest with nothing lost or charged twice.
func TestShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fake: fakeprovider.Config{IgnoreKeys: true, Latency: 50 * time.Millisecond}})
	ps := payments("term", 200)
	e.sendPayments(ps)
	w1 := e.start("w1", workerOptions{})
	waitFor(t, 30*time.Second, "some charges", func() bool { return e.fake.Stats().Charges >= 30 })
	start := time.Now()
	if code := w1.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d, want 0", code)
	}
	stopped := time.Since(start)
	charged := e.fake.Stats().Charges
	w2 := e.start("w2", workerOptions{})
	e.waitDrained(time.Minute)
	e.assertChargedOnce(ps)
	if code := w2.stop(t, 30*time.Second); code != 0 {
		t.Errorf("w2 exited %d", code)
	}
	t.Logf("w1 stopped in %s after %d charges, returned %d unstarted; w2 finished the rest", stopped.Round(time.Millisecond), charged, w1.outcomeCount("returned"))
}

// TestBadConfiguration: missing settings and an unsafe retention exit 2
// with one line naming the setting.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cases := []struct {
		name  string
		env   []string
		wants []string
	}{
		{"missing queue", []string{"QUEUE_URL="}, []string{"QUEUE_URL"}},
		{"missing table", []string{"CLAIM_TABLE="}, []string{"CLAIM_TABLE"}},
		{"missing provider", []string{"PROVIDER_URL="}, []string{"PROVIDER_URL"}},
		{"bad concurrency", []string{"WORKER_CONCURRENCY=zero"}, []string{"WORKER_CONCURRENCY (-concurrency)"}},
		{"provider URL not a URL", []string{"PROVIDER_URL=not-a-url"}, []string{"PROVIDER_URL (-provider-url)", "scheme must be http or https"}},
		{"bad duration", []string{"SHUTDOWN_TIMEOUT=10"}, []string{"SHUTDOWN_TIMEOUT"}},
		{"bad log level", []string{"LOG_LEVEL=loud"}, []string{"LOG_LEVEL"}},
		{"unsafe retention", []string{"CLAIM_RETENTION=1h"}, []string{"CLAIM_RETENTION", "1h0m0s", "96h0m0s", "345600"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := e.start(tc.name, workerOptions{extraEnv: tc.env})
			if code := p.wait(t, 30*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, p.log.String())
			}
			out := strings.TrimSpace(p.log.String())
			if strings.Count(out, "\n") != 0 {
				t.Errorf("want one line, got:\n%s", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out, w) {
					t.Errorf("output %q does not name %q", out, w)
				}
			}
		})
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsEndpoint: /healthz, /readyz and /metrics on METRICS_ADDR, with
// the outcome counters after real work.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("metrics", 5)
	e.sendPayments(ps)
	w := e.start("w1", workerOptions{extraEnv: []string{"METRICS_ADDR=127.0.0.1:0"}})
	var addr string
	waitFor(t, 30*time.Second, "the metrics address in the log", func() bool {
		addr = w.logField("serving metrics", "addr")
		return addr != ""
	})
	e.waitDrained(time.Minute)
	get := func(path string) (int, string) {
		resp, err := http.Get(addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d", code)
	}
	waitFor(t, 10*time.Second, "completed messages in /metrics", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `claimfirst_messages_total{outcome="completed"} 5`)
	})
	_, body := get("/metrics")
	for _, want := range []string{`outcome="lease_lost"} 0`, `outcome="dead_lettered"} 0`, "claimfirst_handler_duration_seconds_count 5"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestLeaseStartsAtReceipt: a message that arrives during a long poll gets a
// whole lease from the moment SQS hands it out, not from when the poll
// began; a handler longer than the rest of the poll's window completes with
// heartbeats instead of being cut off by its own lease watchdog.
func TestLeaseStartsAtReceipt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 4 * time.Second, fake: fakeprovider.Config{Latency: 2500 * time.Millisecond}})
	w := e.start("w1", workerOptions{concurrency: 2, extraEnv: []string{"PROVIDER_TIMEOUT=10s"}})
	waitFor(t, 30*time.Second, "the worker to start polling", func() bool { return w.logCount("worker started") == 1 })
	time.Sleep(3 * time.Second) // most of a 4 s visibility spent waiting in the long poll
	ps := payments("lp", 1)
	e.sendPayments(ps)
	e.waitDrained(time.Minute)
	e.assertChargedOnce(ps)
	if n := w.outcomeCount("lease_lost") + w.logCount("lease expired") + w.logCount("lease ended"); n != 0 {
		t.Errorf("%d lease warnings for a message handled within its lease:\n%s", n, w.log.String())
	}
	if n := w.outcomeCount("completed"); n != 1 {
		t.Errorf("completed %d, want 1", n)
	}
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}
