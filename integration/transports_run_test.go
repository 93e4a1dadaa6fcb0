package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// The binary on Kafka and on RabbitMQ, end to end: `worker setup` makes
// the topics or the topology and the claim table (PostgreSQL for Kafka,
// with no AWS setting at all; DynamoDB in the emulator for RabbitMQ), two
// `worker run` processes consume payments, some produced twice, plus one
// that is poison; a third joins a quarter of the way and the first is
// SIGKILLed half way; each payment is charged once by the fake provider,
// the poison is dead-lettered with its reason, and nothing is left
// unsettled.

// brokerUnderTest is what the test needs of one broker.
type brokerUnderTest struct {
	env      []string                            // the broker's and the store's settings, for setup and run
	table    string                              // the claim table
	setup    []string                            // setup's flags
	noAWS    bool                                // run without any AWS_ setting
	wantOut  []string                            // lines `worker setup` prints
	produce  func(t *testing.T, bodies []string) // each body one message, in order
	settled  func(ctx context.Context) (bool, string, error)
	deadOnes func(ctx context.Context) ([]string, error) // the dead letters' reasons
	// after, if set, runs once the scenario passed, with the workers'
	// environment (that of a run, without METRICS_ADDR), the provider, and
	// the body of a payment charged already.
	after func(t *testing.T, env []string, fake *fakeprovider.Server, charged string)
}

// paymentRun is the size of a binaryPayments run.
type paymentRun struct {
	payments int     // distinct payments
	twice    float64 // the share of them produced twice, a producer's retry
	// latency is the fake provider's time to charge. Defaults to 10ms.
	latency time.Duration
	// deadline bounds the run from the workers' start. Defaults to 90s.
	deadline time.Duration
}

// binaryPayments is the scenario, on b: run.payments payments, a share
// run.twice of them produced twice, and one poison message. It returns
// how long the workers took to settle everything.
func binaryPayments(t *testing.T, b brokerUnderTest, run paymentRun) time.Duration {
	if run.latency == 0 {
		run.latency = 10 * time.Millisecond
	}
	if run.deadline == 0 {
		run.deadline = 90 * time.Second
	}
	n := run.payments
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{Latency: run.latency})
	table := b.table
	env := withoutBrokers(os.Environ())
	if b.noAWS {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	}
	env = append(append(env, b.env...), "CLAIM_TABLE="+table)

	for run, want := range []string{"setup: created", " exists\n"} {
		code, stdout, stderr := runBinary(t, env, append([]string{"setup"}, b.setup...)...)
		if code != 0 {
			t.Fatalf("setup %d: exit %d\n%s%s", run+1, code, stdout, stderr)
		}
		for _, line := range append(b.wantOut, "CLAIM_TABLE="+table) {
			if !strings.Contains(stdout, line+"\n") {
				t.Errorf("setup %d: stdout %q lacks %q", run+1, stdout, line)
			}
		}
		if !strings.Contains(stderr, want) || (run == 1 && strings.Contains(stderr, "created")) {
			t.Errorf("setup %d: stderr %q, want %q", run+1, stderr, want)
		}
	}

	ps := payments(awstest.Name("pay"), n)
	bodies := producedTwice(ps, run.twice)
	bodies = append(bodies, "not a payment")
	b.produce(t, bodies)

	metrics := lambdaFreePorts(t, 3) // the third for the worker that joins
	runEnv := append(slices.Clip(env), "PROVIDER_URL="+srv.URL, "WORKER_CONCURRENCY=8", "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=5s", "PROVIDER_TIMEOUT=2s")
	startWorker := func(i int) *proc {
		return startProc(t, fmt.Sprintf("worker-%d", i+1), append(slices.Clip(runEnv), "METRICS_ADDR="+metrics[i]))
	}
	procs := []*proc{startWorker(0), startWorker(1)}
	start := time.Now()
	ctx := context.Background()
	deadline := start.Add(run.deadline)
	ready := map[string]bool{}
	killed := false // worker-1, SIGKILLed half way: its counts went with it
	lastFinals, stableSince := -1, time.Now()
	for {
		for _, addr := range metrics[:2] {
			if resp, err := http.Get("http://" + addr + "/readyz"); err == nil && !ready[addr] {
				ready[addr] = resp.StatusCode == http.StatusOK
				_ = resp.Body.Close()
			}
		}
		for i, p := range procs {
			select {
			case <-p.done:
				if i == 0 && killed {
					continue
				}
				t.Fatalf("%s exited (%v) before the messages were settled", p.name, p.err)
			default:
			}
		}
		done, why, err := b.settled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		finals, outcomes := finalOutcomes(metrics)
		if len(procs) == 2 && finals >= len(bodies)/4 {
			procs = append(procs, startWorker(2))
			t.Logf("worker-3 joins after %d of %d messages settled", finals, len(bodies))
		}
		if len(procs) == 3 && !killed && finals >= len(bodies)/2 {
			procs[0].kill()
			killed = true
			t.Logf("worker-1 SIGKILLed after %d of %d messages settled", finals, len(bodies))
		}
		// After the kill the killed worker's own count is gone: all is
		// settled when the broker says so (done) and the live workers'
		// count has not moved for longer than a deferred delivery is held
		// (the lease and a second), so that no duplicate still waits,
		// unacked, for the key's holder.
		if finals != lastFinals {
			lastFinals, stableSince = finals, time.Now()
		}
		// Settled with payments uncharged and nothing moving for longer
		// still: they are lost, and the checks below name them.
		if done && killed && time.Since(stableSince) > 6*time.Second &&
			(fake.Stats().Charges >= int64(n) || time.Since(stableSince) > 20*time.Second) {
			break
		}
		why += fmt.Sprintf("; %d of %d messages settled (%s)", finals, len(bodies), outcomes)
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %s: %s; %d charges", time.Since(start), why, fake.Stats().Charges)
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%d messages (%d payments) settled in %s, one worker SIGKILLed", len(bodies), n, took.Round(time.Millisecond))
	if len(ready) != 2 {
		t.Errorf("/readyz answered 200 on %d of the 2 first workers", len(ready))
	}
	stopCleanly(t, procs[1:]...)
	chargedOnce(t, fake.Stats().ChargesByPayment, ps)
	reasons, err := b.deadOnes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The poison has no key, so no claim: on Kafka a rebalance between its
	// dead-lettering and the commit can dead-letter it twice.
	poison := len(reasons) > 0
	for _, r := range reasons {
		poison = poison && strings.HasPrefix(r, worker.CodePoison)
	}
	if !poison {
		t.Errorf("dead letters' reasons %q, want the %s one alone", reasons, worker.CodePoison)
	}
	// What the reading of the dead letters took is requeued when it is
	// done: the broker's count may lag a moment.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		done, why, err := b.settled(ctx)
		if err == nil && done {
			break
		}
		if err != nil || time.Now().After(end) {
			t.Errorf("after the workers stopped: settled %v (%s), %v", done, why, err)
			break
		}
	}
	if b.after != nil && !t.Failed() {
		b.after(t, runEnv, fake, bodies[0])
	}
	return took
}

// producedTwice is the bodies of ps, in order, a share twice of them (one
// in every 1/twice) followed by a second copy: a producer's retry.
func producedTwice(ps []provider.Payment, twice float64) []string {
	every := 0
	if twice > 0 {
		every = max(1, int(math.Round(1/twice)))
	}
	var bodies []string
	for i, p := range ps {
		body, _ := json.Marshal(p)
		bodies = append(bodies, string(body))
		if every > 0 && i%every == 0 {
			bodies = append(bodies, string(body))
		}
	}
	return bodies
}

// finalOutcomes is how many messages the workers serving metrics at addrs
// have settled (completed, acked as duplicates, dead-lettered): their
// claimfirst_messages_total of those outcomes.
func finalOutcomes(addrs []string) (int, string) {
	n := 0
	var all []string
	for _, addr := range addrs {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "claimfirst_messages_total{") && !strings.HasSuffix(line, " 0") {
				all = append(all, strings.TrimPrefix(line, "claimfirst_messages_total"))
			}
			for _, o := range []worker.Outcome{worker.OutcomeCompleted, worker.OutcomeDuplicate, worker.OutcomeDeadLettered, worker.OutcomeKeyReused} {
				if v, ok := strings.CutPrefix(line, `claimfirst_messages_total{outcome="`+string(o)+`"} `); ok {
					f, _ := strconv.ParseFloat(v, 64)
					n += int(f)
				}
			}
		}
	}
	return n, strings.Join(all, " ")
}

// TestBinaryKafka: the binary on Kafka (kfake, emulator/with-kafka.sh).
func TestBinaryKafka(t *testing.T) {
	k := newKafkaRun(t, "binpay")
	t.Parallel()
	binaryPayments(t, k.broker(), paymentRun{payments: 200, twice: 0.1})
}

// TestRedriveKafkaRefused: `worker redrive` cannot move Kafka's dead
// letters yet, and says so, exit 2, naming where they are.
func TestRedriveKafkaRefused(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, []string{"KAFKA_BROKERS=127.0.0.1:1"}, "redrive")
	if code != 2 || !strings.Contains(stderr, "cannot move dead letters back on Kafka yet") || !strings.Contains(stderr, kafkaworker.HeaderReason) {
		t.Errorf("exit %d, stderr %q, stdout %q; want 2 and why", code, stderr, stdout)
	}
}

// TestBinaryRabbit: the binary on RabbitMQ (emulator/with-rabbitmq.sh).
func TestBinaryRabbit(t *testing.T) {
	u := amqpURL(t)
	awstest.Config(t)
	t.Parallel()
	queue := awstest.Name("binpay")
	dlq := rabbitworker.DeadLetterQueueOf(queue)
	conn := dialTopology(t, u, queue)
	depth := func(q string) (int, error) {
		ch, err := conn.Channel()
		if err != nil {
			return 0, err
		}
		defer func() { _ = ch.Close() }()
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return st.Messages, err
	}
	b := brokerUnderTest{
		// A short lease: a duplicate that finds its key held by the other
		// worker is kept unacked until the lease ends.
		env:     []string{"AMQP_URL=" + u, "AMQP_QUEUE=" + queue, "CLAIM_RETENTION=96h", "CLAIM_LEASE=3s"},
		table:   awstest.Name("claims"), // in DynamoDB (the emulator)
		wantOut: []string{"AMQP_QUEUE=" + queue, "AMQP_DEAD_LETTER_QUEUE=" + dlq},
		produce: func(t *testing.T, bodies []string) { publishConfirmed(t, conn, queue, bodies) },
		// Settled: nothing ready in the queue and one dead letter. What
		// is delivered and unacked shows only in the workers' counts, and
		// once they stopped: the last check, after they did, sees it.
		settled: func(context.Context) (bool, string, error) {
			ready, err := depth(queue)
			if err != nil {
				return false, "", err
			}
			dead, err := depth(dlq)
			if err != nil {
				return false, "", err
			}
			return ready == 0 && dead == 1, fmt.Sprintf("%d ready, %d dead-lettered", ready, dead), nil
		},
		deadOnes: func(context.Context) ([]string, error) {
			ch, err := conn.Channel()
			if err != nil {
				return nil, err
			}
			defer func() { _ = ch.Close() }()
			var reasons []string
			for {
				d, ok, err := ch.Get(dlq, false)
				if err != nil || !ok {
					return reasons, err
				}
				r, _ := d.Headers[rabbitworker.ReasonHeader].(string)
				reasons = append(reasons, r)
			}
		},
	}
	// Then the redrive: a payment charged already, dead-lettered as if it
	// had failed permanently, is moved back by reason, the poison left;
	// a worker replays the payment and charges nothing.
	b.after = func(t *testing.T, env []string, fake *fakeprovider.Server, charged string) {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ch.Close() }()
		if err := ch.PublishWithContext(context.Background(), "", dlq, true, false, amqp.Publishing{
			Body: []byte(charged), DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{rabbitworker.ReasonHeader: "permanent: a handler error", rabbitworker.AttemptHeader: int64(1)},
		}); err != nil {
			t.Fatal(err)
		}
		waitDepth := func(q string, want int) {
			t.Helper()
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				n, err := depth(q)
				if err != nil {
					t.Fatal(err)
				}
				if n == want {
					return
				}
				if time.Now().After(end) {
					t.Fatalf("%s holds %d messages, want %d", q, n, want)
				}
			}
		}
		waitDepth(dlq, 2)
		for _, step := range []struct {
			args []string
			want string
		}{
			{[]string{"redrive", "-dry-run"}, "2 messages (dry run: nothing moved)"},
			{[]string{"redrive", "-reason", "key_reused"}, "moved 0 messages"},
			{[]string{"redrive", "-exclude-reason", "poison"}, "moved 1 messages"},
		} {
			code, stdout, stderr := runBinary(t, env, step.args...)
			if code != 0 || !strings.Contains(stdout, step.want) {
				t.Fatalf("worker %v: exit %d, stdout %q, stderr %q; want %q", step.args, code, stdout, stderr, step.want)
			}
			t.Logf("worker %v: %s", step.args, strings.TrimSpace(stdout))
		}
		waitDepth(dlq, 1)
		waitDepth(queue, 1)
		before := fake.Stats().Charges
		p := startProc(t, "worker-3", env)
		waitDepth(queue, 0)
		if code := p.stop(t, 20*time.Second); code != 0 {
			t.Errorf("worker-3: exit %d", code)
		}
		if n, _ := depth(queue); n != 0 {
			t.Errorf("the queue holds %d after the redriven payment ran, want 0", n)
		}
		if got := fake.Stats().Charges; got != before {
			t.Errorf("charges %d after the redrive, want %d: a redriven payment charged already must be replayed", got, before)
		}
		if !strings.Contains(p.log.String(), `"outcome":"duplicate"`) {
			t.Errorf("worker-3 did not replay the redriven payment as a duplicate:\n%s", tail(p.log.String(), 10))
		}
	}
	binaryPayments(t, b, paymentRun{payments: 200, twice: 0.1})
}
