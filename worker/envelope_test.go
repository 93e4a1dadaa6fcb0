package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
)

// snsWithAttributes is an SNS notification of order whose message
// attributes are attrs (a JSON object of {"Type","Value"}), as anyone who
// can publish to the topic, or write a body to the queue, can send it.
func snsWithAttributes(snsID, order, attrs string) string {
	return strings.TrimSuffix(snsWrapped(snsID, order), "}") + `,"MessageAttributes":` + attrs + `}`
}

// The worker's own attributes are never taken from an envelope: an SNS
// envelope is not signed for the worker, so a producer who controls only a
// body would otherwise choose another message's original id (and so its
// key), or a dead-letter reason.
func TestEnvelopeAttributesNeverTheWorkers(t *testing.T) {
	t.Parallel()
	body := snsWithAttributes("sns-1", `{"order_id":"o-1"}`, `{`+
		`"OriginalMessageId":{"Type":"String","Value":"victim-id"},`+
		`"DeadLetterReason":{"Type":"String","Value":"reconcile"},`+
		`"FirstReceivedAt":{"Type":"String","Value":"2020-01-01T00:00:00Z"},`+
		`"Idempotency-Key":{"Type":"String","Value":"k-1"}}`)
	var got *worker.Message
	dec := worker.UnwrapEnvelopes(worker.DecoderFunc(func(m *worker.Message) error {
		got = m
		m.Key = m.ID
		return nil
	}))
	m := &worker.Message{ID: "sqs-1", Body: body}
	if err := dec.Decode(m); err != nil {
		t.Fatal(err)
	}
	if id := got.OriginalID(); id != "sqs-1" {
		t.Errorf("OriginalID() = %q after an SNS envelope claimed another; want the SQS id", id)
	}
	for _, name := range []string{worker.OriginalIDAttribute, worker.ReasonAttribute, worker.FirstReceivedAttribute} {
		if v, ok := got.Attributes[name]; ok {
			t.Errorf("attribute %s = %q taken from the envelope", name, v)
		}
	}
	if got.Attributes["Idempotency-Key"] != "k-1" {
		t.Errorf("attributes = %v; want the envelope's own Idempotency-Key", got.Attributes)
	}
}

// The default decoder keys an enveloped message by its envelope's id (the
// SNS MessageId, the EventBridge event id), which every copy of one
// publication carries, rather than by the SQS id, which each copy has its
// own: SNS and EventBridge deliver at least once, and each delivery is a
// new SQS message.
func TestMessageIDKeysOfEnvelopes(t *testing.T) {
	t.Parallel()
	order := `{"order_id":"o-1","amount":5}`
	type delivery struct {
		id, body string
		attrs    map[string]string
	}
	for _, tc := range []struct {
		name       string
		keep       bool
		deliveries []delivery
		wantKeys   []string
		wantFails  int
	}{
		{name: "one SNS notification delivered twice", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", order)}},
			wantKeys: []string{"sns-1"}},
		{name: "one EventBridge event delivered twice", deliveries: []delivery{
			{id: "sqs-1", body: eventBridgeWrapped("eb-1", order)}, {id: "sqs-2", body: eventBridgeWrapped("eb-1", order)}},
			wantKeys: []string{"eb-1"}},
		{name: "an EventBridge event through SNS, twice", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", eventBridgeWrapped("eb-1", order))},
			{id: "sqs-2", body: snsWrapped("sns-2", eventBridgeWrapped("eb-1", order))}},
			wantKeys: []string{"eb-1"}},
		{name: "envelopes kept", keep: true, deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", order)}},
			wantKeys: []string{"sns-1"}},
		// Two publications are two messages, whatever they hold: a
		// message-id key does not deduplicate a producer's retry.
		{name: "two publications", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-2", order)}},
			wantKeys: []string{"sns-1", "sns-2"}},
		// A copy the worker dead-lettered and that was moved back wears its
		// envelope still: it keeps the key its first delivery had.
		{name: "a redriven copy", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)},
			{id: "sqs-9", body: snsWrapped("sns-1", order), attrs: map[string]string{worker.OriginalIDAttribute: "sqs-1"}}},
			wantKeys: []string{"sns-1"}},
		{name: "no envelope", deliveries: []delivery{{id: "sqs-1", body: order}, {id: "sqs-2", body: order}},
			wantKeys: []string{"sqs-1", "sqs-2"}},
		// A body that wears a copied envelope id around another message is
		// a key reused, dead-lettered, not a duplicate acked unprocessed.
		{name: "another message under a known envelope id", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", `{"order_id":"o-2","amount":500}`)}},
			wantKeys: []string{"sns-1"}, wantFails: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			l, err := worker.NewLambda(context.Background(), worker.LambdaConfig{
				EMF: io.Discard,
				Protocol: worker.Protocol{
					Store: memory.New(memory.Config{}), Retention: time.Hour, Handler: rec,
					KeepEnvelopes: tc.keep, Logger: slog.New(slog.DiscardHandler),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			fails := 0
			for _, d := range tc.deliveries {
				r := events.SQSMessage{MessageId: d.id, Body: d.body, MessageAttributes: map[string]events.SQSMessageAttribute{}}
				for k, v := range d.attrs {
					r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String(v)}
				}
				resp, err := l.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{r}})
				if err != nil {
					t.Fatal(err)
				}
				fails += len(resp.BatchItemFailures)
			}
			if fmt.Sprint(rec.keys) != fmt.Sprint(tc.wantKeys) || fails != tc.wantFails {
				t.Errorf("handled keys %q, %d failures; want %q, %d", rec.keys, fails, tc.wantKeys, tc.wantFails)
			}
		})
	}
}

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
	w, err := worker.New(ctx, worker.Config{QueueURL: url, SQS: q, WaitTime: time.Second, Protocol: worker.Protocol{
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
