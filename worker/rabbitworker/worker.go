package rabbitworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/worker"
)

// System names RabbitMQ in the message spans' messaging.system.
const System = "rabbitmq"

// The headers a dead letter the worker publishes carries, beside the
// original message's own.
const (
	// ReasonHeader is why the message was dead-lettered (the SQS
	// transport's worker.ReasonAttribute).
	ReasonHeader = worker.ReasonAttribute
	// AttemptHeader is the delivery that dead-lettered it (Message.Attempt).
	AttemptHeader = "DeadLetterAttempt"
	// KeyHeader is the idempotency key the decoder chose, if any.
	KeyHeader = "DeadLetterKey"
)

// The headers a message going through the delay queue carries.
const (
	// AttemptsHeader is how many deliveries of the message were spent
	// before it went through the delay queue: the broker counts the
	// deliveries of what comes back from it from zero, so Attempt is this
	// plus the broker's count plus one, and the worker dead-letters it
	// itself (reason ReasonDeliveryLimit) once that passes DeliveryLimit.
	AttemptsHeader = "x-claimfirst-attempts"
	// NotBeforeHeader is when the message is due (Unix milliseconds): a
	// delivery before then is not processed; it waits out the rest, or
	// takes another hop through the delay queue.
	NotBeforeHeader = "x-claimfirst-not-before"
	// publishHeader matches a returned publish to its publish.
	publishHeader = "x-claimfirst-publish"
)

// ReasonDeliveryLimit is the reason of a message the worker dead-letters
// because its attempts, counted across the delay queue, passed
// DeliveryLimit: the broker's own reason for the same (x-first-death-reason).
const ReasonDeliveryLimit = "delivery_limit"

// ErrQueueGone is what Run returns when the broker cancelled the consumer
// and the queue no longer exists.
var ErrQueueGone = errors.New("rabbitworker: the queue no longer exists")

// Worker consumes one queue and runs the worker protocol on each delivery.
type Worker struct {
	cfg    Config
	engine *worker.Engine
	log    *slog.Logger

	incs atomic.Uint64 // incarnations begun
	// deliveries counts the deliveries received, for the tests.
	deliveries atomic.Int64
	health     atomic.Pointer[error]
	stop       chan struct{} // closed when Run stops receiving
	hctx       context.Context
	wg         sync.WaitGroup
	// tagReuse, for the transport's own tests only, acks a delivery on the
	// connection of the moment rather than its own (what a client that
	// recovers a connection under the caller does): the fault the
	// incarnations exist to prevent.
	tagReuse bool
	current  atomic.Pointer[incarnation]
}

// New checks cfg, connects once to check that the queue exists (and says
// at start when it is not a quorum queue declared by Setup), and returns the
// worker. Errors for bad settings wrap worker.ErrConfig.
func New(_ context.Context, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(slog.String("queue", cfg.Queue))
	limit := cfg.DeliveryLimit
	engine, err := worker.NewEngine(cfg.Protocol, worker.EngineOptions{
		System: System, MaxAttempts: limit, // no MaxDelay: a long one goes through the delay queue
		MaxHoldBackoff: cfg.MaxHoldBackoff, BreakerThreshold: max(cfg.BreakerThreshold, 0),
	})
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, engine: engine, log: log, stop: make(chan struct{})}
	w.setHealth(errors.New("not connected yet"))
	conn, err := w.dial()
	if err != nil {
		return nil, fmt.Errorf("rabbitworker: connect to %s: %w", redact(cfg.URL), err)
	}
	defer func() { _ = conn.Close() }()
	if err := checkQueue(conn, cfg, log); err != nil {
		return nil, err
	}
	return w, nil
}

// Health returns nil while the worker is connected and its engine claims
// normally, else why not (the readiness probe's answer).
func (w *Worker) Health() error {
	if p := w.health.Load(); p != nil && *p != nil {
		return *p
	}
	return w.engine.Health()
}

func (w *Worker) setHealth(err error) { w.health.Store(&err) }

func (w *Worker) dial() (*amqp.Connection, error) {
	return amqp.DialConfig(w.cfg.URL, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial:      amqp.DefaultDial(w.cfg.DialTimeout),
		Properties: amqp.Table{
			"connection_name": "claimfirst-worker " + w.cfg.Owner,
		},
	})
}

// incarnation is one connection and its channels: every delivery
// remembers the incarnation it came on, and is acked, rejected or
// dead-lettered there or not at all. Delivery tags are per channel: one
// that reached another channel would settle another message.
type incarnation struct {
	n    uint64
	conn *amqp.Connection
	ch   *amqp.Channel // consume, ack
	pub  *amqp.Channel // dead letters and delays, in confirm mode
	// pubMu serializes publishes, so that a return is matched to its
	// publish.
	pubMu   sync.Mutex
	returns chan amqp.Return
	closed  chan struct{} // closed when the connection or a channel ends
	once    sync.Once
	// halt closes when the worker stops receiving or the incarnation
	// ends: its held deliveries are then given up rather than retried in
	// process.
	halt chan struct{}
}

func (inc *incarnation) end() { inc.once.Do(func() { close(inc.closed) }) }

func (inc *incarnation) dead() bool {
	select {
	case <-inc.closed:
		return true
	default:
		return false
	}
}

// connect makes an incarnation: a connection, a consuming channel with
// prefetch Concurrency, a publishing channel in confirm mode.
func (w *Worker) connect() (*incarnation, <-chan amqp.Delivery, <-chan string, error) {
	conn, err := w.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	inc := &incarnation{n: w.incs.Add(1), conn: conn, closed: make(chan struct{}), halt: make(chan struct{}), returns: make(chan amqp.Return, 16)}
	go func() {
		defer close(inc.halt)
		select {
		case <-w.stop:
		case <-inc.closed:
		}
	}()
	fail := func(err error) (*incarnation, <-chan amqp.Delivery, <-chan string, error) {
		_ = conn.Close()
		inc.end()
		return nil, nil, nil, err
	}
	if inc.ch, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := inc.ch.Qos(w.cfg.Concurrency, 0, false); err != nil {
		return fail(fmt.Errorf("set prefetch: %w", err))
	}
	if inc.pub, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := inc.pub.Confirm(false); err != nil {
		return fail(fmt.Errorf("confirm mode: %w", err))
	}
	inc.pub.NotifyReturn(inc.returns)
	cancels := inc.ch.NotifyCancel(make(chan string, 1))
	for _, c := range []<-chan *amqp.Error{
		conn.NotifyClose(make(chan *amqp.Error, 1)),
		inc.ch.NotifyClose(make(chan *amqp.Error, 1)),
		inc.pub.NotifyClose(make(chan *amqp.Error, 1)),
	} {
		go func() {
			if err := <-c; err != nil {
				w.log.Debug("the broker closed a channel or the connection", slog.Any("error", err))
			}
			inc.end()
		}()
	}
	tag := fmt.Sprintf("claimfirst-%s-%d", w.cfg.Owner, inc.n)
	ds, err := inc.ch.Consume(w.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consume %s: %w", w.cfg.Queue, err))
	}
	return inc, ds, cancels, nil
}

// Run consumes until ctx ends, reconnecting with backoff whenever the
// broker is lost; then it stops receiving, waits up to ShutdownTimeout for
// the handlers, closes the connection (the broker requeues what is
// unacked) and returns. It returns an error only when it cannot go on:
// the queue was deleted.
func (w *Worker) Run(ctx context.Context) error {
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	w.hctx = hctx
	backoff := w.cfg.MinReconnect
	var runErr error
	var last *incarnation
	for ctx.Err() == nil {
		inc, ds, cancels, err := w.connect()
		if err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				w.log.Error("the queue does not exist; stopping", slog.Any("error", err))
				runErr = fmt.Errorf("%w: %s: %w", ErrQueueGone, w.cfg.Queue, err)
				break
			}
			w.setHealth(fmt.Errorf("broker unreachable: %w", err))
			w.log.Warn("cannot connect to the broker; retrying", slog.Any("error", err), slog.String("retry_in", backoff.String()))
			sleep(ctx, jitter(backoff))
			backoff = min(backoff*2, w.cfg.MaxReconnect)
			continue
		}
		w.setHealth(nil)
		w.current.Store(inc)
		last = inc
		w.log.Info("consuming", slog.Uint64("incarnation", inc.n), slog.Int("prefetch", w.cfg.Concurrency))
		why := w.consume(ctx, inc, ds, cancels)
		if ctx.Err() != nil {
			break
		}
		_ = inc.conn.Close() // an incarnation is never resumed: its unacked deliveries go back
		inc.end()
		w.setHealth(fmt.Errorf("broker connection lost: %s", why))
		w.log.Warn("lost the broker; reconnecting", slog.String("reason", why), slog.Uint64("incarnation", inc.n))
		backoff = w.cfg.MinReconnect
		sleep(ctx, jitter(backoff))
	}
	close(w.stop)
	if last != nil && !last.dead() {
		_ = last.ch.Cancel(fmt.Sprintf("claimfirst-%s-%d", w.cfg.Owner, last.n), false)
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownTimeout):
		w.log.Warn("shutdown timeout: handlers still running are abandoned; the broker redelivers their messages, their claims kept until they return",
			slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
	}
	if last != nil {
		_ = last.conn.Close()
		last.end()
	}
	w.setHealth(errors.New("stopped"))
	return runErr
}

// consume dispatches inc's deliveries to Concurrency goroutines of its
// own (kept for the incarnation: a goroutine per delivery would grow a
// new stack for each) until the incarnation ends or ctx does, and returns
// why it ended.
func (w *Worker) consume(ctx context.Context, inc *incarnation, ds <-chan amqp.Delivery, cancels <-chan string) string {
	work := make(chan *amqp.Delivery)
	defer close(work)
	for range w.cfg.Concurrency {
		w.wg.Go(func() {
			for d := range work {
				w.deliver(inc, d)
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return "stopping"
		case <-inc.closed:
			return "connection closed"
		case tag := <-cancels:
			w.log.Warn("the broker cancelled the consumer (queue deleted, or its leader moved); re-subscribing if the queue is still there",
				slog.String("consumer_tag", tag))
			return "consumer cancelled by the broker"
		case d, ok := <-ds:
			if !ok {
				return "delivery channel closed"
			}
			w.deliveries.Add(1)
			select {
			case work <- &d:
			case <-ctx.Done():
				// Not started: it goes back when the connection closes.
				return "stopping"
			}
		}
	}
}

// deliver runs the protocol for one delivery and carries out its
// disposition on its own incarnation.
func (w *Worker) deliver(inc *incarnation, d *amqp.Delivery) {
	now := w.cfg.Now()
	m := message(d)
	if due, ok := notBefore(d); ok && due.After(now) && !w.await(inc, d, m, due) {
		return
	}
	now = w.cfg.Now()
	h := worker.Hold{
		Until:     now.Add(w.cfg.Lease),
		Deadline:  now.Add(w.cfg.ConsumerTimeout - consumerTimeoutMargin/5),
		Interval:  w.cfg.HeartbeatInterval,
		RenewAt:   now.Add(w.cfg.HeartbeatInterval),
		HoldUntil: now.Add(w.cfg.HoldFor),
		Stop:      inc.halt,
		// The lease stands alone: no broker hold to push, it is renewed
		// to a Lease from now while the handler runs, whatever became of
		// the connection (a redelivery then finds the key held).
		Extend: func(context.Context) (time.Time, error) { return w.cfg.Now().Add(w.cfg.Lease), nil },
	}
	disp := w.engine.Process(w.hctx, m, h)
	s := &settler{w: w, inc: inc, d: d, m: m}
	if disp.Action == worker.Leave {
		// The lease was lost or the outcome is unknown: nothing to ack,
		// and no visibility to end. Requeue once the lease has surely
		// ended (SQS's visibility would), so the next delivery finds the
		// claim completed or takes it over; unacked, it would hold a
		// prefetch slot until consumer_timeout.
		s.ReturnAfter(w.cfg.Lease)
		return
	}
	disp.Settle(s)
}

// notBefore is when a delivery that went through the delay queue is due.
func notBefore(d *amqp.Delivery) (time.Time, bool) {
	ms, ok := intHeader(d.Headers[NotBeforeHeader])
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// await holds a delivery that came back from the delay queue before it is
// due: unacked until then if that is at most MaxReturnDelay away (it
// reports true: process it), else through the delay queue once more (a
// hop, not an attempt). It reports false when the delivery was settled or
// given up meanwhile.
func (w *Worker) await(inc *incarnation, d *amqp.Delivery, m *worker.Message, due time.Time) bool {
	s := &settler{w: w, inc: inc, d: d, m: m}
	left := due.Sub(w.cfg.Now())
	if left > w.cfg.MaxReturnDelay {
		s.delay(due, m.Attempt-1) // this delivery ran nothing
		return false
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stop:
	case <-inc.closed:
	}
	if ch := s.channel(); ch != nil {
		_ = ch.Reject(d.DeliveryTag, true) // stopping: back in the queue, still due later
	}
	return false
}

// message is the portable view of a delivery.
func message(d *amqp.Delivery) *worker.Message {
	attempt := 1
	if n, ok := intHeader(d.Headers["x-delivery-count"]); ok {
		attempt = int(n) + 1
	} else if d.Redelivered {
		attempt = 2 // a classic queue counts nothing: at least the second
	}
	if n, ok := intHeader(d.Headers[AttemptsHeader]); ok && n > 0 {
		attempt += int(n) // spent before the delay queue
	}
	m := &worker.Message{
		ID: d.MessageId, Body: string(d.Body), Attempt: attempt,
		Redelivered: d.Redelivered || attempt > 1, Native: *d,
		Attributes: map[string]string{},
	}
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			m.Attributes[k] = v
		case []byte:
			m.Attributes[k] = string(v)
		default:
			if n, ok := intHeader(v); ok {
				m.Attributes[k] = strconv.FormatInt(n, 10)
			}
		}
	}
	return m // FirstReceived stays zero: the broker does not record the first delivery
}

func intHeader(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// settler carries out a disposition on the delivery's own incarnation: an
// incarnation that ended takes nothing (the broker requeued the delivery
// when it ended; the claim absorbs the redelivery).
type settler struct {
	w   *Worker
	inc *incarnation
	d   *amqp.Delivery
	m   *worker.Message
	log *slog.Logger // logger's, made at its first line: most deliveries log none
}

// logger is the worker's logger with the delivery's message id and tag.
func (s *settler) logger() *slog.Logger {
	if s.log == nil {
		s.log = s.w.log.With(slog.String("message_id", s.m.ID), slog.Uint64("delivery_tag", s.d.DeliveryTag))
	}
	return s.log
}

var _ worker.Settler = (*settler)(nil)

// channel is the channel to settle on: the delivery's own, or nil when
// its incarnation ended.
func (s *settler) channel() *amqp.Channel {
	if s.w.tagReuse {
		if cur := s.w.current.Load(); cur != nil {
			return cur.ch
		}
	}
	if s.inc.dead() {
		s.logger().Info("the delivery's connection ended: nothing to settle; the broker redelivers it and its claim answers the redelivery",
			slog.Uint64("incarnation", s.inc.n))
		return nil
	}
	return s.inc.ch
}

func (s *settler) Ack() {
	ch := s.channel()
	if ch == nil {
		return
	}
	if err := ch.Ack(s.d.DeliveryTag, false); err != nil {
		s.logger().Warn("ack failed: the broker redelivers the message, acked then as a duplicate", slog.Any("error", err))
	}
}

// ReturnAfter returns the delivery to come back after delay. Up to
// MaxReturnDelay it keeps the delivery unacked for delay (less if the
// worker stops or the connection ends), then requeues it: the broker has
// no delayed redelivery, and a requeue at once would come straight back.
// A longer delay goes through the delay queue (delay). A delivery whose
// attempts, counted across the delay queue, passed DeliveryLimit is
// dead-lettered instead, as the broker would were its count not reset.
func (s *settler) ReturnAfter(delay time.Duration) {
	if s.m.Attempt > s.w.cfg.DeliveryLimit {
		s.DeadLetter(ReasonDeliveryLimit)
		return
	}
	if delay > s.w.cfg.MaxReturnDelay {
		s.delay(s.w.cfg.Now().Add(delay), s.m.Attempt)
		return
	}
	s.hold(delay)
}

// hold keeps the delivery unacked for delay (at most MaxReturnDelay, less
// if the worker stops or the connection ends), then requeues it.
func (s *settler) hold(delay time.Duration) {
	delay = min(delay, s.w.cfg.MaxReturnDelay)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.w.stop:
		case <-s.inc.closed:
		}
		t.Stop()
	}
	ch := s.channel()
	if ch == nil {
		return
	}
	if err := ch.Reject(s.d.DeliveryTag, true); err != nil {
		s.logger().Warn("requeue failed: the broker redelivers the message when the connection ends", slog.Any("error", err))
	}
}

// delay publishes the message to the delay queue (mandatory, confirmed),
// due at due with attempts spent, then acks the delivery. The delay queue
// dead-letters it back to the queue after its TTL; a delivery before due
// takes another hop (Worker.await). A publish the broker did not confirm,
// or returned, acks nothing: the delivery is held MaxReturnDelay and
// requeued instead, as it would be without a delay queue.
func (s *settler) delay(due time.Time, attempts int) {
	inc := s.inc
	if inc.dead() {
		s.logger().Info("not delayed: the delivery's connection ended; the broker redelivers it")
		return
	}
	headers := s.headers()
	headers[AttemptsHeader] = int64(attempts)
	headers[NotBeforeHeader] = due.UnixMilli()
	pubID := fmt.Sprintf("%d.%d", inc.n, s.d.DeliveryTag)
	headers[publishHeader] = pubID
	if err := s.publish(s.w.cfg.DelayQueue, pubID, s.publishing(headers)); err != nil {
		s.w.cfg.Metrics.Record(s.logger(), slog.LevelError, worker.OutcomeSendFailed, "delay publish not confirmed: not acked; the message is requeued after MaxReturnDelay",
			slog.String("delay_queue", s.w.cfg.DelayQueue), slog.Any("error", err))
		s.hold(s.w.cfg.MaxReturnDelay)
		return
	}
	ch := s.channel()
	if ch == nil {
		return // published; the redelivery is a copy, which the claim absorbs
	}
	if err := ch.Ack(s.d.DeliveryTag, false); err != nil {
		s.logger().Warn("ack after the delay publish failed: the redelivery and the delayed copy both come back; the claim absorbs the second", slog.Any("error", err))
		return
	}
	s.logger().Debug("returned through the delay queue", slog.String("delay_queue", s.w.cfg.DelayQueue), slog.Time("due", due), slog.Int("attempts", attempts))
}

// headers are the delivery's headers for a copy the worker publishes,
// without those the broker sets on delivery or dead-lettering.
func (s *settler) headers() amqp.Table {
	h := amqp.Table{}
	for k, v := range s.d.Headers {
		switch k {
		case "x-delivery-count", NotBeforeHeader, AttemptsHeader, publishHeader:
		default:
			h[k] = v
		}
	}
	return h
}

// publishing is the delivery, as a persistent message with headers.
func (s *settler) publishing(headers amqp.Table) amqp.Publishing {
	return amqp.Publishing{
		Headers: headers, ContentType: s.d.ContentType, ContentEncoding: s.d.ContentEncoding,
		DeliveryMode: amqp.Persistent, CorrelationId: s.d.CorrelationId, ReplyTo: s.d.ReplyTo,
		MessageId: s.d.MessageId, Timestamp: s.d.Timestamp, Type: s.d.Type, AppId: s.d.AppId, Body: s.d.Body,
	}
}

// DeadLetter publishes the message to the dead-letter queue (mandatory,
// confirmed) with its reason, attempt and key, then acks it; a publish the
// broker did not confirm acks nothing, and the delivery is requeued.
func (s *settler) DeadLetter(reason string) bool {
	inc := s.inc
	if inc.dead() {
		s.logger().Warn("not dead-lettered: the delivery's connection ended; the broker redelivers it", slog.String("reason", reason))
		return false
	}
	headers := s.headers()
	headers[ReasonHeader] = reason
	headers[AttemptHeader] = int64(s.m.Attempt)
	if s.m.Key != "" {
		headers[KeyHeader] = s.m.Key
	}
	pubID := fmt.Sprintf("%d.%d", inc.n, s.d.DeliveryTag)
	headers[publishHeader] = pubID
	err := s.publish(s.w.cfg.DeadLetterQueue, pubID, s.publishing(headers))
	if err != nil {
		s.w.cfg.Metrics.Record(s.logger(), slog.LevelError, worker.OutcomeSendFailed, "dead-letter publish not confirmed: not acked; the message is requeued", slog.String("reason", reason),
			slog.String("dead_letter_queue", s.w.cfg.DeadLetterQueue), slog.Any("error", err))
		if ch := s.channel(); ch != nil {
			_ = ch.Reject(s.d.DeliveryTag, true)
		}
		return false
	}
	ch := s.channel()
	if ch == nil {
		return false // published; the redelivery is dead-lettered again (a copy) or found done
	}
	if err := ch.Ack(s.d.DeliveryTag, false); err != nil {
		s.logger().Warn("ack after dead-lettering failed: the redelivery is dead-lettered again", slog.Any("error", err))
		return false
	}
	s.w.cfg.Metrics.Record(s.logger(), slog.LevelWarn, worker.OutcomeDeadLettered, "dead-lettered",
		slog.String("reason", reason), slog.String("dead_letter_queue", s.w.cfg.DeadLetterQueue))
	return true
}

// publishTimeout bounds a publish's confirmation.
const publishTimeout = 10 * time.Second

// publish publishes msg to queue (default exchange, mandatory) and waits
// for its confirmation; a nack or a return (no such queue) is an error.
func (s *settler) publish(queue, id string, msg amqp.Publishing) error {
	inc := s.inc
	inc.pubMu.Lock()
	defer inc.pubMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	conf, err := inc.pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the broker nacked the publish")
	}
	for {
		select {
		case r := <-inc.returns:
			if r.Headers[publishHeader] == id {
				return fmt.Errorf("returned unroutable: %d %s (does %s exist? run setup)", r.ReplyCode, r.ReplyText, queue)
			}
		default:
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// jitter is d less up to a half, at random.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
