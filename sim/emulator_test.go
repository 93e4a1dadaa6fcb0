package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/sim"
)

// sqsAPI is what the comparison calls on both SQSes.
type sqsAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// behaviour runs one sequence of SQS calls (receive counts, visibility on
// a stale receipt handle, a delete with a stale one, redrive at
// maxReceiveCount 2) and says what each step observed.
func behaviour(t *testing.T, api sqsAPI, src, dlq string) []string {
	t.Helper()
	ctx := context.Background()
	var seen []string
	note := func(format string, args ...any) { seen = append(seen, fmt.Sprintf(format, args...)) }
	receive := func(url string) *types.Message {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1,
			VisibilityTimeout: 30, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(out.Messages) == 0 {
			return nil
		}
		return &out.Messages[0]
	}
	vis := func(receipt *string, s int32) error {
		_, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(src), ReceiptHandle: receipt, VisibilityTimeout: s})
		return err
	}
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(src), MessageBody: aws.String("a")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	m1 := receive(src)
	note("first receive count %s", m1.Attributes["ApproximateReceiveCount"])
	note("second receive while invisible: %v", receive(src) != nil)
	note("visibility 0 on the current handle: error %v", vis(m1.ReceiptHandle, 0) != nil)
	m2 := receive(src)
	note("receive after visibility 0: count %s", m2.Attributes["ApproximateReceiveCount"])
	note("visibility 0 on the stale handle: error %v", vis(m1.ReceiptHandle, 0) != nil)
	note("received after the stale visibility 0: %v", receive(src) != nil)
	note("visibility 0 on the current handle again: error %v", vis(m2.ReceiptHandle, 0) != nil)
	note("a third receive moves it to the dead-letter queue: received %v", receive(src) != nil)
	d := receive(dlq)
	note("in the dead-letter queue: %v, same id %v", d != nil, d != nil && aws.ToString(d.MessageId) == aws.ToString(m1.MessageId))

	// A delete with the handle of an earlier receive.
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(src), MessageBody: aws.String("b")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	b1 := receive(src)
	_ = vis(b1.ReceiptHandle, 0)
	b2 := receive(src)
	out, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(src),
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: b1.ReceiptHandle}}})
	note("delete with the stale handle: error %v, successful %d, failed %d", err != nil, len(out.Successful), len(out.Failed))
	note("visibility 0 on the current handle after it: error %v", vis(b2.ReceiptHandle, 0) != nil)
	return seen
}

// TestSQSAgreesWithEmulator runs the same calls on the simulated SQS and on
// the emulator's: where they disagree, the emulator decides and the
// simulator is fixed.
func TestSQSAgreesWithEmulator(t *testing.T) {
	cfg := awstest.Config(t)
	ctx := context.Background()
	client := sqs.NewFromConfig(cfg)
	dlqName, srcName := awstest.Name("sim-dlq"), awstest.Name("sim-src")
	dq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlqName)})
	if err != nil {
		t.Fatal(err)
	}
	arn, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dq.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	sq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(srcName), Attributes: map[string]string{
		"VisibilityTimeout": "30",
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, arn.Attributes["QueueArn"]),
	}})
	if err != nil {
		t.Fatal(err)
	}
	emulator := behaviour(t, client, aws.ToString(sq.QueueUrl), aws.ToString(dq.QueueUrl))

	s := sim.NewSQS(sim.SQSConfig{})
	sdlq, err := s.CreateQueue(sim.QueueConfig{Name: "dlq", Retention: 14 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ssrc, err := s.CreateQueue(sim.QueueConfig{Name: "src", VisibilityTimeout: 30 * time.Second, DeadLetter: "dlq", MaxReceiveCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	simulated := behaviour(t, s, ssrc, sdlq)
	if strings.Join(emulator, "\n") != strings.Join(simulated, "\n") {
		t.Errorf("the simulated SQS disagrees with the emulator's:\nemulator:\n  %s\nsimulated:\n  %s",
			strings.Join(emulator, "\n  "), strings.Join(simulated, "\n  "))
	}
}
