package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/awstest"
)

// TestEnvelopes: payments published to an SNS topic the queue subscribes to
// (raw delivery off) and put on an EventBridge bus whose rule targets the
// queue reach `worker run` in their envelopes, as SQS receives them from
// those services. With IDEMPOTENCY_KEY_FROM=jmespath:payment_id the key
// comes from the payment inside: every payment is charged once, though each
// was published twice and some went through both services.
func TestEnvelopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	cfg := awstest.Config(t)
	qa, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(e.queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	queueARN := qa.Attributes[string(types.QueueAttributeNameQueueArn)]

	sn := sns.NewFromConfig(cfg)
	topic, err := sn.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(awstest.Name("payments"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"), Endpoint: aws.String(queueARN)}); err != nil {
		t.Fatal(err)
	}
	eb := eventbridge.NewFromConfig(cfg)
	bus := awstest.Name("bus")
	if _, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(bus)}); err != nil {
		t.Fatal(err)
	}
	rule := awstest.Name("rule")
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(rule), EventBusName: aws.String(bus),
		EventPattern: aws.String(`{"source":["com.example.payments"]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(rule), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(queueARN)}}}); err != nil {
		t.Fatal(err)
	}

	ps := payments("env", 6)
	for i, p := range ps {
		b, _ := json.Marshal(p)
		body := string(b)
		for range 2 { // published twice: a producer's retry
			switch i % 3 {
			case 0:
				if _, err := sn.Publish(ctx, &sns.PublishInput{TopicArn: topic.TopicArn, Message: aws.String(body)}); err != nil {
					t.Fatal(err)
				}
			case 1:
				out, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
					EventBusName: aws.String(bus), Source: aws.String("com.example.payments"),
					DetailType: aws.String("Payment Requested"), Detail: aws.String(body),
				}}})
				if err != nil || out.FailedEntryCount > 0 {
					t.Fatalf("PutEvents: %v, %d failed", err, out.FailedEntryCount)
				}
			default: // once through each service
				if _, err := sn.Publish(ctx, &sns.PublishInput{TopicArn: topic.TopicArn, Message: aws.String(body)}); err != nil {
					t.Fatal(err)
				}
				e.send(body)
			}
		}
	}
	// What SQS holds now is what AWS delivers: check the envelopes are there.
	recv, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queueURL), MaxNumberOfMessages: 10, VisibilityTimeout: 0})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range recv.Messages {
		var probe map[string]any
		_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &probe)
		switch {
		case probe["Type"] == "Notification":
			kinds["sns"]++
		case probe["detail-type"] != nil:
			kinds["eventbridge"]++
		default:
			kinds["raw"]++
		}
	}
	if kinds["sns"] == 0 || kinds["eventbridge"] == 0 {
		t.Fatalf("bodies received: %v; want SNS notifications and EventBridge events", kinds)
	}

	w := e.start("w1", workerOptions{extraEnv: []string{"IDEMPOTENCY_KEY_FROM=jmespath:payment_id"}})
	want := len(ps) * 2
	waitFor(t, 60*time.Second, fmt.Sprintf("%d deliveries completed or duplicate", want), func() bool {
		return w.outcomeCount("completed")+w.outcomeCount("duplicate") >= want && e.queueDepth(e.queueURL) == 0
	})
	e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	if n := w.outcomeCountWhere("completed", func(l logLine) bool { return l.Msg == "completed" }); n != len(ps) {
		t.Errorf("completed %d messages, want %d (one per payment)", n, len(ps))
	}
}
