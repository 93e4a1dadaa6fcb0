package sqsworker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/origin"

	"github.com/claimfirst/claimfirst/worker"
)

// Worker is the long-polling SQS consumer.
type Worker struct {
	cfg   Config
	queue QueueInfo
	proc  *worker.Engine
	skew  *worker.ClockCheck // nil: no clock check
	log   *slog.Logger
	ready chan struct{}
	stop  chan struct{} // closed when Run's context ends: held messages go back

	inFlight sync.Map // message id -> struct{}: handlers running, named if shutdown abandons them
}

// New checks cfg, reads the queue's attributes (visibility timeout,
// retention, redrive policy) and fills the defaults that derive from them.
// A bad configuration, including a claim retention below MinRetention,
// is an error wrapping worker.ErrConfig.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := worker.CheckStore(ctx, cfg.Store); err != nil {
		return nil, err
	}
	q, err := queue.Read(ctx, cfg.SQS, cfg.QueueURL)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	explicitRetention := cfg.Retention != 0
	cfg.setQueueDefaults(q)
	if err := cfg.validateLease(); err != nil {
		return nil, err
	}
	if err := checkRetention(cfg.Retention, q, cfg.clockBound(), cfg.holdBeforeClaim(q)); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(slog.String("queue_url", cfg.QueueURL), slog.String("owner", cfg.Owner))
	if explicitRetention && cfg.Retention < q.Retention+q.DeadLetterRetention {
		log.Warn("claim retention is shorter than queue plus dead-letter retention: a redriven message may be processed again",
			slog.String("retention", cfg.Retention.String()), slog.String("queue_retention", q.Retention.String()),
			slog.String("dead_letter_retention", q.DeadLetterRetention.String()))
	}
	if q.DeadLetterURL == "" {
		log.Warn("queue has no redrive policy: poison messages cannot be dead-lettered and will be left on the queue")
	}
	skew := worker.NewClockCheck(cfg.ClockSkewMax, cfg.Now, cfg.Metrics, log)
	cfg.SQS = measureSQS(skew, cfg.Now, cfg.SQS)
	p := cfg.Protocol
	p.Logger = log
	proc, err := worker.NewEngine(p, worker.EngineOptions{
		System: sqsSystem, MaxAttempts: q.MaxReceiveCount, MaxDelay: MaxVisibility - time.Second,
		MaxHoldBackoff: cfg.MaxHoldBackoff, BreakerThreshold: cfg.BreakerThreshold, Clock: skew,
	})
	if err != nil {
		return nil, err
	}
	if q.MaxReceiveCount > 0 && proc.RetryCovers() < cfg.OutageCover {
		log.Warn("the queue's receives cannot outlast the outage cover: a long outage may move valid messages to the dead-letter queue",
			slog.Int("max_receive_count", q.MaxReceiveCount), slog.String("covers", proc.RetryCovers().String()),
			slog.String("outage_cover", cfg.OutageCover.String()))
	}
	warnFIFOReceives(q, log)
	w := &Worker{
		cfg:   cfg,
		queue: q,
		log:   log,
		ready: make(chan struct{}),
		stop:  make(chan struct{}),
		proc:  proc,
		skew:  skew,
	}
	w.remeasure(ctx) // before the first receive: a long poll bounds the offset only loosely
	return w, nil
}

// remeasure makes a short SQS call, whose answer's Date the clock check
// measures. A failure is left to the receives to report.
func (w *Worker) remeasure(ctx context.Context) {
	if w.skew == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.cfg.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(w.cfg.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil && ctx.Err() == nil {
		w.log.Debug("measuring the clock offset failed", slog.Any("error", err))
	}
}

// Health returns nil while the worker receives normally, and an error
// naming the dependency and its last failure while the breaker is open
// (pollers then receive one probe message at a time), or while this clock
// is off AWS's by more than ClockSkewMax (the worker then claims nothing).
// /readyz reports it.
func (w *Worker) Health() error { return w.proc.Health() }

// Queue returns what the worker read about its queue.
func (w *Worker) Queue() QueueInfo { return w.queue }

// Config returns the worker's configuration with every default filled in.
func (w *Worker) Config() Config { return w.cfg }

// Ready is closed once Run is polling.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Run polls the queue and processes messages until ctx ends. Then it stops
// receiving at once (a long poll in progress is cut short), returns messages
// it has not started to the queue, and waits for in-flight messages; all
// within ShutdownTimeout of ctx's end, whatever the handlers do. Handlers
// still running when all but shutdownReserve of it has passed have their
// contexts cancelled (their claims are released and their messages made
// visible again). Run returns nil after a clean drain, and an error wrapping
// worker.ErrShutdownTimeout when handlers had not returned by the end of
// ShutdownTimeout. Such a handler runs on in the process: its claim is
// renewed and its message's visibility extended until it returns (or the
// process exits), so no other worker runs its key alongside it; then its
// claim is completed or released as usual, and its message, not acked
// (Run has returned), comes back and is acked as a duplicate or retried.
// Run may be called once per Worker.
func (w *Worker) Run(ctx context.Context) error {
	// Handlers outlive ctx by up to ShutdownTimeout.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	del := newDeleter(w.cfg.SQS, w.cfg.QueueURL, w.cfg.DeleteDelay, w.cfg.Metrics, w.log)
	delDone := make(chan struct{})
	go func() { defer close(delDone); del.run() }()

	// A message holds a slot from its receive to its end, so every message
	// received has a handler at once and none waits while its visibility
	// runs out. A poller receives only when a batch's worth of slots is free:
	// fewer idles a few handlers for a moment, but it keeps receives full
	// (half of Concurrency, up to ten) instead of one message each.
	t := &transport{w: w, hctx: hctx, del: del, probe: make(chan struct{}, 1),
		pool: &pool{slots: make(chan struct{}, w.cfg.Concurrency)}, batch: min(receiveBatch, max(1, w.cfg.Concurrency/2))}
	var pollers sync.WaitGroup
	for range w.cfg.Pollers {
		pollers.Go(func() { t.poll(ctx) })
	}
	close(w.ready)
	w.log.Info("worker started", slog.Int("concurrency", w.cfg.Concurrency), slog.Int("pollers", w.cfg.Pollers),
		slog.String("visibility_timeout", w.cfg.VisibilityTimeout.String()), slog.String("retention", w.cfg.Retention.String()),
		slog.String("clock_skew_max", w.cfg.ClockSkewMax.String()),
		slog.String("dead_letter_url", w.queue.DeadLetterURL))

	<-ctx.Done()
	// The whole shutdown, pollers included, runs on one budget that starts now.
	deadline := time.NewTimer(w.cfg.ShutdownTimeout)
	defer deadline.Stop()
	cancelAt := time.NewTimer(w.cfg.ShutdownTimeout - shutdownReserve(w.cfg.ShutdownTimeout))
	defer cancelAt.Stop()
	w.log.Info("stopping: no new messages; waiting for in-flight messages", slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
	close(w.stop)
	drained := make(chan struct{})
	go func() {
		pollers.Wait() // no handler starts after this
		t.handlers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-cancelAt.C:
		// Cancelled handlers release their claims and their messages are
		// made visible again: nothing is lost, only retried.
		w.log.Warn("shutdown timeout near: cancelling in-flight handlers", slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
		cancelHandlers()
		select {
		case <-drained:
		case <-deadline.C:
			// A handler that ignores its context: its claim ends with its
			// lease and its message comes back when its visibility ends.
			// The deleter is closed all the same: it sends the acks it
			// holds, and drops the abandoned handler's late one.
			w.abandon()
			del.close()
			return fmt.Errorf("%w (%s)", worker.ErrShutdownTimeout, w.cfg.ShutdownTimeout)
		}
	}
	del.close()
	select {
	case <-delDone:
	case <-deadline.C:
		w.log.Error("shutdown timeout: acks not sent; those messages come back and are acked as duplicates")
		return fmt.Errorf("%w (%s): sending acks", worker.ErrShutdownTimeout, w.cfg.ShutdownTimeout)
	}
	w.log.Info("worker stopped")
	return nil
}

// abandon logs each message whose handler is still running after the
// shutdown timeout, cancelled and ignoring it: Run returns without it. Its
// claim and visibility are still renewed until it returns (once.Claim.Hold
// renews past its context's end), or until the process exits; then they
// end by themselves, and the message is retried or acked as a duplicate
// (its handler's late outcome is not acked: the deleter is closed).
func (w *Worker) abandon() {
	n := 0
	w.inFlight.Range(func(id, _ any) bool {
		n++
		w.log.Error("shutdown timeout: abandoning a handler that ignores its cancelled context; the message reappears when its visibility ends",
			slog.String("message_id", id.(string)))
		return true
	})
	w.log.Error("shutdown timeout: handlers still running; their messages come back when their visibility ends",
		slog.Int("abandoned", n), slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
}

// shutdownReserve is the part of the shutdown timeout kept for cancelled
// handlers to release their claims and return their messages: a quarter of
// it, at most 5s.
func shutdownReserve(timeout time.Duration) time.Duration {
	return min(timeout/4, 5*time.Second)
}

// receiveBatch is SQS's largest receive.
const receiveBatch = 10

// pool bounds the messages a worker holds.
type pool struct {
	mu    sync.Mutex // one poller at a time takes a whole batch of slots
	slots chan struct{}
}

// take blocks until n slots are free and takes them, or returns false when
// ctx ends first (having taken none).
func (p *pool) take(ctx context.Context, n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range n {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.give(i)
			return false
		}
	}
	return true
}

func (p *pool) give(n int) {
	for range n {
		<-p.slots
	}
}

// receiveSystemAttributes are the system attributes every receive asks for.
var receiveSystemAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
	types.MessageSystemAttributeNameMessageGroupId,
	types.MessageSystemAttributeNameAWSTraceHeader,
}

type sqsDelivery struct {
	msg        worker.Message
	receipt    string
	body       *string
	attrs      map[string]types.MessageAttributeValue
	firstRecv  string // SQS's ApproximateFirstReceiveTimestamp, epoch ms
	receivedAt time.Time
	probe      bool   // received while the breaker was open
	group      string // MessageGroupId, on FIFO (and fair) queues
	// traceHeader is SQS's AWSTraceHeader system attribute: an X-Ray
	// trace header, the parent of the message's span (withTraceHeader).
	traceHeader string
	// leaseFrom, when set, is when the lease was last extended while the
	// message waited behind others of its FIFO group.
	leaseFrom time.Time
}

// leaseStart is when the message's current visibility timeout began.
func (d *sqsDelivery) leaseStart() time.Time {
	if d.leaseFrom.After(d.receivedAt) {
		return d.leaseFrom
	}
	return d.receivedAt
}

func (w *Worker) delivery(m *types.Message, receivedAt time.Time) *sqsDelivery {
	firstRecv := m.Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)]
	return &sqsDelivery{
		msg:     sqsMessage(aws.ToString(m.MessageId), aws.ToString(m.Body), messageAttributes(m.MessageAttributes), m.Attributes, m),
		receipt: aws.ToString(m.ReceiptHandle), body: m.Body, attrs: m.MessageAttributes,
		firstRecv:   firstRecv,
		receivedAt:  receivedAt,
		group:       m.Attributes[groupAttribute],
		traceHeader: m.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)],
	}
}

// sqsSystem is SQS's messaging.system in the message spans.
const sqsSystem = "aws_sqs"

// sqsMessage is the worker.Message of an SQS delivery: its system attributes
// (sys) give its Attempt, FirstReceived and Redelivered; native is the
// SDK's or the Lambda event's record of it.
func sqsMessage(id, body string, attrs, sys map[string]string, native any) worker.Message {
	rc, _ := strconv.Atoi(sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	m := worker.Message{ID: id, Body: body, Attributes: attrs, Attempt: max(rc, 1), Redelivered: rc > 1, Native: native}
	if ms, err := strconv.ParseInt(sys[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64); err == nil && ms > 0 {
		m.FirstReceived = time.UnixMilli(ms)
	}
	return m
}

func (w *Worker) setVisibility(d *sqsDelivery, delay time.Duration, log *slog.Logger) {
	if err := changeVisibility(context.Background(), w.cfg.SQS, w.cfg.QueueURL, d.receipt, delay); err != nil {
		// The message becomes visible when its current timeout ends instead.
		log.Warn("change visibility failed", slog.Any("error", err))
	}
}

// changeVisibility makes a message visible again after delay (within SQS's limits).
func changeVisibility(ctx context.Context, api SQSAPI, queueURL, receipt string, delay time.Duration) error {
	secs := int32(min(max(delay, 0), MaxVisibility-time.Second).Round(time.Second) / time.Second)
	_, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receipt), VisibilityTimeout: secs,
	})
	return err
}

// deadLetter is a message on its way to the dead-letter queue.
type deadLetter struct {
	body      *string
	attrs     map[string]types.MessageAttributeValue
	messageID string
	firstRecv string // epoch milliseconds, as SQS gives it; may be empty
	reason    string
	// groupID is the message's MessageGroupId when the dead-letter queue is
	// a FIFO queue: the copy is sent in the same group, with a
	// deduplication id derived from messageID. Empty: a standard queue.
	groupID string
	// secret signs the copy's worker.OriginalIDAttribute (worker.Protocol.OriginalIDSecret); "": none is written.
	secret origin.Secret
}

// maxMessageAttributes is SQS's limit per message.
const maxMessageAttributes = 10

// maxMessageBytes is SQS's limit on a message's size: its body and each
// attribute's name, type and value.
const maxMessageBytes = 1 << 20

// attributes returns the attributes of the message's dead-letter copy:
// every attribute the message came with, and of the worker's own (the
// original message id, signed with the secret, the reason, the first
// receipt time, in that order) those there is room for within SQS's
// limits of ten attributes and 1 MiB with the body. The worker's own never
// displace the message's: a message with ten attributes gets none of them
// (its reason is in the log and the claim's last_error). An original id
// and first receipt time the message already carries (it was redriven)
// are kept when the id's MAC verifies, and replaced by the message's own
// when it does not (nobody else may choose them); a reason it carries is
// the last failure's, and is replaced. Without a secret no original id is
// written: nothing would believe it.
func (dl *deadLetter) attributes() (attrs map[string]types.MessageAttributeValue, omitted []string) {
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	body := aws.ToString(dl.body)
	_, signed := origin.Verify(dl.secret, aws.ToString(dl.attrs[worker.OriginalIDAttribute].StringValue),
		aws.ToString(dl.attrs[worker.FirstReceivedAttribute].StringValue), body)
	out := make(map[string]types.MessageAttributeValue, maxMessageAttributes)
	size := len(body)
	for k, v := range dl.attrs {
		if k == worker.ReasonAttribute || !signed && (k == worker.OriginalIDAttribute || k == worker.FirstReceivedAttribute) {
			continue
		}
		out[k] = v
		size += attributeBytes(k, v)
	}
	var own []string
	var values []types.MessageAttributeValue
	if !signed && dl.secret != "" && dl.messageID != "" {
		// Its value, signed over the first receipt time if that fits, is
		// made below; its length does not depend on what it covers.
		own = append(own, worker.OriginalIDAttribute)
		values = append(values, str(strings.Repeat("x", origin.SignedLen(len(dl.messageID)))))
	}
	own, values = append(own, worker.ReasonAttribute), append(values, str(truncate(dl.reason, 1024)))
	if !signed {
		if ms, err := strconv.ParseInt(dl.firstRecv, 10, 64); err == nil && ms > 0 {
			own = append(own, worker.FirstReceivedAttribute)
			values = append(values, str(time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)))
		}
	}
	for i, k := range own {
		n := attributeBytes(k, values[i])
		if len(out) == maxMessageAttributes || size+n > maxMessageBytes {
			omitted = append(omitted, k)
			continue
		}
		out[k] = values[i]
		size += n
	}
	if _, ok := out[worker.OriginalIDAttribute]; ok && !signed {
		out[worker.OriginalIDAttribute] = str(origin.Sign(dl.secret, dl.messageID, aws.ToString(out[worker.FirstReceivedAttribute].StringValue), body))
	}
	if len(out) == 0 {
		return nil, omitted
	}
	return out, omitted
}

// attributeBytes is what an attribute counts toward a message's size.
func attributeBytes(name string, v types.MessageAttributeValue) int {
	return len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
}

// send copies the message to the dead-letter queue with its reason
// attached and reports whether the source copy may be deleted. With no
// dead-letter queue it logs and keeps the message.
func (dl *deadLetter) send(ctx context.Context, api SQSAPI, dlqURL string, metrics *worker.Metrics, log *slog.Logger) bool {
	if dlqURL == "" {
		metrics.Record(log, slog.LevelError, worker.OutcomePoisonKept, "poison message kept on the queue: no dead-letter queue", slog.String("reason", dl.reason))
		return false
	}
	attrs, omitted := dl.attributes()
	if len(omitted) > 0 {
		// Without worker.OriginalIDAttribute a redriven copy gets a new id, so a
		// message-id key changes and the work can run again; without
		// worker.ReasonAttribute no -exclude-reason can hold it back.
		// `worker redrive` leaves such copies unless told otherwise.
		log.Error("dead-letter copy without some of the worker's attributes: the message's own fill SQS's limits; "+
			"without "+worker.OriginalIDAttribute+" a redrive gives it a new id, and a key taken from the message id changes",
			slog.Any("dropped", omitted), slog.String("reason", dl.reason))
		for _, a := range omitted {
			metrics.DroppedAttribute(a)
		}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(dlqURL), MessageBody: dl.body, MessageAttributes: attrs}
	if dl.groupID != "" {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(dl.groupID), aws.String(dedupID(dl.messageID))
	}
	_, err := api.SendMessage(ctx, in)
	if err != nil {
		// Not deleted: the message comes back and is dead-lettered again.
		metrics.Record(log, slog.LevelError, worker.OutcomeSendFailed, "dead-letter send failed; message left on the queue", slog.Any("error", err))
		return false
	}
	metrics.Record(log, slog.LevelInfo, worker.OutcomeDeadLettered, "dead-lettered", slog.String("reason", dl.reason))
	return true
}

// returnUnstarted makes a message the worker will not start visible again
// at once, for another consumer.
func (w *Worker) returnUnstarted(d *sqsDelivery) {
	log := w.log.With(slog.String("message_id", d.msg.ID))
	if err := changeVisibility(context.Background(), w.cfg.SQS, w.cfg.QueueURL, d.receipt, 0); err != nil {
		log.Warn("returning an unstarted message failed; it reappears when its visibility ends", slog.Any("error", err))
		return
	}
	w.cfg.Metrics.Record(log, slog.LevelInfo, worker.OutcomeReturned, "stopping: returned unstarted message to the queue")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// deleter batches acks into DeleteMessageBatch calls of up to ten, sending a
// batch when it is full or its oldest entry has waited DeleteDelay.
type deleter struct {
	api     SQSAPI
	url     *string
	delay   time.Duration
	metrics *worker.Metrics
	log     *slog.Logger
	in      chan string
	mu      sync.RWMutex // add holds it to read, close to write: no send on a closed in
	closed  bool
	sending chan struct{} // one token per batch being sent
	sent    sync.WaitGroup
}

// maxDeletesInFlight bounds the DeleteMessageBatch requests sent at once:
// one at a time would make every handler wait behind a slow answer (the
// acks of a busy worker queue up faster than one request clears them).
const maxDeletesInFlight = 4

func newDeleter(api SQSAPI, url string, delay time.Duration, m *worker.Metrics, log *slog.Logger) *deleter {
	return &deleter{
		api: api, url: aws.String(url), delay: delay, metrics: m, log: log,
		in: make(chan string, 64), sending: make(chan struct{}, maxDeletesInFlight),
	}
}

// add queues a receipt for deletion, and reports false if the deleter is
// closed (a handler abandoned at shutdown finished late).
func (d *deleter) add(receipt string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false
	}
	d.in <- receipt
	return true
}

func (d *deleter) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	close(d.in)
}

// run batches receipts by ten, or by what came within delay, and sends each
// batch in the background, up to maxDeletesInFlight at once. It returns
// when the input is closed and every batch has been sent.
func (d *deleter) run() {
	defer d.sent.Wait()
	batch := make([]string, 0, 10)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	send := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch = make([]string, 0, 10)
		d.sending <- struct{}{}
		d.sent.Go(func() {
			defer func() { <-d.sending }()
			d.flush(b)
		})
	}
	for {
		select {
		case r, ok := <-d.in:
			if !ok {
				send()
				return
			}
			batch = append(batch, r)
			if len(batch) == 1 {
				timer.Reset(d.delay)
			}
			if len(batch) == 10 {
				timer.Stop()
				send()
			}
		case <-timer.C:
			send()
		}
	}
}

func (d *deleter) flush(receipts []string) {
	if len(receipts) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(receipts))
	for i, r := range receipts {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r)}
	}
	d.metrics.DeleteBatch()
	out, err := d.api.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: d.url, Entries: entries})
	if err != nil {
		// The claims are completed: the redeliveries will be acked as duplicates.
		d.log.Warn("delete batch failed; the messages will come back as duplicates", slog.Int("messages", len(receipts)), slog.Any("error", err))
		return
	}
	for _, f := range out.Failed {
		d.log.Warn("delete failed; the message will come back as a duplicate",
			slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
	}
}
