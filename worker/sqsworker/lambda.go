package sqsworker

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
)

// LambdaConfig configures a Lambda: the same protocol as Worker, for SQS
// events delivered by a Lambda event source mapping.
type LambdaConfig struct {
	// Protocol is the per-message protocol's settings, as for Worker: its
	// fields are LambdaConfig's too.
	worker.Protocol
	// SQS, with QueueURL, lets the function move poison records to the
	// queue's dead-letter queue at once and set a retried or deferred
	// record's visibility; without them those records are reported as batch
	// item failures and SQS's redrive policy moves poison ones eventually.
	// Defaults to nil.
	SQS SQSAPI
	// QueueURL is the event source queue. Defaults to "".
	QueueURL string
	// Concurrency is how many records of a batch are processed at once.
	// Defaults to 10.
	Concurrency int
	// LeaseMargin is how long before the invocation's deadline the claims'
	// leases end. Defaults to 2s.
	LeaseMargin time.Duration
	// EMF receives the outcome counts after each invocation, as one line
	// of CloudWatch Embedded Metric Format (namespace EMFNamespace; see
	// docs/runbook.md). Defaults to os.Stdout, which Lambda sends to
	// CloudWatch Logs; io.Discard writes none.
	EMF io.Writer
	// ClockSkewMax is the largest offset of this process's clock from AWS's
	// at which records are claimed, as for Worker: beyond it every record
	// of a batch is reported back unclaimed with a short visibility. The
	// offset is measured from the Date of SQS's answers, so the check needs
	// SQS and QueueURL (without them there is none). It must be less than
	// LeaseMargin. Negative: no check. Defaults to half of LeaseMargin.
	ClockSkewMax time.Duration
}

// DefaultLambdaConcurrency is LambdaConfig.Concurrency's default.
const DefaultLambdaConcurrency = 10

// Lambda handles SQS events with partial batch failures.
type Lambda struct {
	cfg   LambdaConfig
	queue QueueInfo
	proc  *worker.Engine
	skew  *worker.ClockCheck // nil: no clock check (no QueueURL)
	log   *slog.Logger
	emf   *emf
}

// NewLambda checks cfg and, when QueueURL is set, reads the queue's
// retention and dead-letter queue. Errors for bad settings wrap worker.ErrConfig.
func NewLambda(ctx context.Context, cfg LambdaConfig) (*Lambda, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultLambdaConcurrency
	}
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = 2 * time.Second
	}
	if cfg.ClockSkewMax == 0 {
		cfg.ClockSkewMax = cfg.LeaseMargin / 2
	}
	cfg.SetDefaults()
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, &setting.Error{Field: "Store", Problem: "is required"})
	}
	if cfg.Handler == nil {
		errs = append(errs, &setting.Error{Field: "Handler", Problem: "is required"})
	}
	if cfg.Concurrency < 1 || cfg.Concurrency > worker.MaxConcurrency {
		errs = append(errs, fieldErr("Concurrency", cfg.Concurrency, "must be 1 to %d", worker.MaxConcurrency))
	}
	if cfg.QueueURL != "" && cfg.SQS == nil {
		errs = append(errs, &setting.Error{Field: "SQS", Problem: "is required with QueueURL"})
	}
	if cfg.QueueURL == "" && cfg.Retention <= 0 {
		errs = append(errs, &setting.Error{Field: "Retention", Problem: "is required when QueueURL is not set (it cannot be checked against the queue)"})
	}
	if cfg.ClockSkewMax >= cfg.LeaseMargin {
		errs = append(errs, fieldErr("ClockSkewMax", cfg.ClockSkewMax, "must be less than LeaseMargin %s, which covers it", cfg.LeaseMargin))
	}
	errs = append(errs, cfg.SettingErrors()...)
	if err := setting.Join(errs...); err != nil {
		return nil, err
	}
	if err := worker.CheckStore(ctx, cfg.Store); err != nil {
		return nil, err
	}
	l := &Lambda{cfg: cfg, log: cfg.Logger}
	var skew *worker.ClockCheck
	if cfg.QueueURL != "" {
		skew = worker.NewClockCheck(cfg.ClockSkewMax, cfg.Now, cfg.Metrics, cfg.Logger.With(slog.String("queue_url", cfg.QueueURL)))
		cfg.SQS = measureSQS(skew, cfg.Now, cfg.SQS)
		q, err := queue.Read(ctx, cfg.SQS, cfg.QueueURL)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		if cfg.Retention == 0 {
			cfg.Retention = DefaultRetention(q)
		}
		// A record is claimed within its invocation, which lasts at most
		// Lambda's longest timeout.
		if err := checkRetention(cfg.Retention, q, lambdaClockBound(cfg.ClockSkewMax, cfg.LeaseMargin), lambdaMaxTimeout); err != nil {
			return nil, err
		}
		l.queue = q
		l.log = l.log.With(slog.String("queue_url", cfg.QueueURL))
	}
	l.cfg = cfg
	p := cfg.Protocol
	p.Logger = l.log
	proc, err := worker.NewEngine(p, worker.EngineOptions{
		System: sqsSystem, MaxAttempts: l.queue.MaxReceiveCount, MaxDelay: MaxVisibility - time.Second, Clock: skew,
	})
	if err != nil {
		return nil, err
	}
	l.proc, l.skew = proc, skew
	l.emf = newLambdaEMF(cfg.EMF, cfg.Metrics, cfg.Now)
	return l, nil
}

// Handle processes a batch: records run concurrently through the same
// per-message protocol as Worker, each claim's lease ending at the
// invocation's deadline. Records that are done (completed, duplicates,
// dead-lettered) are left out of the response, so Lambda deletes them; the
// others (held elsewhere, failed, lease lost, poison without a dead-letter
// queue) are reported as batch item failures and SQS redelivers them. From
// a FIFO queue, a message group's records run one at a time in order, groups
// concurrently; after a record of a group that is not done, the group's
// later records are reported too, without being processed (see the package
// documentation).
// Before it returns, the batch's outcome counts are written to
// LambdaConfig.EMF as one CloudWatch Embedded Metric Format line.
func (l *Lambda) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = l.cfg.Now().Add(15 * time.Minute) // Lambda's longest invocation
	}
	defer l.writeMetrics()
	l.remeasure(ctx)
	var (
		mu     sync.Mutex
		failed []events.SQSBatchItemFailure
	)
	fail := func(rs ...*events.SQSMessage) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			failed = append(failed, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
		}
	}
	// FIFO: a group's records one at a time, in order (see fifo.go).
	fifo := fifoEvent(ev) || l.queue.FIFO
	runs := groupRuns(len(ev.Records), fifo, func(i int) string { return ev.Records[i].Attributes[groupAttribute] })
	causes := make([]worker.Action, len(ev.Records))
	runGroups(runs, l.cfg.Concurrency, func(i int) bool {
		r := &ev.Records[i]
		done, act := l.record(ctx, r, deadline, fifo)
		if !done {
			causes[i] = act
			fail(r)
		}
		return done
	}, func(stopped int, rest []int) {
		rs := make([]*events.SQSMessage, len(rest))
		for k, i := range rest {
			rs[k] = &ev.Records[i]
		}
		l.reportRest(ctx, &ev.Records[stopped], rs, blockCause(causes[stopped]))
		fail(rs...)
	})
	return events.SQSEventResponse{BatchItemFailures: failed}, nil
}

// skewMeasureEvery is how old the last clock measurement may be when a batch
// arrives before the function measures again (one GetQueueAttributes).
const skewMeasureEvery = 10 * time.Second

// remeasure measures the clock's offset from an SQS answer when the last
// measurement is older than skewMeasureEvery (or the clock was found
// skewed): a batch is claimed only by a clock found in agreement.
func (l *Lambda) remeasure(ctx context.Context) {
	if l.skew == nil || !l.skew.Skewed() && !l.skew.Stale(skewMeasureEvery) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := l.cfg.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(l.cfg.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		l.log.Debug("measuring the clock offset failed", slog.Any("error", err))
	}
}

// Queue returns what the Lambda read about its event source queue: zero
// without a QueueURL.
func (l *Lambda) Queue() QueueInfo { return l.queue }

// record processes one record and reports whether it is done, and what was
// decided for it.
func (l *Lambda) record(ctx context.Context, r *events.SQSMessage, deadline time.Time, fifo bool) (bool, worker.Action) {
	var attrs map[string]string
	if len(r.MessageAttributes) > 0 {
		attrs = make(map[string]string, len(r.MessageAttributes))
		for k, v := range r.MessageAttributes {
			if v.StringValue != nil {
				attrs[k] = *v.StringValue
			}
		}
	}
	m := sqsMessage(r.MessageId, r.Body, attrs, r.Attributes, r)
	until := deadline.Add(-l.cfg.LeaseMargin)
	hctx := withTraceHeader(l.proc, ctx, r.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)])
	disp := l.proc.Process(hctx, &m, worker.Hold{Until: until, Deadline: until, Ordered: fifo})
	log := l.log.With(slog.String("message_id", r.MessageId))
	if m.Key != "" {
		log = log.With(slog.String("idempotency_key", m.Key))
	}
	return disp.Settle(lambdaRecord{ctx: ctx, l: l, r: r, log: log}), disp.Action
}

// lambdaRecord carries out a record's disposition: the event source
// mapping deletes what the function does not report, and the function sets
// a reported record's visibility and dead-letters where it knows its queue.
type lambdaRecord struct {
	ctx context.Context
	l   *Lambda
	r   *events.SQSMessage
	log *slog.Logger
}

func (lr lambdaRecord) Ack() {}

func (lr lambdaRecord) ReturnAfter(delay time.Duration) {
	l := lr.l
	if l.cfg.SQS == nil || l.cfg.QueueURL == "" {
		return // reported: it comes back when its visibility ends
	}
	if err := changeVisibility(context.WithoutCancel(lr.ctx), l.cfg.SQS, l.cfg.QueueURL, lr.r.ReceiptHandle, delay); err != nil {
		lr.log.Warn("change visibility failed", slog.Any("error", err))
	}
}

func (lr lambdaRecord) DeadLetter(reason string) bool {
	l, r := lr.l, lr.r
	dl := deadLetter{
		body: aws.String(r.Body), attrs: lambdaAttributes(r.MessageAttributes), messageID: r.MessageId,
		firstRecv: r.Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], reason: reason,
		secret: l.cfg.OriginalIDSecret,
	}
	if l.queue.DeadLetterFIFO {
		dl.groupID = cmp.Or(r.Attributes[groupAttribute], r.MessageId)
	}
	return dl.send(context.WithoutCancel(lr.ctx), l.cfg.SQS, l.queue.DeadLetterURL, l.cfg.Metrics, lr.log)
}

func lambdaAttributes(in map[string]events.SQSMessageAttribute) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(in))
	for k, v := range in {
		if v.StringValue != nil || v.BinaryValue != nil {
			out[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	return out
}

// lambdaMaxTimeout is Lambda's longest function timeout: no record of an
// invocation is claimed later than that after it was received.
const lambdaMaxTimeout = 15 * time.Minute

// lambdaClockBound is the Lambda adapter's clock bound: ClockSkewMax, or
// with the check off, the lease margin, which the protocol assumes covers it.
func lambdaClockBound(skewMax, margin time.Duration) time.Duration {
	if skewMax > 0 {
		return skewMax
	}
	return margin
}
