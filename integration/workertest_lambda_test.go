package integration

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
	"github.com/claimfirst/claimfirst/worker/workertest"
)

// The Lambda adapter's harness plays the event source mapping over the
// wire, as AWS runs it: it long-polls the emulator's queue, invokes one
// execution environment (a sqsworker.Lambda behind a gate) with a batch as an
// SQS event with a deadline of the function timeout, and deletes the
// records the response does not report as failures. An invocation still
// running at its deadline is killed with its environment: the gate closes,
// its records come back when their visibility ends, and the environment is
// dead (the harness's Start makes the next).

const (
	// lambdaDoorTimeout is the function timeout of the harness's invocations.
	lambdaDoorTimeout = 3 * time.Second
	// lambdaDoorMargin is LambdaConfig.LeaseMargin: the lease ends this long
	// before the deadline.
	lambdaDoorMargin = time.Second
	// lambdaDoorVisibility is the queue's visibility timeout, above the
	// function timeout as template.yaml requires (there six times; here
	// less, to keep redeliveries quick).
	lambdaDoorVisibility = 4 * time.Second
)

func TestWorkertestLambda(t *testing.T) {
	awstest.Config(t) // skips without the emulator
	t.Parallel()
	workertest.RunAll(t, func(t workertest.T, o workertest.Options) workertest.Harness {
		return newLambdaDoor(t, o)
	})
}

func newLambdaDoor(t workertest.T, o workertest.Options) *door {
	d := newDoor(t, o, lambdaDoorVisibility)
	d.start = d.startLambda
	d.timing = workertest.Timing{
		Redelivery: lambdaDoorVisibility,
		Lease:      lambdaDoorTimeout - lambdaDoorMargin,
		Shutdown:   lambdaDoorTimeout, // an environment's end is its invocation's deadline
		MaxRun:     lambdaDoorTimeout - lambdaDoorMargin,
	}
	return d
}

// lambdaEnv is one execution environment and the event source mapping
// that invokes it.
type lambdaEnv struct {
	d      *door
	g      *gate
	fn     *sqsworker.Lambda
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *door) startLambda(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	g := &gate{}
	p.Store = gatedStore{Store: p.Store, g: g}
	fn, err := sqsworker.NewLambda(ctx, sqsworker.LambdaConfig{
		Protocol: p, SQS: consumerSQS{d: d, g: g}, QueueURL: d.queueURL,
		LeaseMargin: lambdaDoorMargin, EMF: io.Discard,
	})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &lambdaEnv{d: d, g: g, fn: fn, cancel: cancel, done: make(chan struct{})}
	go e.poll(rctx)
	d.t.Cleanup(func() { g.crash(); _ = e.Stop(context.Background()) })
	return e, nil
}

// poll is the event source mapping: receive, invoke, delete what
// succeeded; it ends when ctx ends or the environment dies.
func (e *lambdaEnv) poll(ctx context.Context) {
	defer close(e.done)
	esm := consumerSQS{d: e.d, g: &gate{}} // AWS's side: never crashes, but goes through the broker's faults
	for ctx.Err() == nil && !e.g.dead.Load() {
		out, err := esm.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.d.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		if len(out.Messages) == 0 {
			continue
		}
		ev := doorEvent(e.d.queueARN, out.Messages)
		ictx, cancel := context.WithTimeout(context.Background(), lambdaDoorTimeout)
		answer := make(chan events.SQSEventResponse, 1)
		go func() {
			resp, _ := e.fn.Handle(ictx, ev)
			answer <- resp
		}()
		var resp events.SQSEventResponse
		select {
		case resp = <-answer:
		case <-ictx.Done():
			e.g.crash() // killed at the deadline with its environment
		}
		cancel()
		if e.g.crashAck.Load() {
			e.g.crash() // dies before its response reaches the mapping
		}
		if e.g.dead.Load() {
			return
		}
		failed := make(map[string]bool, len(resp.BatchItemFailures))
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var entries []types.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			if !failed[aws.ToString(m.MessageId)] {
				entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(entries) > 0 {
			_, _ = esm.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(e.d.queueURL), Entries: entries})
		}
	}
}

// Stop stops the mapping from invoking; an invocation in flight runs to its
// end or is killed at its deadline.
func (e *lambdaEnv) Stop(ctx context.Context) error {
	e.cancel()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *lambdaEnv) Crash() { e.g.crash(); e.cancel() }

func (e *lambdaEnv) CrashAtAck() { e.g.crashAck.Store(true) }

func (e *lambdaEnv) Dead() bool { return e.g.dead.Load() }

// doorEvent is the event an event source mapping makes of received messages.
func doorEvent(arn string, ms []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(ms))}
	for i, m := range ms {
		r := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: "us-east-1"}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
			}
		}
		ev.Records[i] = r
	}
	return ev
}
