package sqsworker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestSNSCopiesRunOnce: one notification published to an SNS topic the
// queue subscribes to (raw delivery off) reaches the queue twice, as SNS's
// at-least-once delivery may do: the second copy is the same body in a new
// SQS message. The library's default decoder runs the handler once.
func TestSNSCopiesRunOnce(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := sqs.NewFromConfig(cfg)
	created, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("sns-copies")),
		Attributes: map[string]string{"VisibilityTimeout": "30"}})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(created.QueueUrl)
	t.Cleanup(func() { _, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
	qa, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	sn := sns.NewFromConfig(cfg)
	topic, err := sn.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(awstest.Name("orders"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint: aws.String(qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Publish(ctx, &sns.PublishInput{TopicArn: topic.TopicArn, Message: aws.String(`{"order_id":"o-1"}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
	if err != nil || len(got.Messages) != 1 || !strings.Contains(aws.ToString(got.Messages[0].Body), `"Type"`) {
		t.Fatalf("the delivered notification: %+v, %v", got, err)
	}
	if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
		ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	// SNS delivers it again: the same body, a new SQS message.
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: got.Messages[0].Body}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var runs []string
	w, err := sqsworker.New(ctx, sqsworker.Config{QueueURL: url, SQS: q, WaitTime: time.Second, Protocol: worker.Protocol{
		Store: memory.New(memory.Config{}), Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, m.ID+" as "+m.Key)
			return "sent", nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for {
		a, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
			a.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the queue did not drain")
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 {
		t.Errorf("handler runs %q; want one for the one notification", runs)
	}
}
