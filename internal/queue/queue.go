// Package queue reads what the SQS transport needs to know about its queue
// at start (Read), and is the error of a claim retention too short for it
// (RetentionError), which the binary names by its setting. A program of its
// own meets them through sqsworker: Worker.Queue returns the Info, and New
// refuses a short retention with an error wrapping worker.ErrConfig.
package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/worker"
)

// Info is what the SQS transport reads about its queue at start.
type Info struct {
	// URL is the source queue's URL.
	URL string
	// VisibilityTimeout is the queue's default visibility timeout.
	VisibilityTimeout time.Duration
	// Retention is the queue's MessageRetentionPeriod.
	Retention time.Duration
	// DeadLetterURL is the URL of the queue's redrive target, or "".
	DeadLetterURL string
	// DeadLetterRetention is the dead-letter queue's MessageRetentionPeriod.
	DeadLetterRetention time.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount, or 0.
	MaxReceiveCount int
	// FIFO is the queue's FifoQueue attribute: its messages are processed
	// one message group at a time, in order.
	FIFO bool
	// DeadLetterFIFO is the dead-letter queue's FifoQueue attribute: messages
	// sent there carry a group id and a deduplication id.
	DeadLetterFIFO bool
}

// API is the part of *sqs.Client Read uses (sqsworker.SQSAPI has it).
type API interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// Read reads the queue's visibility timeout, retention, redrive policy and
// whether it is a FIFO queue, and the dead-letter queue's URL, retention
// and type.
func Read(ctx context.Context, api API, url string) (Info, error) {
	q := Info{URL: url}
	attrs, err := queueAttributes(ctx, api, url,
		types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameMessageRetentionPeriod, types.QueueAttributeNameRedrivePolicy,
		types.QueueAttributeNameFifoQueue)
	if err != nil {
		return q, err
	}
	q.FIFO = attrs[string(types.QueueAttributeNameFifoQueue)] == "true"
	if q.VisibilityTimeout, err = seconds(attrs, types.QueueAttributeNameVisibilityTimeout); err != nil {
		return q, err
	}
	if q.Retention, err = seconds(attrs, types.QueueAttributeNameMessageRetentionPeriod); err != nil {
		return q, err
	}
	policy := attrs[string(types.QueueAttributeNameRedrivePolicy)]
	if policy == "" {
		return q, nil
	}
	var rp struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     any    `json:"maxReceiveCount"` // a number or a string, depending on who wrote it
	}
	if err := json.Unmarshal([]byte(policy), &rp); err != nil {
		return q, fmt.Errorf("queue %s: RedrivePolicy %q: %w", url, policy, err)
	}
	q.MaxReceiveCount, _ = strconv.Atoi(strings.Trim(fmt.Sprint(rp.MaxReceiveCount), `"`))
	// arn:aws:sqs:region:account:name
	parts := strings.Split(rp.DeadLetterTargetArn, ":")
	if len(parts) != 6 || parts[2] != "sqs" {
		return q, fmt.Errorf("queue %s: RedrivePolicy has a bad deadLetterTargetArn %q", url, rp.DeadLetterTargetArn)
	}
	out, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5]), QueueOwnerAWSAccountId: aws.String(parts[4])})
	if err != nil {
		return q, fmt.Errorf("dead-letter queue %s: %w", rp.DeadLetterTargetArn, err)
	}
	q.DeadLetterURL = aws.ToString(out.QueueUrl)
	dattrs, err := queueAttributes(ctx, api, q.DeadLetterURL, types.QueueAttributeNameMessageRetentionPeriod, types.QueueAttributeNameFifoQueue)
	if err != nil {
		return q, err
	}
	q.DeadLetterFIFO = dattrs[string(types.QueueAttributeNameFifoQueue)] == "true"
	q.DeadLetterRetention, err = seconds(dattrs, types.QueueAttributeNameMessageRetentionPeriod)
	return q, err
}

func queueAttributes(ctx context.Context, api API, url string, names ...types.QueueAttributeName) (map[string]string, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("queue %s: get attributes: %w", url, err)
	}
	return out.Attributes, nil
}

func seconds(attrs map[string]string, name types.QueueAttributeName) (time.Duration, error) {
	v, ok := attrs[string(name)]
	if !ok {
		return 0, fmt.Errorf("queue attribute %s missing", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("queue attribute %s=%q: %w", name, v, err)
	}
	return time.Duration(n) * time.Second, nil
}

// RetentionError is a claim retention shorter than sqsworker.MinRetention: a copy
// received at the end of the queue's retention could be claimed after its
// key's claim is forgotten and be processed as new.
type RetentionError struct {
	// Retention is the configured claim retention.
	Retention time.Duration
	// Min is the shortest retention accepted: QueueRetention plus twice
	// ClockBound plus Hold.
	Min time.Duration
	// QueueRetention is the queue's MessageRetentionPeriod.
	QueueRetention time.Duration
	// ClockBound is how far a worker's clock may be off AWS's (the clock
	// skew bound): the claim's expiry is written on one worker's clock and
	// read on another's.
	ClockBound time.Duration
	// Hold is the longest a received copy may wait before its claim is
	// acquired (in-process retries, a FIFO group's wait, an invocation).
	Hold time.Duration
}

// Error implements error.
func (e *RetentionError) Error() string {
	return fmt.Sprintf("claim retention %s (%d s) is shorter than %s (%d s): the queue's MessageRetentionPeriod %s (%d s) "+
		"plus twice the clock bound %s plus the longest wait before a claim %s: "+
		"a message redelivered at the end of its retention could find its claim forgotten and be processed as new",
		e.Retention, int64(e.Retention.Seconds()), e.Min, int64(e.Min.Seconds()), e.QueueRetention, int64(e.QueueRetention.Seconds()),
		e.ClockBound, e.Hold)
}

// Is makes errors.Is(err, worker.ErrConfig) true.
func (e *RetentionError) Is(target error) bool { return target == worker.ErrConfig }
