package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// benchConcurrency is the worker's concurrency in every row, and the
// number of goroutines of the rows without a worker.
const benchConcurrency = 64

// BenchmarkWorker drains a backlog of b.N messages and reports what each
// message cost: AWS requests (counted on the wire, per operation), CPU time
// and throughput. The rows, all against one emulator in one run:
//
//   - floor-sdk: the stock SDK issuing the protocol's two writes per message
//     (a PutItem guarded by attribute_not_exists, then a conditional
//     UpdateItem) from benchConcurrency goroutines, no SQS, no worker: the
//     floor every other row is held to.
//   - store-only: the same through the project's DynamoDB store.
//   - worker: one in-process worker at benchConcurrency, a handler that does
//     nothing.
//   - worker-no-claims: the same with claims switched off (a store that
//     grants every claim without a request): what SQS alone costs.
//   - worker-run-process: a real `worker run` process (built without the
//     race detector) with the payment handler and an in-process fake
//     provider, fed the same backlog; its CPU is the child's rusage.
//
// At the end it prints each row's throughput and CPU per message as ratios
// to the floor's, measured in this run. Run with `make bench`.
func BenchmarkWorker(b *testing.B) {
	results := map[string]benchResult{}
	rows := []struct {
		name string
		run  func(*testing.B) benchResult
	}{
		{"floor-sdk", benchFloor},
		{"store-only", benchStoreOnly},
		{"worker", func(b *testing.B) benchResult { return benchWorker(b, true) }},
		{"worker-no-claims", func(b *testing.B) benchResult { return benchWorker(b, false) }},
		{"worker-run-process", benchWorkerProcess},
	}
	var names []string
	for _, r := range rows {
		if b.Run(r.name, func(b *testing.B) { results[r.name] = r.run(b) }) {
			names = append(names, r.name)
		}
	}
	floor, ok := results["floor-sdk"]
	if !ok || floor.msgsPerSec == 0 {
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-20s %9s %9s %11s %9s %9s %9s %15s\n", "row", "msgs/s", "x floor", "cpu-µs/msg", "x floor", "ddb/msg", "sqs/msg", "emulator-µs/msg")
	for _, n := range names {
		r := results[n]
		fmt.Fprintf(&out, "%-20s %9.1f %9.2f %11.0f %9.2f %9.2f %9.2f %15.0f\n", n, r.msgsPerSec, r.msgsPerSec/floor.msgsPerSec,
			r.cpuPerMsg, r.cpuPerMsg/floor.cpuPerMsg, r.ddbPerMsg, r.sqsPerMsg, r.emuPerMsg)
	}
	fmt.Print(out.String())
}

// benchResult is one row's measurements.
type benchResult struct {
	msgsPerSec, cpuPerMsg, ddbPerMsg, sqsPerMsg, emuPerMsg float64
}

// benchStoreOnly claims and completes b.N keys through the DynamoDB store
// from benchConcurrency goroutines, as the worker does, without SQS or a
// worker.
func benchStoreOnly(b *testing.B) benchResult {
	cfg, counter := benchConfig(b)
	ctx := context.Background()
	ddb := dynamodb.NewFromConfig(cfg)
	store, err := dynamo.New(dynamo.Config{Client: ddb, Table: benchTable(b, ddb)})
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("store_%d_", time.Now().UnixNano())
	return benchFanOut(b, counter, b.N, func(i int) error {
		now := time.Now()
		a, err := store.Acquire(ctx, claimstore.AcquireParams{
			Key: prefix + strconv.Itoa(i), Owner: "bench",
			LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour),
		})
		if err == nil && a.Outcome != claimstore.Acquired {
			err = fmt.Errorf("key %d: outcome %v", i, a.Outcome)
		}
		if err == nil {
			err = store.Complete(ctx, claimstore.CompleteParams{
				Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(24 * time.Hour),
			})
		}
		return err
	})
}

// benchFanOut measures work(0) ... work(n-1) run by benchConcurrency
// goroutines; the first error fails the benchmark.
func benchFanOut(b *testing.B, counter *awsreq.Counter, n int, work func(i int) error) benchResult {
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	m := startMeter(b, counter)
	var wg sync.WaitGroup
	errs := make(chan error, benchConcurrency)
	for range benchConcurrency {
		wg.Go(func() {
			for i := range jobs {
				if err := work(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	r := m.stop(b)
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return r
}

func benchWorker(b *testing.B, claims bool) benchResult {
	cfg, counter := benchConfig(b)
	sq := sqs.NewFromConfig(cfg)
	ddb := dynamodb.NewFromConfig(cfg)

	q, table := benchResources(b, sq, ddb)

	bodies := make([]string, b.N)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"payment_id":"bench_%d_%d","amount":100,"currency":"EUR"}`, time.Now().UnixNano(), i)
	}
	benchSend(b, sq, q, bodies)

	var store claimstore.Store = nopStore{}
	if claims {
		s, err := dynamo.New(dynamo.Config{Client: ddb, Table: table})
		if err != nil {
			b.Fatal(err)
		}
		store = s
	}
	depth := sqs.NewFromConfig(awstest.Config(b)) // not counted
	r := benchDrain(b, sqsworker.Config{QueueURL: q, SQS: sq, Concurrency: benchConcurrency, Protocol: worker.Protocol{Store: store}}, b.N, counter,
		func() bool { return benchDepth(b, depth, q) == 0 }, nil)
	b.Logf("%s: %d messages, requests %v", map[bool]string{true: "claims", false: "baseline"}[claims], b.N, counter.Snapshot())
	return r
}

// benchDrain runs one worker with cfg (a handler that does nothing, its own
// metrics, no logs) until n messages are handled and completed and drained
// reports that their acks have reached SQS; each, if set, is called after
// the i-th handled message. With a counter it measures the run from the
// worker's start to the drain: shutdown waits for the pollers' long polls
// to end (up to their wait time), which is not throughput.
func benchDrain(b *testing.B, cfg sqsworker.Config, n int, counter *awsreq.Counter, drained func() bool, each func(i int)) benchResult {
	handled := make(chan struct{}, n)
	cfg.Metrics = worker.NewMetrics(nil)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Handler = worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
		handled <- struct{}{}
		return "ok", nil
	})
	w, err := sqsworker.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	var m *meter
	if counter != nil {
		m = startMeter(b, counter)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stuck := time.NewTimer(time.Minute)
	defer stuck.Stop()
	for i := range n {
		select {
		case <-handled:
			stuck.Reset(time.Minute)
		case <-stuck.C:
			cancel()
			b.Fatalf("%d of %d messages handled, then none for a minute (outcomes: %d lease lost, %d store errors)",
				i, n, cfg.Metrics.Count(worker.OutcomeLeaseLost), cfg.Metrics.Count(worker.OutcomeStoreError))
		}
		if each != nil {
			each(i)
		}
	}
	for cfg.Metrics.Count(worker.OutcomeCompleted) < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	// The last acks. Asking the emulator for a queue's depth costs it tens
	// of milliseconds (it counts every message), so not too often.
	for !drained() {
		time.Sleep(250 * time.Millisecond)
	}
	var r benchResult
	if m != nil {
		r = m.stop(b)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return r
}

func benchResources(b *testing.B, sq *sqs.Client, ddb *dynamodb.Client) (queueURL, table string) {
	b.Helper()
	ctx := context.Background()
	out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: strPtr(awstest.Name("bench")),
		Attributes: map[string]string{"VisibilityTimeout": "30"}})
	if err != nil {
		b.Fatal(err)
	}
	return *out.QueueUrl, benchTable(b, ddb)
}

// benchTable creates a claim table with the store's default layout.
func benchTable(b *testing.B, ddb *dynamodb.Client) string {
	b.Helper()
	table := awstest.Name("bench-claims")
	if err := dynamo.CreateTable(context.Background(), ddb, dynamo.TableSpec{Name: table}); err != nil {
		b.Fatal(err)
	}
	return table
}

// benchConfig is the emulator's SDK configuration with every request
// counted, on the worker's HTTP client.
func benchConfig(b *testing.B) (aws.Config, *awsreq.Counter) {
	b.Helper()
	cfg := awstest.Config(b)
	counter := awsreq.NewCounter()
	cfg.APIOptions = append(cfg.APIOptions, counter.APIOption())
	cfg.HTTPClient = sqsworker.HTTPClient(benchConcurrency)
	return cfg, counter
}

// meter measures one run of b.N messages: wall time, CPU time and the
// requests counted from startMeter to stop.
type meter struct {
	counter     *awsreq.Counter
	start       time.Time
	user0, cpu0 time.Duration
	emu0        time.Duration
}

// startMeter resets the counter and the benchmark timer and starts measuring.
func startMeter(b *testing.B, counter *awsreq.Counter) *meter {
	counter.Reset()
	m := &meter{counter: counter}
	m.user0, m.cpu0 = cpuTime()
	m.emu0 = emulatorCPU()
	b.ResetTimer()
	m.start = time.Now()
	return m
}

// stop stops the timer and reports messages/s and, per message, DynamoDB
// and SQS requests, CPU time and user CPU time.
func (m *meter) stop(b *testing.B) benchResult {
	elapsed := time.Since(m.start)
	b.StopTimer()
	user1, cpu1 := cpuTime()
	r := report(b, elapsed, cpu1-m.cpu0, user1-m.user0, m.counter)
	r.emuPerMsg = reportEmulator(b, emulatorCPU()-m.emu0)
	return r
}

// reportEmulator reports the emulator's CPU time per message, when the
// launcher said which process it is.
func reportEmulator(b *testing.B, cpu time.Duration) float64 {
	if os.Getenv("CLAIMFIRST_EMULATOR_PID") == "" {
		return 0
	}
	v := float64(cpu.Microseconds()) / float64(b.N)
	b.ReportMetric(v, "emu-cpu-µs/msg")
	return v
}

// emulatorCPU is the emulator process's user+system CPU time (0 when its
// pid is not known).
func emulatorCPU() time.Duration {
	pid := os.Getenv("CLAIMFIRST_EMULATOR_PID")
	if pid == "" {
		return 0
	}
	return procCPU(pid)
}

// procCPU is process pid's user+system CPU time, from /proc (0 if it cannot
// be read).
func procCPU(pid string) time.Duration {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// report reports a row's metrics for b.N messages and returns them.
func report(b *testing.B, elapsed, cpu, user time.Duration, counter *awsreq.Counter) benchResult {
	n := float64(b.N)
	r := benchResult{
		msgsPerSec: n / elapsed.Seconds(), cpuPerMsg: float64(cpu.Microseconds()) / n,
		ddbPerMsg: float64(counter.Service("DynamoDB")) / n, sqsPerMsg: float64(counter.Service("SQS")) / n,
	}
	b.ReportMetric(r.msgsPerSec, "msgs/s")
	b.ReportMetric(r.ddbPerMsg, "ddb-req/msg")
	b.ReportMetric(r.sqsPerMsg, "sqs-req/msg")
	b.ReportMetric(r.cpuPerMsg, "cpu-µs/msg")
	b.ReportMetric(float64(user.Microseconds())/n, "user-µs/msg")
	return r
}

// cpuTime returns this process's user CPU time and user+system CPU time.
func cpuTime() (user, total time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func strPtr(s string) *string { return &s }

// nopStore grants every claim without a request: the baseline without claims.
type nopStore struct{}

func (nopStore) Acquire(_ context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: claimstore.Claim{
		Key: p.Key, Status: claimstore.StatusInProgress, Token: 1, Acq: "nop", Attempts: 1,
		LeaseUntil: p.LeaseUntil, ExpiresAt: p.ExpiresAt, Owner: p.Owner, Fingerprint: p.Fingerprint,
	}}, nil
}
func (nopStore) Renew(context.Context, claimstore.RenewParams) error       { return nil }
func (nopStore) Complete(context.Context, claimstore.CompleteParams) error { return nil }
func (nopStore) Release(context.Context, claimstore.ReleaseParams) error   { return nil }
func (nopStore) Get(context.Context, string) (claimstore.Claim, error) {
	return claimstore.Claim{}, claimstore.ErrNotFound
}

func benchSend(b *testing.B, sq *sqs.Client, url string, bodies []string) {
	b.Helper()
	for start := 0; start < len(bodies); start += 10 {
		batch := bodies[start:min(start+10, len(bodies))]
		entries := make([]sqstypes.SendMessageBatchRequestEntry, len(batch))
		for i, body := range batch {
			entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: strPtr(fmt.Sprint(i)), MessageBody: strPtr(body)}
		}
		if _, err := sq.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries}); err != nil {
			b.Fatal(err)
		}
	}
}
