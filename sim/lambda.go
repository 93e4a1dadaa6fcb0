package sim

import (
	"context"
	"io"
	"log/slog"
	"path"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// Deploy chooses how the workers of a run are deployed.
type Deploy int

// The deployments.
const (
	// AnyDeploy lets the seed choose for each worker slot: a Lambda
	// function one time in three, else a long-polling container.
	AnyDeploy Deploy = iota
	// Containers runs every slot as a long-polling sqsworker.Worker.
	Containers
	// Lambdas runs every slot as a sqsworker.Lambda function, invoked by a
	// simulated event source mapping.
	Lambdas
)

// functionTimeout is the simulated functions' timeout: the deadline of
// every invocation, a third of the queue's visibility timeout (so that a
// record's lease, which ends LeaseMargin before the deadline, ends before
// its visibility).
const functionTimeout = visibility / 3

// lambdaSlot reports whether worker slot i is a Lambda function.
func (w *world) lambdaSlot(i int) bool {
	switch w.cfg.Deploy {
	case Containers:
		return false
	case Lambdas:
		return true
	}
	return !w.burst && w.f.chance(1.0/3, "lambda", itoa(i))
}

// lambdaIncarnation runs one Lambda execution environment on node n, as an
// event source mapping drives it: it long-polls the queue (AWS's side, never
// crashed), invokes the function with a batch of up to ten records and a
// deadline functionTimeout away, and deletes the records the function did
// not report as failures. An invocation still running at its deadline is
// killed with its environment: nothing it does after that has an effect (the
// node crashes), and its records come back when their visibility ends. The
// environment also dies at killAt (0: never), mid-invocation or idle. It
// returns true when the environment died (start another), false when the
// world stopped.
func (w *world) lambdaIncarnation(ctx context.Context, n *node, killAt time.Duration) bool {
	store, handler, decoder := w.clients(n)
	var cfg sqsworker.LambdaConfig
	cfg.Store, cfg.Handler, cfg.Decoder = store, handler, decoder
	cfg.SQS, cfg.QueueURL = gatedSQS{n: n, api: w.sqs}, w.src
	cfg.OutageCover, cfg.Owner, cfg.Now, cfg.OriginalIDSecret = outageCover, n.name, n.clock, originalIDSecret
	cfg.Logger, cfg.EMF = slog.New(slog.DiscardHandler), io.Discard
	if n.offBy != 0 {
		reg := prometheus.NewRegistry()
		cfg.Metrics = worker.NewMetrics(reg)
		defer func() { w.noticed(n, reg) }()
	}
	fn, err := sqsworker.NewLambda(ctx, cfg) // the cold start
	if err != nil {
		if n.isCrashed() || ctx.Err() != nil {
			return ctx.Err() == nil
		}
		w.j.violate("world", "%s: sqsworker.NewLambda: %v", n.name, err)
		return false
	}
	var kill <-chan time.Time
	if killAt > 0 {
		w.mark(time.Now().Add(killAt))
		kill = time.After(killAt)
	}
	arn := "arn:aws:sqs:us-east-1:000000000000:" + path.Base(w.src)
	for {
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(w.src), MaxNumberOfMessages: 10, WaitTimeSeconds: 20,
			MessageAttributeNames: []string{"All"},
		})
		if ctx.Err() != nil {
			return false
		}
		select {
		case <-kill:
			w.j.inject("crash")
			n.crash()
			return true
		default:
		}
		if err != nil || len(out.Messages) == 0 {
			continue
		}
		ev := sqsEvent(arn, out.Messages)
		ictx, cancel := context.WithTimeout(ctx, functionTimeout)
		type answer struct {
			resp events.SQSEventResponse
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			resp, err := fn.Handle(ictx, ev)
			done <- answer{resp, err}
		}()
		var a answer
		killed := false
		select {
		case a = <-done:
		case <-ictx.Done():
			killed = ctx.Err() == nil
		case <-kill:
			killed = true
		}
		if killed {
			// The environment ends here: its calls from now on are refused.
			w.j.inject("lambda_killed")
			n.crash()
			cancel()
			<-done
			return true
		}
		cancel()
		if ctx.Err() != nil {
			<-done
			return false
		}
		if a.err == nil {
			w.deleteDone(out.Messages, a.resp)
		}
	}
}

// sqsEvent is the event an event source mapping makes of received messages.
func sqsEvent(arn string, ms []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(ms))}
	for i, m := range ms {
		r := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: arn,
			AWSRegion: "us-east-1"}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType),
					StringValue: v.StringValue, BinaryValue: v.BinaryValue}
			}
		}
		ev.Records[i] = r
	}
	return ev
}

// deleteDone deletes the batch's records that the function did not report
// as failures, as the event source mapping does.
func (w *world) deleteDone(ms []types.Message, resp events.SQSEventResponse) {
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for _, m := range ms {
		if !failed[aws.ToString(m.MessageId)] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(itoa(len(entries))), ReceiptHandle: m.ReceiptHandle})
		}
	}
	if len(entries) > 0 {
		_, _ = w.sqs.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(w.src), Entries: entries})
	}
}
