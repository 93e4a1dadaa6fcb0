package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/awstest"
)

// TestRedriveLeavesAnotherQueuesMessages: a queue that is not the payments
// queue names the payments dead-letter queue in its own redrive policy, and
// SQS dead-letters its message there. `worker redrive` moves the payments
// queue's own dead letter back, and leaves the other queue's where it is,
// counted and named by its source, so that nothing a stranger's queue
// holds is charged.
func TestRedriveLeavesAnotherQueuesMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxReceive: 1})
	ctx := context.Background()
	dlqARN := e.queueARN(e.dlqURL)
	refunds, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("refunds")), Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"1"}`, dlqARN),
	}})
	if err != nil {
		t.Fatal(err)
	}
	refundsURL := aws.ToString(refunds.QueueUrl)
	refundsARN := e.queueARN(refundsURL)
	ps := payments("source", 2)
	e.sendTo(refundsURL, paymentBody(ps[0]), nil)
	e.sendTo(e.queueURL, paymentBody(ps[1]), nil)
	// Each is received once and not deleted: the next receive dead-letters it.
	for _, url := range []string{refundsURL, e.queueURL} {
		e.receiveAndDrop(url)
		e.receiveAndDrop(url)
	}
	waitFor(t, 10*time.Second, "both messages in the dead-letter queue", func() bool { return e.queueDepth(e.dlqURL) == 2 })

	code, stdout, stderr := e.command(nil, "redrive")
	if code != 0 {
		t.Fatalf("redrive: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "moved 1 messages") {
		t.Errorf("redrive printed %q, want 1 moved (the payments queue's own)", stdout)
	}
	if !strings.Contains(stdout, "1 from another queue") || !strings.Contains(stdout, refundsARN) {
		t.Errorf("redrive printed %q, want 1 left from another queue, named %s", stdout, refundsARN)
	}
	waitFor(t, 10*time.Second, "the other queue's message visible again in the dead-letter queue", func() bool { return e.visibleDepth(e.dlqURL) == "1" })
	got := e.receiveBodies(e.queueURL)
	if len(got) != 1 || !strings.Contains(got[0], ps[1].PaymentID) {
		t.Errorf("payments queue holds %q, want only %s", got, ps[1].PaymentID)
	}
	left := e.receiveBodies(e.dlqURL)
	if len(left) != 1 || !strings.Contains(left[0], ps[0].PaymentID) {
		t.Errorf("dead-letter queue holds %q, want the other queue's %s", left, ps[0].PaymentID)
	}
}

func (e *env) queueARN(url string) string {
	e.t.Helper()
	out, err := e.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// receiveAndDrop receives what url has and makes it visible again at once,
// deleting nothing: a failed consumer.
func (e *env) receiveAndDrop(url string) {
	e.t.Helper()
	out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range out.Messages {
		if _, err := e.sqs.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// receiveBodies receives the bodies url has, hidden for a minute.
func (e *env) receiveBodies(url string) []string {
	e.t.Helper()
	out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60, WaitTimeSeconds: 1,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	var bodies []string
	for _, m := range out.Messages {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	return bodies
}

// TestSetupDeadLetterQueueTakesOnlyTheQueue: `worker setup` gives the
// dead-letter queue a RedriveAllowPolicy naming the queue alone, and a
// second run finds it unchanged.
func TestSetupDeadLetterQueueTakesOnlyTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, fifo := range []bool{false, true} {
		queue := awstest.Name("setup-allow")
		args := []string{"setup", "-queue-name", queue, "-claim-table", awstest.Name("claims")}
		if fifo {
			args = append(args, "-fifo")
		}
		e.mustCommand(nil, args...)
		suffix := ""
		if fifo {
			suffix = ".fifo"
		}
		url := func(name string) string {
			out, err := e.sqs.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if err != nil {
				t.Fatal(err)
			}
			return aws.ToString(out.QueueUrl)
		}
		qARN := e.queueARN(url(queue + suffix))
		dlqURL := url(queue + "-dlq" + suffix)
		out, err := e.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(dlqURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedriveAllowPolicy},
		})
		if err != nil {
			t.Fatal(err)
		}
		var policy struct {
			RedrivePermission string   `json:"redrivePermission"`
			SourceQueueArns   []string `json:"sourceQueueArns"`
		}
		raw := out.Attributes[string(types.QueueAttributeNameRedriveAllowPolicy)]
		if err := json.Unmarshal([]byte(raw), &policy); err != nil || policy.RedrivePermission != "byQueue" ||
			len(policy.SourceQueueArns) != 1 || policy.SourceQueueArns[0] != qARN {
			t.Errorf("fifo %v: dead-letter queue's RedriveAllowPolicy = %q, want byQueue naming only %s", fifo, raw, qARN)
		}
		_, _, stderr := e.command(nil, args...)
		if !strings.Contains(stderr, "-dlq"+suffix+" exists, unchanged") {
			t.Errorf("fifo %v: second setup said %q, want the dead-letter queue unchanged", fifo, stderr)
		}
	}
}
