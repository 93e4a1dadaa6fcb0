package sqsworker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

const testSecret origin.Secret = "0123456789abcdef-test"

// deadLetterOne sends a message with attrs to a new queue whose redrive
// policy names a new dead-letter queue, runs a worker whose handler fails
// it permanently until the copy is in the dead-letter queue, and returns
// the source message's id, the copy, the worker's log and its metrics.
func deadLetterOne(t *testing.T, attrs map[string]sqstypes.MessageAttributeValue) (string, sqstypes.Message, string, *prometheus.Registry) {
	t.Helper()
	cfg := awstest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := sqs.NewFromConfig(cfg)
	mk := func(name string, attrs map[string]string) (url, arn string) {
		created, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(name)), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		url = aws.ToString(created.QueueUrl)
		t.Cleanup(func() { _, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
		a, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		return url, a.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	}
	dlqURL, dlqARN := mk("dl-dlq", nil)
	url, _ := mk("dl-src", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"5"}`, dlqARN)})
	sent, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"n":1}`), MessageAttributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	w, err := sqsworker.New(ctx, sqsworker.Config{QueueURL: url, SQS: q, WaitTime: time.Second, Protocol: worker.Protocol{
		Store: memory.New(memory.Config{}), Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: worker.NewMetrics(reg),
		OriginalIDSecret: testSecret,
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
			return "", worker.Permanentf("refused")
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL), WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) == 1 {
			return aws.ToString(sent.MessageId), got.Messages[0], logs.String(), reg
		}
		if ctx.Err() != nil {
			t.Fatal("nothing dead-lettered")
		}
	}
}

// TestDeadLetterSignsTheOriginalID: the worker's dead-letter copy carries
// the source message's id in OriginalMessageId with a MAC that verifies
// over its first receipt time and body.
func TestDeadLetterSignsTheOriginalID(t *testing.T) {
	t.Parallel()
	id, m, _, _ := deadLetterOne(t, map[string]sqstypes.MessageAttributeValue{
		"Tenant": {DataType: aws.String("String"), StringValue: aws.String("t1")}})
	a := m.MessageAttributes
	got, ok := origin.Verify(testSecret, aws.ToString(a[worker.OriginalIDAttribute].StringValue),
		aws.ToString(a[worker.FirstReceivedAttribute].StringValue), aws.ToString(m.Body))
	if !ok || got != id || aws.ToString(a[worker.FirstReceivedAttribute].StringValue) == "" {
		t.Errorf("dead-letter copy's %s = %q (verifies: %v, id %q); want %s signed, with %s",
			worker.OriginalIDAttribute, aws.ToString(a[worker.OriginalIDAttribute].StringValue), ok, got, id, worker.FirstReceivedAttribute)
	}
}

// TestDeadLetterWithoutRoomIsLoud: a message with ten attributes of its
// own is dead-lettered without OriginalMessageId (SQS allows no more), so
// a message-id key cannot survive its redrive: an ERROR names the message
// and what was dropped, and a counter counts it by attribute.
func TestDeadLetterWithoutRoomIsLoud(t *testing.T) {
	t.Parallel()
	attrs := map[string]sqstypes.MessageAttributeValue{}
	for i := range 10 {
		attrs[fmt.Sprintf("a%d", i)] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	id, m, logs, reg := deadLetterOne(t, attrs)
	if _, ok := m.MessageAttributes[worker.OriginalIDAttribute]; ok || len(m.MessageAttributes) != 10 {
		t.Fatalf("copy's attributes %d, with %s: %v", len(m.MessageAttributes), worker.OriginalIDAttribute, ok)
	}
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, `"message_id":"`+id+`"`) && strings.Contains(l, worker.OriginalIDAttribute) {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, worker.ReasonAttribute) {
		t.Errorf("no ERROR naming %s and the dropped %s and %s:\n%s", id, worker.OriginalIDAttribute, worker.ReasonAttribute, logs)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "claimfirst_dead_letter_attributes_dropped_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				if lp.GetName() == "attribute" && lp.GetValue() == worker.OriginalIDAttribute {
					found += mm.GetCounter().GetValue()
				}
			}
		}
	}
	if found != 1 {
		t.Errorf("claimfirst_dead_letter_attributes_dropped_total{attribute=%q} = %v, want 1", worker.OriginalIDAttribute, found)
	}
}
