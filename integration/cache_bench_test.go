package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/cache"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// BenchmarkCache measures what a local cache of completed keys
// (claimstore/cache) saves on a duplicate-heavy run: b.N payments, each
// delivered twice (the second copy after the first was completed, as SQS
// redelivers), to one in-process worker on DynamoDB, without and with the
// cache. It reports DynamoDB writes (each a write unit for these small
// rows; a failed conditional write is billed as one) per delivery and per
// payment, and checks correctness on the way: each payment handled once,
// every second copy acked as a duplicate, and the cache answering only for
// keys this worker completed. Run with `make bench`.
func BenchmarkCache(b *testing.B) {
	type row struct {
		name   string
		cached bool
		r      cacheBenchResult
	}
	rows := []*row{{name: "no-cache"}, {name: "cache", cached: true}}
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) { r.r = benchCache(b, r.cached) })
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nevery message delivered twice\n%-10s %9s %12s %13s %12s %12s %12s\n",
		"row", "payments", "deliveries", "wcu/delivery", "wcu/payment", "cache-hits", "runs/payment")
	for _, r := range rows {
		if r.r.deliveries == 0 {
			continue
		}
		fmt.Fprintf(&out, "%-10s %9d %12d %13.2f %12.2f %12d %12.2f\n", r.name, r.r.payments, r.r.deliveries,
			float64(r.r.writes)/float64(r.r.deliveries), float64(r.r.writes)/float64(r.r.payments), r.r.hits,
			float64(r.r.runs)/float64(r.r.payments))
	}
	fmt.Print(out.String())
}

type cacheBenchResult struct {
	payments, deliveries, writes, hits, runs int64
}

func benchCache(b *testing.B, cached bool) cacheBenchResult {
	cfg, counter := benchConfig(b)
	sq, ddb := sqs.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	ctx := context.Background()
	out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: strPtr(awstest.Name("bench-dup")),
		Attributes: map[string]string{"VisibilityTimeout": "30"}})
	if err != nil {
		b.Fatal(err)
	}
	q, table := *out.QueueUrl, benchTable(b, ddb)
	ds, err := dynamo.New(dynamo.Config{Client: ddb, Table: table})
	if err != nil {
		b.Fatal(err)
	}
	var store claimstore.Store = ds
	var cs *cache.Store
	if cached {
		if cs, err = cache.New(ds, cache.Config{}); err != nil {
			b.Fatal(err)
		}
		store = cs
	}
	bodies := make([]string, b.N)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"payment_id":"dup_%d_%d","amount":100,"currency":"EUR"}`, time.Now().UnixNano(), i)
	}

	var (
		mu       sync.Mutex
		runs     = map[string]int{}
		unseen   []string // keys the cache answered for before this worker handled them
		handled  = make(chan struct{}, b.N)
		replayed = make(chan struct{}, b.N)
	)
	metrics := worker.NewMetrics(nil)
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "payment_id"}) // the copy is a new SQS message: key by payment
	if err != nil {
		b.Fatal(err)
	}
	w, err := sqsworker.New(ctx, sqsworker.Config{
		QueueURL: q, SQS: sq, Concurrency: benchConcurrency,
		Protocol: worker.Protocol{Store: store, Metrics: metrics, Decoder: dec,
			Logger: slog.New(slog.DiscardHandler),
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				mu.Lock()
				runs[m.Key]++
				mu.Unlock()
				handled <- struct{}{}
				return "ok", nil
			}),
			OnReplay: func(_ context.Context, r worker.Replay) {
				if r.Source == worker.ReplayFromCache {
					mu.Lock()
					if runs[r.Key] == 0 {
						unseen = append(unseen, r.Key)
					}
					mu.Unlock()
				}
				replayed <- struct{}{}
			},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	m := startMeter(b, counter)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	wait := func(ch chan struct{}, what string) {
		stuck := time.NewTimer(time.Minute)
		defer stuck.Stop()
		for i := range b.N {
			select {
			case <-ch:
				stuck.Reset(time.Minute)
			case <-stuck.C:
				cancel()
				b.Fatalf("%d of %d %s, then none for a minute", i, b.N, what)
			}
		}
	}
	benchSend(b, sq, q, bodies)
	wait(handled, "first copies handled")
	for metrics.Count(worker.OutcomeCompleted) < int64(b.N) {
		time.Sleep(10 * time.Millisecond)
	}
	benchSend(b, sq, q, bodies) // every message delivered again
	wait(replayed, "second copies acked as duplicates")
	depth := sqs.NewFromConfig(awstest.Config(b)) // not counted
	for benchDepth(b, depth, q) != 0 {
		time.Sleep(250 * time.Millisecond)
	}
	m.stop(b)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}

	r := cacheBenchResult{payments: int64(b.N), deliveries: 2 * int64(b.N)}
	for _, op := range []string{"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"} {
		r.writes += counter.Count("DynamoDB." + op)
	}
	for _, n := range runs {
		r.runs += int64(n)
	}
	if cs != nil {
		r.hits = cs.Stats().Hits
	}
	if len(runs) != b.N || r.runs != int64(b.N) {
		b.Errorf("%d handler runs for %d keys, want one run for each of %d payments", r.runs, len(runs), b.N)
	}
	if n := metrics.Count(worker.OutcomeDuplicate); n != int64(b.N) {
		b.Errorf("%d duplicates, want %d (every second copy)", n, b.N)
	}
	if len(unseen) > 0 {
		b.Errorf("the cache answered for %d keys this worker had not completed: %v", len(unseen), unseen[:min(5, len(unseen))])
	}
	if cached && r.hits != int64(b.N) {
		b.Errorf("cache hits = %d, want %d (every second copy)", r.hits, b.N)
	}
	b.ReportMetric(float64(r.writes)/float64(r.deliveries), "wcu/delivery")
	b.Logf("%s: %d payments, requests %v", map[bool]string{true: "cache", false: "no cache"}[cached], b.N, counter.Snapshot())
	return r
}
