package sqsworker

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/queue"
)

// SQSAPI is the part of *sqs.Client the worker uses.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// QueueInfo is what the worker read about its queue at start (Worker.Queue,
// Lambda.Queue): its URL, VisibilityTimeout, Retention and FIFO, and its
// dead-letter queue's DeadLetterURL, DeadLetterRetention, MaxReceiveCount
// and DeadLetterFIFO.
type QueueInfo = queue.Info

// RetentionMargin is added to the longest redelivery window for the default
// claim retention, to cover consumer downtime before a replay.
// RetentionMargin, DefaultRetention and MinRetention are exported as the
// rule Config.Retention is held to, for a user who sets it.
const RetentionMargin = 24 * time.Hour

// DefaultRetention is the claim retention used when none is configured: the
// queue's retention plus its dead-letter queue's (a redrive can bring a
// message back that late) plus RetentionMargin.
func DefaultRetention(q QueueInfo) time.Duration {
	return q.Retention + q.DeadLetterRetention + RetentionMargin
}

// MinRetention is the shortest claim retention the worker accepts for
// queue q: a copy received at the very end of the queue's retention is
// claimed up to hold later (in-process retries up to HoldFor, a FIFO
// group's wait, an invocation), and the claim's expiry, written on the
// completing worker's clock, is read on the claiming worker's: each may be
// off by clockBound. So the queue's retention plus twice clockBound plus
// hold.
func MinRetention(q QueueInfo, clockBound, hold time.Duration) time.Duration {
	return q.Retention + 2*max(clockBound, 0) + max(hold, 0)
}

// checkRetention refuses a claim retention below MinRetention(q,
// clockBound, hold) with a *queue.RetentionError (worker.ErrConfig).
func checkRetention(retention time.Duration, q QueueInfo, clockBound, hold time.Duration) error {
	if low := MinRetention(q, clockBound, hold); retention < low {
		return &queue.RetentionError{Retention: retention, Min: low, QueueRetention: q.Retention, ClockBound: max(clockBound, 0), Hold: max(hold, 0)}
	}
	return nil
}

// messageAttributes turns SQS message attributes into strings.
func messageAttributes(in map[string]types.MessageAttributeValue) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if v.StringValue != nil {
			out[k] = *v.StringValue
		}
	}
	return out
}
