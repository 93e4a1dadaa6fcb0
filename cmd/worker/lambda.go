package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// cmdLambda serves SQS events as a Lambda function, configured by the same
// environment variables as `worker run` (there are no flags in Lambda).
// QUEUE_URL is optional here: with it, poison records go to the queue's
// dead-letter queue at once and the retention is checked against the queue.
func cmdLambda(ctx context.Context, io stdio) error {
	s := newSettings("lambda", io)
	queueURL := s.String("queue-url", "QUEUE_URL", "", "event source queue URL (optional)")
	concurrency := s.Int("concurrency", "WORKER_CONCURRENCY", 0, fmt.Sprintf("records of a batch processed at once (default %d)", sqsworker.DefaultLambdaConcurrency))
	clockSkewMax := s.Duration("clock-skew-max", "CLOCK_SKEW_MAX", 0, "largest offset from AWS's clock at which records are claimed, checked with QUEUE_URL; negative: no check (default: half the lease margin)")
	a := defineApp(s)
	if err := s.Parse(nil); err != nil {
		return err
	}
	ap, err := a.build(ctx, io)
	if err != nil {
		return err
	}
	defer ap.tracing.shutdown(ap.log)
	var cfg sqsworker.LambdaConfig
	cfg.Store, cfg.Handler, cfg.Decoder = ap.store, ap.handler, ap.decoder
	cfg.QueueURL, cfg.Retention, cfg.Concurrency, cfg.Logger = *queueURL, *a.retention, *concurrency, ap.log
	cfg.TracerProvider, cfg.ClockSkewMax = ap.tracing.TracerProvider(), *clockSkewMax
	cfg.OriginalIDSecret = ap.originID
	if *queueURL != "" {
		cfg.SQS = sqs.NewFromConfig(ap.aws, ap.tracing.sqs)
	}
	h, err := sqsworker.NewLambda(ctx, cfg)
	if err != nil {
		return startError(err)
	}
	if *queueURL != "" {
		ap.warnKeyLifetime(h.Queue())
	}
	handle := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		defer ap.tracing.flush(ctx, ap.log) // the process is frozen until the next invocation
		return h.Handle(ctx, ev)
	}
	lambda.StartWithOptions(handle, lambda.WithContext(ctx))
	return nil
}
