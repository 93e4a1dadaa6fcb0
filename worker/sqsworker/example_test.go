package sqsworker_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// sendEmail stands for any side effect that must happen once per key.
func sendEmail(_ context.Context, key, _ string) (string, error) {
	return "sent:" + key, nil
}

// A worker around your own handler: the claim protocol, leases, heartbeats,
// acks, dead-lettering and shutdown come with it.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	if err := run(ctx); err != nil {
		stop()
		log.Fatal(err) // errors.Is(err, worker.ErrConfig): refuse to start
	}
	stop()
}

func run(ctx context.Context) error {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(sqsworker.HTTPClient(64)))
	if err != nil {
		return err
	}
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: "claims", KeyPrefix: "emails#"})
	if err != nil {
		return err
	}
	w, err := sqsworker.New(ctx, sqsworker.Config{
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/emails",
		SQS:      sqs.NewFromConfig(cfg),
		Protocol: worker.Protocol{
			Store: store,
			// Key each message by its SQS message id; a Decoder can use a
			// business key from the body instead.
			Decoder: worker.KeyFromMessageID,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
				// m.Key is claimed by this worker alone until it returns;
				// pass it (and m.Token) downstream.
				return sendEmail(ctx, m.Key, m.Body)
			}),
		},
	})
	if err != nil {
		return err
	}
	return w.Run(ctx) // returns when ctx ends (SIGTERM, in Example) and the handlers in flight finish, within ShutdownTimeout
}

// The same protocol as a Lambda function: done records are left out of the
// response, the others are reported as batch item failures.
func ExampleLambda_Handle() {
	var calls atomic.Int32
	l, err := sqsworker.NewLambda(context.Background(), sqsworker.LambdaConfig{
		EMF: io.Discard, // in Lambda, leave it nil: metrics go to stdout
		Protocol: worker.Protocol{
			Store:     memory.New(memory.Config{}),
			Retention: 7 * 24 * time.Hour,
			Logger:    slog.New(slog.DiscardHandler),
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				calls.Add(1)
				if m.Body == "fail" {
					return "", fmt.Errorf("downstream unavailable")
				}
				return "done", nil
			}),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	batch := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: "ok"},
		{MessageId: "m2", Body: "fail"},
	}}
	for range 2 { // the second delivery of m1 is a duplicate: acked, not handled
		resp, _ := l.Handle(ctx, batch)
		fmt.Println("failures:", resp.BatchItemFailures)
	}
	fmt.Println("handler calls:", calls.Load())
	// Output:
	// failures: [{m2}]
	// failures: [{m2}]
	// handler calls: 3
}
