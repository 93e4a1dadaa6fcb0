package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// runWorker runs an in-process worker on e's queue with cfg (queue, SQS
// client, metrics and a short long poll filled in) until the returned stop
// is called, which waits for it to end.
func runWorker(t *testing.T, e *env, cfg sqsworker.Config) (stop func()) {
	t.Helper()
	cfg.QueueURL, cfg.SQS = e.queueURL, e.sqs
	cfg.WaitTime = time.Second
	if cfg.OriginalIDSecret == "" {
		cfg.OriginalIDSecret = testOriginalIDSecret
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Store == nil {
		s, err := dynamo.New(dynamo.Config{Client: e.ddb, Table: e.table})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = s
	}
	w, err := sqsworker.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// testWriter sends a worker's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestResultTooLargeRunsOnce: a handler whose result (400 KB) does not fit
// a DynamoDB item, on the DynamoDB store, with the emulator behind a proxy
// that refuses such items as DynamoDB does. The effect runs once: the claim
// completes without its result, the message is acked, and a second message
// with the same key is a duplicate, acked without running the handler.
func TestResultTooLargeRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 2 * time.Second, maxReceive: 3})
	cfg, refusals := awstest.WithItemLimit(t)
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	big := strings.Repeat("r", 400*1024)
	metrics := worker.NewMetrics(nil)
	stop := runWorker(t, e, sqsworker.Config{
		HoldFor: 2 * time.Second,
		Protocol: worker.Protocol{
			Store: store, Metrics: metrics, MinRetryBackoff: 200 * time.Millisecond,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
				effects.Add(1)
				return big, nil
			}),
		},
	})
	key := awstest.Name("big")
	e.send(key)
	waitFor(t, 30*time.Second, "the message to be completed", func() bool { return metrics.Count(worker.OutcomeCompleted) > 0 || effects.Load() > 1 })
	e.send(key)
	waitFor(t, 30*time.Second, "the duplicate to be acked", func() bool { return metrics.Count(worker.OutcomeDuplicate) > 0 || effects.Load() > 1 })
	e.waitDrained(30 * time.Second)
	stop()
	if n := effects.Load(); n != 1 {
		t.Errorf("the effect ran %d times, want 1", n)
	}
	if n, se := metrics.ResultsNotStored(), metrics.Count(worker.OutcomeStoreError); n != 1 || se != 0 {
		t.Errorf("results not stored %d, store errors %d; want 1 and 0", n, se)
	}
	if n := refusals.Injected(); n != 0 {
		t.Errorf("%d writes refused by DynamoDB's item limit, want 0: the store checks before it writes", n)
	}
	e.assertNoDeadLetters()
	row := e.claim(key)
	if size, _, ok := claimstore.ParseOmittedResult(row["result"]); row["status"] != "COMPLETED" || !ok || size != len(big) {
		t.Errorf("claim %s with result %.40q; want COMPLETED with the marker of a %d-byte result", row["status"], row["result"], len(big))
	}
}

// attrs returns n string attributes a0..a(n-1), and extra ones.
func attrs(n int, extra map[string]string) map[string]types.MessageAttributeValue {
	out := map[string]types.MessageAttributeValue{}
	for i := range n {
		out[fmt.Sprintf("a%d", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(fmt.Sprint("v", i))}
	}
	for k, v := range extra {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

// sendWith sends one message with attributes and returns its id.
func (e *env) sendWith(body string, a map[string]types.MessageAttributeValue) string {
	e.t.Helper()
	out, err := e.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(e.queueURL), MessageBody: aws.String(body), MessageAttributes: a})
	if err != nil {
		e.t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// TestRedriveKeepsTheMessageIDKey: a message whose effect happened (its
// claim, keyed by the message id, is completed) and that SQS then
// dead-lettered after maxReceiveCount receives (the answer lost, an outage
// outlasting the retries), with eight attributes of its own. `worker
// redrive` moves it back with a new id; the worker with the default
// decoder finds the completed claim and acks it: the effect does not run
// again.
func TestRedriveKeepsTheMessageIDKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 1 * time.Second, maxReceive: 2})
	ctx := context.Background()
	id := e.sendWith(`{"amount":100}`, attrs(8, nil))
	// The effect happened under the message's claim.
	store, err := dynamo.New(dynamo.Config{Client: e.ddb, Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a, err := store.Acquire(ctx, claimstore.AcquireParams{Key: id, Owner: "first", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || a.Outcome != claimstore.Acquired {
		t.Fatalf("acquire: %v %v", a.Outcome, err)
	}
	if err := store.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "charged", ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Received twice and never deleted: SQS moves it to the dead-letter queue.
	waitFor(t, 30*time.Second, "SQS to dead-letter the message", func() bool {
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queueURL), VisibilityTimeout: 0, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Messages) == 0 && e.queueDepth(e.queueURL) == 0 && e.queueDepth(e.dlqURL) == 1
	})
	if _, err := redrive.Move(ctx, e.sqs, e.queueURL, e.dlqURL, redrive.Options{Visibility: time.Second, Secret: testOriginalIDSecret}); err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	metrics := worker.NewMetrics(nil)
	stop := runWorker(t, e, sqsworker.Config{
		Protocol: worker.Protocol{Metrics: metrics, Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
			effects.Add(1)
			return "charged again", nil
		}),
		}})
	waitFor(t, 30*time.Second, "the redriven message to be handled", func() bool {
		return metrics.Count(worker.OutcomeDuplicate)+metrics.Count(worker.OutcomeCompleted) > 0
	})
	e.waitDrained(30 * time.Second)
	stop()
	if n := effects.Load(); n != 0 {
		t.Errorf("the redriven message ran its effect %d more times, want 0 (the claim of %s was completed)", n, id)
	}
	if n := metrics.Count(worker.OutcomeDuplicate); n != 1 {
		t.Errorf("%d duplicates, want 1", n)
	}
}

// TestDeadLetterKeepsEveryAttribute: a payment keyed by a message attribute
// (IDEMPOTENCY_KEY_FROM=attribute:zkey) with eight attributes in all is
// dead-lettered by the worker and redriven. Every attribute survives both
// moves, so the redriven payment decodes and completes; before, the key
// attribute was dropped and the payment was poison for good.
func TestDeadLetterKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 2 * time.Second, maxReceive: 5})
	ctx := context.Background()
	keyFrom, err := payment.ParseKeySource("attribute:zkey")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(payments(awstest.Name("p"), 1)[0])
	sent := attrs(7, map[string]string{"zkey": awstest.Name("key")})
	e.sendWith(string(body), sent)
	var runs atomic.Int32
	handler := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		if runs.Add(1) == 1 {
			return "", worker.Permanentf("declined until an operator looks")
		}
		return "charged", nil
	})
	metrics := worker.NewMetrics(nil)
	stop := runWorker(t, e, sqsworker.Config{Protocol: worker.Protocol{Metrics: metrics, Decoder: &payment.Decoder{KeyFrom: keyFrom}, Handler: handler}})
	waitFor(t, 30*time.Second, "the payment to be dead-lettered", func() bool { return metrics.Count(worker.OutcomeDeadLettered) > 0 })
	e.waitDrained(30 * time.Second)
	stop()
	dl := e.dlqMessages()
	if len(dl) != 1 {
		t.Fatalf("%d dead-letter messages, want 1", len(dl))
	}
	for k, v := range sent {
		if got, ok := dl[0].MessageAttributes[k]; !ok || aws.ToString(got.StringValue) != aws.ToString(v.StringValue) {
			t.Errorf("dead-letter copy: attribute %s = %v, want %q (attributes %v)", k, aws.ToString(got.StringValue), aws.ToString(v.StringValue), keys(dl[0].MessageAttributes))
		}
	}
	if _, err := e.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(e.dlqURL), ReceiptHandle: dl[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if r, err := redrive.Move(ctx, e.sqs, e.queueURL, e.dlqURL, redrive.Options{Visibility: time.Second, Secret: testOriginalIDSecret}); err != nil || r.Moved != 1 {
		t.Fatalf("redrive: %+v %v", r, err)
	}
	metrics = worker.NewMetrics(nil)
	stop = runWorker(t, e, sqsworker.Config{Protocol: worker.Protocol{Metrics: metrics, Decoder: &payment.Decoder{KeyFrom: keyFrom}, Handler: handler}})
	waitFor(t, 30*time.Second, "the redriven payment to be handled", func() bool {
		return metrics.Count(worker.OutcomeCompleted)+metrics.Count(worker.OutcomeDeadLettered) > 0
	})
	e.waitDrained(30 * time.Second)
	stop()
	if c, d := metrics.Count(worker.OutcomeCompleted), metrics.Count(worker.OutcomeDeadLettered); c != 1 || d != 0 {
		t.Errorf("redriven payment: %d completed, %d dead-lettered; want 1 and 0", c, d)
	}
	e.assertNoDeadLetters()
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
