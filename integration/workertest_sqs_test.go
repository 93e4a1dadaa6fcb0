package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/faultproxy"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
	"github.com/claimfirst/claimfirst/worker/workertest"
)

// The door contract (package workertest) run against the emulator over the
// wire: SQS long polling (sqsworker.New) here, the Lambda adapter
// (sqsworker.NewLambda) in workertest_lambda_test.go. Each scenario gets its
// own queue, dead-letter queue and claim table. The consumers run in this
// process, each behind a gate: a crash closes it, and from then on none of
// the consumer's calls (SQS, the claim store) goes out, as if its process
// had died; its handlers' effects are not counted (workertest). Their SQS
// requests pass through a fault proxy (internal/faultproxy), which loses
// acks and makes the broker outage; the producer's and the suite's reads
// go straight to the emulator.

// longPollVisibility is the queues' visibility timeout for the long-poll
// transport: short, so redeliveries come within seconds.
const longPollVisibility = 3 * time.Second

// longPollShutdown is the long-poll consumers' ShutdownTimeout.
const longPollShutdown = 2 * time.Second

func TestWorkertestSQS(t *testing.T) {
	awstest.Config(t) // skips without the emulator
	t.Parallel()
	workertest.RunAll(t, func(t workertest.T, o workertest.Options) workertest.Harness {
		return newLongPollDoor(t, o)
	})
}

// newLongPollDoor is the long-poll transport's harness.
func newLongPollDoor(t workertest.T, o workertest.Options) *door {
	d := newDoor(t, o, longPollVisibility)
	d.start = d.startLongPoll
	d.timing = workertest.Timing{
		Redelivery: longPollVisibility,
		Lease:      longPollVisibility - longPollVisibility/10, // the default margin
		Shutdown:   longPollShutdown,
	}
	return d
}

// door is the SQS side of a workertest harness: a queue with a dead-letter
// queue (maxReceiveCount 10), a claim table, a fault proxy for the
// consumers' SQS requests, and what the consumers received and acked.
type door struct {
	t        workertest.T
	sqs      *sqs.Client // straight to the emulator
	proxied  *sqs.Client // through the proxy
	queueURL string
	dlqURL   string
	queueARN string
	fifo     bool
	store    *dynamo.Store
	proxy    *faultproxy.Proxy
	lose     *faultproxy.Rule
	outage   *faultproxy.Rule
	timing   workertest.Timing
	absent   map[workertest.Capability]string
	start    func(ctx context.Context, p worker.Protocol) (workertest.Consumer, error)
	seq      atomic.Int64

	mu       sync.Mutex
	received map[string]string // receipt handle -> body
	deadSent map[string]int    // bodies a consumer sent to the dead-letter queue, not yet deleted from the source
	acked    []string
	dead     []workertest.DeadLetter
}

var _ workertest.Harness = (*door)(nil)

// emulatorConfig is the SDK configuration for the emulator; the test
// skipped already when there is none.
func emulatorConfig(t workertest.T) aws.Config {
	t.Helper()
	if os.Getenv("AWS_ENDPOINT_URL") == "" {
		t.Fatalf("AWS_ENDPOINT_URL is not set: run under emulator/with-emulator.sh")
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

func newDoor(t workertest.T, o workertest.Options, visibility time.Duration) *door {
	t.Helper()
	cfg := emulatorConfig(t)
	ctx := context.Background()
	d := &door{t: t, sqs: sqs.NewFromConfig(cfg), fifo: o.Ordered, received: map[string]string{}, deadSent: map[string]int{}, absent: map[workertest.Capability]string{}}
	px, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL"), uint64(len(t.Name())))
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = px.Close() })
	d.proxy = px
	d.proxied = sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(px.URL) })
	d.lose = px.Add(&faultproxy.Rule{Name: "lost ack", Match: faultproxy.Target("DeleteMessageBatch", "DeleteMessage"),
		Fault: faultproxy.AWSError(500, "InternalError", "injected: the ack is lost")})
	d.lose.Off()
	d.outage = px.Add(&faultproxy.Rule{Name: "broker outage", Match: faultproxy.TargetPrefix("AmazonSQS."),
		Fault: faultproxy.AWSError(503, "ServiceUnavailable", "injected: broker outage")})
	d.outage.Off()

	suffix := ""
	dlqAttrs := map[string]string{"MessageRetentionPeriod": "1209600"}
	if d.fifo {
		suffix = ".fifo"
		dlqAttrs["FifoQueue"] = "true"
	}
	dlq, err := d.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("door-dlq") + suffix), Attributes: dlqAttrs})
	if err != nil {
		t.Fatalf("create dead-letter queue: %v", err)
	}
	d.dlqURL = aws.ToString(dlq.QueueUrl)
	arn, err := d.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("dead-letter queue ARN: %v", err)
	}
	attrs := map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(visibility.Seconds())),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"10"}`, arn.Attributes["QueueArn"]),
	}
	if d.fifo {
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = "true"
	}
	q, err := d.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("door") + suffix), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	d.queueURL = aws.ToString(q.QueueUrl)
	qarn, err := d.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("queue ARN: %v", err)
	}
	d.queueARN = qarn.Attributes["QueueArn"]

	ddb := dynamodb.NewFromConfig(cfg)
	table := awstest.Name("door-claims")
	if err := dynamo.CreateTable(ctx, ddb, dynamo.TableSpec{Name: table}); err != nil {
		t.Fatalf("create claim table: %v", err)
	}
	if d.store, err = dynamo.New(dynamo.Config{Client: ddb, Table: table}); err != nil {
		t.Fatalf("claim store: %v", err)
	}
	return d
}

func (d *door) Timing() workertest.Timing { return d.timing }

func (d *door) Absent(c workertest.Capability) string {
	if c == workertest.Ordered && !d.fifo {
		return "" // the scenario asks for an ordered harness through Options
	}
	return d.absent[c]
}

func (d *door) Store() claimstore.Store { return d.store }

func (d *door) Send(ctx context.Context, m workertest.Message) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(d.queueURL), MessageBody: aws.String(m.Body)}
	if d.fifo {
		if m.Group == "" {
			return errors.New("door: a FIFO queue needs a group")
		}
		in.MessageGroupId = aws.String(m.Group)
		in.MessageDeduplicationId = aws.String(strconv.FormatInt(d.seq.Add(1), 10))
	}
	_, err := d.sqs.SendMessage(ctx, in)
	return err
}

func (d *door) Start(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	p.MinRetryBackoff = 200 * time.Millisecond
	p.MaxRetryBackoff = 2 * time.Second
	p.OutageCover = 20 * time.Second
	return d.start(ctx, p)
}

func (d *door) Acked(context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.acked...), nil
}

func (d *door) DeadLetters(ctx context.Context) ([]workertest.DeadLetter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		out, err := d.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(d.dlqURL), MaxNumberOfMessages: 10, VisibilityTimeout: 3600,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			return append([]workertest.DeadLetter(nil), d.dead...), nil
		}
		for _, m := range out.Messages {
			dl := workertest.DeadLetter{Body: aws.ToString(m.Body)}
			if r, ok := m.MessageAttributes[worker.ReasonAttribute]; ok {
				dl.Reason = aws.ToString(r.StringValue)
			}
			d.dead = append(d.dead, dl)
		}
	}
}

func (d *door) Unsettled(ctx context.Context) (int, error) {
	out, err := d.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(d.queueURL), AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n, nil
}

// Redeliver makes every receipt handed out visible again; the handles of
// messages deleted since fail, which is fine.
func (d *door) Redeliver(ctx context.Context) error {
	d.mu.Lock()
	handles := make([]string, 0, len(d.received))
	for h := range d.received {
		handles = append(handles, h)
	}
	d.mu.Unlock()
	for _, h := range handles {
		_, _ = d.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(d.queueURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0,
		})
	}
	return nil
}

func (d *door) LoseAcks(on bool) (int, error) {
	if on {
		d.lose.On()
	} else {
		d.lose.Off()
	}
	return int(d.lose.Injected()), nil
}

func (d *door) BrokerOutage(on bool) error {
	if on {
		d.outage.On()
	} else {
		d.outage.Off()
	}
	return nil
}

// errDead is what a dead consumer's calls return.
var errDead = errors.New("door: the consumer's process is dead")

// gate is one consumer process: alive until it crashes.
type gate struct {
	dead     atomic.Bool
	crashAck atomic.Bool
}

func (g *gate) crash() { g.dead.Store(true) }

// consumerSQS is a consumer's SQS client: the proxied client behind its
// gate, recording what it received and what its acks settled.
type consumerSQS struct {
	d *door
	g *gate
	// ackCrashes makes a DeleteMessageBatch of an armed gate crash it
	// (the long-poll transport's ack); the Lambda's acks are the event
	// source mapping's.
	ackCrashes bool
}

var _ sqsworker.SQSAPI = consumerSQS{}

func (c consumerSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if c.g.dead.Load() {
		return nil, errDead
	}
	out, err := c.d.proxied.ReceiveMessage(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	if c.g.dead.Load() {
		return nil, errDead // the answer reached a dead process: the messages come back when their visibility ends
	}
	c.d.mu.Lock()
	for _, m := range out.Messages {
		c.d.received[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
	}
	c.d.mu.Unlock()
	return out, nil
}

func (c consumerSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if c.ackCrashes && c.g.crashAck.Load() {
		c.g.crash()
	}
	if c.g.dead.Load() {
		return nil, errDead
	}
	out, err := c.d.proxied.DeleteMessageBatch(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	handles := map[string]string{}
	for _, e := range in.Entries {
		handles[aws.ToString(e.Id)] = aws.ToString(e.ReceiptHandle)
	}
	c.d.mu.Lock()
	for _, ok := range out.Successful {
		h := handles[aws.ToString(ok.Id)]
		body := c.d.received[h]
		delete(c.d.received, h)
		if c.d.deadSent[body] > 0 { // the delete that ends a dead-lettering is no ack
			c.d.deadSent[body]--
			continue
		}
		c.d.acked = append(c.d.acked, body)
	}
	c.d.mu.Unlock()
	return out, nil
}

func (c consumerSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if c.g.dead.Load() {
		return nil, errDead
	}
	return c.d.proxied.ChangeMessageVisibility(ctx, in, opts...)
}

func (c consumerSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if c.g.dead.Load() {
		return nil, errDead
	}
	return c.d.proxied.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

func (c consumerSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if c.g.dead.Load() {
		return nil, errDead
	}
	out, err := c.d.proxied.SendMessage(ctx, in, opts...)
	if err == nil && path.Base(aws.ToString(in.QueueUrl)) == path.Base(c.d.dlqURL) { // the URL the worker derives from the redrive policy's ARN
		c.d.mu.Lock()
		c.d.deadSent[aws.ToString(in.MessageBody)]++
		c.d.mu.Unlock()
	}
	return out, err
}

func (c consumerSQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if c.g.dead.Load() {
		return nil, errDead
	}
	return c.d.proxied.GetQueueAttributes(ctx, in, opts...)
}

func (c consumerSQS) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) { //nolint:revive // the SDK's name
	if c.g.dead.Load() {
		return nil, errDead
	}
	return c.d.proxied.GetQueueUrl(ctx, in, opts...)
}

// gatedStore is a consumer's claim store behind its gate.
type gatedStore struct {
	claimstore.Store
	g *gate
}

func (s gatedStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if s.g.dead.Load() {
		return claimstore.Acquisition{}, errDead
	}
	return s.Store.Acquire(ctx, p)
}

func (s gatedStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if s.g.dead.Load() {
		return errDead
	}
	return s.Store.Renew(ctx, p)
}

func (s gatedStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if s.g.dead.Load() {
		return errDead
	}
	return s.Store.Complete(ctx, p)
}

func (s gatedStore) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if s.g.dead.Load() {
		return errDead
	}
	return s.Store.Release(ctx, p)
}

// longPoll is a long-polling sqsworker.Worker run by the harness.
type longPoll struct {
	g      *gate
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (d *door) startLongPoll(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	g := &gate{}
	p.Store = gatedStore{Store: p.Store, g: g}
	w, err := sqsworker.New(ctx, sqsworker.Config{
		Protocol: p, QueueURL: d.queueURL, SQS: consumerSQS{d: d, g: g, ackCrashes: true},
		Concurrency: 4, WaitTime: time.Second, ShutdownTimeout: longPollShutdown,
		MaxHoldBackoff: 500 * time.Millisecond, ProbeInterval: 500 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lp := &longPoll{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { lp.done <- w.Run(rctx) }()
	d.t.Cleanup(func() { g.crash(); _ = lp.Stop(context.Background()) })
	return lp, nil
}

func (lp *longPoll) Stop(ctx context.Context) error {
	lp.cancel()
	lp.once.Do(func() {
		select {
		case lp.err = <-lp.done:
		case <-ctx.Done():
			lp.err = ctx.Err()
		}
	})
	return lp.err
}

func (lp *longPoll) Crash() {
	lp.g.crash()
	lp.cancel()
}

func (lp *longPoll) CrashAtAck() { lp.g.crashAck.Store(true) }

func (lp *longPoll) Dead() bool { return lp.g.dead.Load() }
