package sqsworker

import (
	"context"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/claimfirst/claimfirst/worker"
)

// The SQS transports feed the clock check (worker.ClockCheck) with the Date of
// every SQS answer.

// stackOption adds the measuring middleware to an SDK call's stack: the
// outermost step, so the interval covers every attempt.
func stackOption(c *worker.ClockCheck, now func() time.Time) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("ClaimfirstClockSkew",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				start := now()
				out, md, err := next.HandleInitialize(ctx, in)
				if t, ok := awsmiddleware.GetServerTime(md); ok {
					c.Observe(t, start, now())
				}
				return out, md, err
			}), middleware.Before)
	}
}

// measureSQS wraps api so that every answer's Date is observed by c (nil
// c: api), the call timed by now (the ClockCheck's clock).
func measureSQS(c *worker.ClockCheck, now func() time.Time, api SQSAPI) SQSAPI {
	if c == nil || api == nil {
		return api
	}
	return measuredSQS{api: api, opt: func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, stackOption(c, now)) }}
}

// measuredSQS is an SQSAPI whose calls are measured by a worker.ClockCheck.
type measuredSQS struct {
	api SQSAPI
	opt func(*sqs.Options)
}

func (m measuredSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return m.api.ReceiveMessage(ctx, in, append(opts, m.opt)...)
}

func (m measuredSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return m.api.DeleteMessageBatch(ctx, in, append(opts, m.opt)...)
}

func (m measuredSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return m.api.ChangeMessageVisibility(ctx, in, append(opts, m.opt)...)
}

func (m measuredSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return m.api.ChangeMessageVisibilityBatch(ctx, in, append(opts, m.opt)...)
}

func (m measuredSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return m.api.SendMessage(ctx, in, append(opts, m.opt)...)
}

func (m measuredSQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return m.api.GetQueueAttributes(ctx, in, append(opts, m.opt)...)
}

//nolint:revive // the SQS client's name, which SQSAPI requires
func (m measuredSQS) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return m.api.GetQueueUrl(ctx, in, append(opts, m.opt)...)
}
