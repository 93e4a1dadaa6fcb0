package sqsworker

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/worker"
)

// sqsDependency names SQS in breaker metrics and logs.
const sqsDependency = "sqs"

// skewRecheck is how often a skewed worker measures its clock again,
// receiving nothing meanwhile.
const skewRecheck = time.Second

// transport is the long-poll transport of one Run: the pollers receive
// into its pool of handler slots (one probe slot while the breaker is open), each delivery runs the per-message
// protocol (processor) and the transport carries out its disposition (ack
// through the deleter, visibility, dead-letter), FIFO groups in order.
type transport struct {
	w        *Worker
	hctx     context.Context // the handlers' context: it outlives Run's by the shutdown budget
	pool     *pool
	batch    int // messages asked for per receive
	del      *deleter
	handlers sync.WaitGroup
	probe    chan struct{} // a token per probe in flight while the breaker is open
}

// poll receives batches while ctx lives, never more messages than there are
// free handlers, so memory stays flat however deep the backlog. While the
// breaker is open it receives one probe message at a time instead.
func (t *transport) poll(ctx context.Context) {
	w, p := t.w, t.pool
	for {
		if w.skew.Skewed() {
			// Claim nothing: leave the messages in the queue, and measure
			// again until the clock agrees.
			sleepCtx(ctx, skewRecheck)
			if ctx.Err() != nil {
				return
			}
			w.remeasure(ctx)
			continue
		}
		n, probe := t.batch, false
		if open, _ := w.proc.Breaker(); open {
			select {
			case t.probe <- struct{}{}:
				n, probe = 1, true
			default:
				sleepCtx(ctx, 100*time.Millisecond)
				if ctx.Err() != nil {
					return
				}
				continue
			}
		}
		endProbe := func() {
			if probe {
				<-t.probe
			}
		}
		if !p.take(ctx, n) {
			endProbe()
			return
		}
		// Shutdown cuts the receive short, so an idle worker stops at once
		// instead of after its long poll. SQS may still have handed messages
		// to a receive cut off in flight: nobody sees them, nothing is done
		// with them, and they become visible again when their visibility
		// timeout ends (their receive count one higher). What a receive
		// brings back after shutdown began is returned at once below.
		rctx, cancel := context.WithTimeout(ctx, w.cfg.WaitTime+ResponseHeaderTimeout)
		out, err := w.cfg.SQS.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(w.cfg.QueueURL),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             int32(w.cfg.WaitTime / time.Second),
			VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
			MessageSystemAttributeNames: receiveSystemAttributes,
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		var msgs []types.Message
		if out != nil {
			msgs = out.Messages
		}
		if err == nil {
			w.proc.DependencyRecovered(sqsDependency) // a probe that finds SQS back ends an SQS outage
		}
		if err != nil && ctx.Err() == nil {
			w.proc.DependencyFailed(sqsDependency, err)
			w.log.Error("receive failed", slog.Any("error", err))
			p.give(n)
			endProbe()
			sleepCtx(ctx, time.Second)
			continue
		}
		// SQS starts a message's visibility timeout when it answers, which a
		// long poll may do long after the request; the lease margin covers
		// the answer's way back.
		received := w.cfg.Now()
		w.cfg.Metrics.Received(len(msgs))
		p.give(n - len(msgs))
		if len(msgs) == 0 {
			endProbe()
		}
		if w.queue.FIFO && len(msgs) > 1 && ctx.Err() == nil {
			// A probe receives one message: never here.
			ds := make([]*sqsDelivery, len(msgs))
			for i := range msgs {
				ds[i] = w.delivery(&msgs[i], received)
			}
			t.startGroups(ds)
			continue
		}
		for i := range msgs {
			d := w.delivery(&msgs[i], received)
			d.probe = probe
			if ctx.Err() != nil {
				// Stopping: what the last poll brought is given back unstarted.
				w.returnUnstarted(d)
				p.give(1)
				endProbe()
				continue
			}
			t.handlers.Go(func() {
				defer p.give(1)
				free := func() {}
				if d.probe {
					var stop func()
					free, stop = t.holdProbe(d)
					defer stop()
				}
				t.deliver(d)
				if d.probe {
					// One probe at a time, and not faster than ProbeInterval.
					sleepCtx(ctx, w.cfg.ProbeInterval)
					free()
				}
			})
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// holdProbe returns free, which gives the breaker's probe slot back (once),
// and stop, which ends its watch: if the probe has not freed its slot when
// its first lease ends (the receipt plus the visibility timeout, less the
// margin: what the lease's watchdog allows a receive), the slot is given
// back then, so that a handler that ignores its context cannot stop the
// pollers from probing again. The handler itself runs on, holding its
// message.
func (t *transport) holdProbe(d *sqsDelivery) (free, stop func()) {
	w := t.w
	var once sync.Once
	free = func() { once.Do(func() { <-t.probe }) }
	deadline := d.receivedAt.Add(w.cfg.VisibilityTimeout - w.cfg.LeaseMargin)
	timer := time.AfterFunc(deadline.Sub(w.cfg.Now()), func() {
		w.log.Warn("probe still running at its lease's end; giving the probe slot back so the pollers can probe again",
			slog.String("message_id", d.msg.ID))
		free()
	})
	return free, func() { timer.Stop() }
}

// deliver runs the protocol for one delivery and carries out its
// disposition. done reports that the message is off the queue (acked, or
// dead-lettered).
func (t *transport) deliver(d *sqsDelivery) (disp worker.Disposition, done bool) {
	w := t.w
	w.inFlight.Store(d.msg.ID, struct{}{})
	defer w.inFlight.Delete(d.msg.ID)
	vis := w.cfg.VisibilityTimeout
	capAt := d.receivedAt.Add(MaxVisibility)
	from := d.leaseStart() // the receipt, or a FIFO wait's last extension
	h := worker.Hold{
		Ordered:   w.queue.FIFO,
		Until:     from.Add(vis - w.cfg.LeaseMargin),
		Deadline:  capAt.Add(-w.cfg.LeaseMargin),
		Interval:  w.cfg.HeartbeatInterval,
		RenewAt:   from.Add(w.cfg.HeartbeatInterval),
		Stop:      w.stop,
		Probe:     d.probe,
		HoldUntil: from.Add(w.cfg.HoldFor),
		Extend: func(ctx context.Context) (time.Time, error) {
			now := w.cfg.Now()
			next := min(vis, capAt.Sub(now).Truncate(time.Second))
			if next <= w.cfg.LeaseMargin {
				return time.Time{}, nil // at SQS's cap: the handler's deadline ends it
			}
			_, err := w.cfg.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: aws.String(d.receipt),
				VisibilityTimeout: int32(next / time.Second),
			})
			if err != nil {
				return time.Time{}, err
			}
			return now.Add(next - w.cfg.LeaseMargin), nil
		},
	}
	disp = w.proc.Process(withTraceHeader(w.proc, t.hctx, d.traceHeader), &d.msg, h)
	log := w.log.With(slog.String("message_id", d.msg.ID))
	if d.msg.Key != "" {
		log = log.With(slog.String("idempotency_key", d.msg.Key))
	}
	return disp, disp.Settle(queuedDelivery{t: t, d: d, log: log})
}

// queuedDelivery carries out a long-polled delivery's disposition.
type queuedDelivery struct {
	t   *transport
	d   *sqsDelivery
	log *slog.Logger
}

func (q queuedDelivery) Ack() {
	if !q.t.del.add(q.d.receipt) {
		q.log.Warn("completed after shutdown abandoned it: not acked; the redelivery is acked as a duplicate")
	}
}

func (q queuedDelivery) ReturnAfter(delay time.Duration) { q.t.w.setVisibility(q.d, delay, q.log) }

func (q queuedDelivery) DeadLetter(reason string) bool {
	return q.t.sendToDeadLetter(q.d, reason, q.log)
}

// sendToDeadLetter sends the message to the dead-letter queue with its reason and
// deletes it from the source; without a dead-letter queue it is left for
// SQS's own redrive (or retention) and logged.
func (t *transport) sendToDeadLetter(d *sqsDelivery, reason string, log *slog.Logger) bool {
	w := t.w
	dl := deadLetter{body: d.body, attrs: d.attrs, messageID: d.msg.ID, firstRecv: d.firstRecv, reason: reason, secret: w.cfg.OriginalIDSecret}
	if w.queue.DeadLetterFIFO {
		dl.groupID = cmp.Or(d.group, d.msg.ID)
	}
	if !dl.send(context.Background(), w.cfg.SQS, w.queue.DeadLetterURL, w.cfg.Metrics, log) {
		return false
	}
	t.del.add(d.receipt)
	return true
}
