package sqsworker

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/worker"
)

// FIFO queues.
//
// A queue whose FifoQueue attribute is true (container), or an event whose
// source ARN ends in ".fifo" (Lambda), is processed group by group: the
// messages of one MessageGroupId that arrive together (one receive, one
// Lambda batch) run one at a time in the order SQS gave them, and different
// groups run in parallel, up to the concurrency. SQS itself hands out no
// message of a group while an earlier one of it is in flight, so order holds
// across receives and workers too.
//
// When a message of a group is not done (its handler failed and it is to be
// retried, its key is held elsewhere, its lease was lost, its dead-letter
// send failed), the later messages of that group from the same delivery are
// not started: the container makes them visible again at once, and the
// Lambda adapter reports them as batch item failures without processing
// them. The message that was not done keeps its own visibility delay, so it
// stays in flight and keeps the group locked until it comes back, first.
// Other groups go on.
//
// A message whose key is held elsewhere (a producer's retry of a payment
// whose first copy another consumer is still processing, or a copy
// redelivered while a stalled holder still has the claim) therefore blocks
// its group until the holder finishes or its lease ends. That is the price of
// order: counted in claimfirst_fifo_groups_blocked_total{cause="held_elsewhere"}
// and logged with the group id.
//
// Lambda: reporting the whole rest of the batch after the first failure (as
// the SQS documentation suggests for FIFO queues) would also hold back the
// groups that have nothing to do with the failure, and send their records
// through the queue again. Only the failed group's later records are
// reported; since SQS redelivers a group's records in order, the group
// resumes where it stopped. Each report spends a receive of every later
// record of the group: a FIFO queue's maxReceiveCount needs room for them
// (FIFOMaxReceiveCount).
//
// A FIFO message's retry delay follows its own failures (its claim's
// attempts), not its receive count, which grows each time it is returned
// behind a failed message of its group (a standard queue's follows the
// receive count: see failures). Where it can (HoldFor, not a probe, not
// stopping) the container retries a failure in process while the group's
// later messages wait invisible, spending no receive.
//
// A dead-lettered message goes to a FIFO dead-letter queue with its group id
// and a deduplication id derived from its message id, so that a send retried
// for the same delivery is not duplicated there; a message that is
// dead-lettered stops nothing: its group goes on.
//
// On a standard queue a MessageGroupId (fair queues) serializes nothing.

// FIFOMaxReceiveCount is the maxReceiveCount `worker setup -fifo` and
// template.yaml give a FIFO queue, and the least for which the worker does
// not warn at start. A FIFO message is received once more for every failure
// of a message in front of it in its group (it is returned unstarted), so
// the receive count of a group's later messages grows with failures that are
// not theirs. Their backoff follows their own failures (the claim's
// attempts), but SQS dead-letters by receive count: the count needs room
// for the returns on top of the retry schedule. The worker dead-letters
// poison itself; maxReceiveCount is only the backstop.
const FIFOMaxReceiveCount = 100

// warnFIFOReceives warns when q is a FIFO queue whose maxReceiveCount leaves
// too little room for the receives spent returning messages behind a failed
// one of their group, and reports whether it did.
func warnFIFOReceives(q QueueInfo, log *slog.Logger) bool {
	if !q.FIFO || q.MaxReceiveCount <= 0 || q.MaxReceiveCount >= FIFOMaxReceiveCount {
		return false
	}
	log.Warn("FIFO queue's maxReceiveCount leaves little room: each failure in a group spends a receive of every message behind it, and SQS may dead-letter valid messages; set it to at least the recommended value",
		slog.Int("max_receive_count", q.MaxReceiveCount), slog.Int("recommended", FIFOMaxReceiveCount))
	return true
}

// groupAttribute is the system attribute that carries a message's group id.
const groupAttribute = string(types.MessageSystemAttributeNameMessageGroupId)

// groupRuns splits a delivery of n messages into runs, each a list of
// indexes to process one at a time in order. With fifo, there is one run per
// message group, in the order each group first appears, its messages in
// delivery order; otherwise one run per message.
func groupRuns(n int, fifo bool, groupOf func(i int) string) [][]int {
	runs := make([][]int, 0, n)
	if !fifo {
		for i := range n {
			runs = append(runs, []int{i})
		}
		return runs
	}
	at := map[string]int{}
	for i := range n {
		g := groupOf(i)
		j, ok := at[g]
		if !ok {
			j = len(runs)
			at[g] = j
			runs = append(runs, nil)
		}
		runs[j] = append(runs[j], i)
	}
	return runs
}

// runGroup processes a run's messages one at a time in order. start
// processes one and reports whether it is done (acked or dead-lettered); at
// the first that is not, the run stops, and the indexes after it, which were
// not started, are passed to skip (if any) with the index that stopped it.
func runGroup(run []int, start func(i int) bool, skip func(stopped int, rest []int)) {
	for k, i := range run {
		if !start(i) {
			if rest := run[k+1:]; len(rest) > 0 {
				skip(i, rest)
			}
			return
		}
	}
}

// runGroups runs every run with runGroup, at most limit runs at once, and
// returns when all have finished.
func runGroups(runs [][]int, limit int, start func(i int) bool, skip func(stopped int, rest []int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(limit, 1))
	for _, run := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			runGroup(run, start, skip)
		})
	}
	wg.Wait()
}

// blockCause names why a FIFO group stopped after a message with action a:
// the cause label of claimfirst_fifo_groups_blocked_total.
func blockCause(a worker.Action) string {
	switch a {
	case worker.Defer:
		return "held_elsewhere"
	case worker.Leave:
		return "lease_lost"
	case worker.DeadLetter:
		return "dead_letter_failed"
	default:
		return "failed"
	}
}

// causeStopping is the block cause when the worker stops receiving: the
// group's messages not started yet are returned.
const causeStopping = "stopping"

// dedupID is the MessageDeduplicationId of a message dead-lettered to a
// FIFO queue: derived from its SQS message id, so a send retried for the same
// delivery is deduplicated, while a redriven copy (a new id) is not.
func dedupID(messageID string) string {
	return truncate("dlq-"+messageID, 128)
}

// fifoEvent reports whether ev comes from a FIFO queue.
func fifoEvent(ev events.SQSEvent) bool {
	return len(ev.Records) > 0 && strings.HasSuffix(ev.Records[0].EventSourceARN, ".fifo")
}

// startGroups starts the groups of one FIFO receive, each in a handler
// goroutine that processes its messages in order; every message holds its
// slot in p until it is done, returned or skipped.
func (t *transport) startGroups(ds []*sqsDelivery) {
	for _, run := range groupRuns(len(ds), true, func(i int) string { return ds[i].group }) {
		group := make([]*sqsDelivery, len(run))
		for k, i := range run {
			group[k] = ds[i]
		}
		t.handlers.Go(func() { t.runInOrder(group) })
	}
}

// runInOrder processes one group's messages of a receive in order while a
// keeper holds the waiting ones invisible.
func (t *transport) runInOrder(group []*sqsDelivery) {
	w, p := t.w, t.pool
	k := w.keep(group[1:])
	defer k.close()
	idx := make([]int, len(group))
	for i := range idx {
		idx[i] = i
	}
	cause := ""
	runGroup(idx, func(i int) bool {
		d := group[i]
		k.start(d)
		defer p.give(1)
		select {
		case <-w.stop:
			cause = causeStopping
			w.returnUnstarted(d)
			return false
		default:
		}
		disp, done := t.deliver(d)
		if !done {
			cause = blockCause(disp.Action)
		}
		return done
	}, func(stopped int, rest []int) {
		k.close()
		defer p.give(len(rest))
		w.returnRest(group[stopped], group[rest[0]:], cause)
	})
}

// returnRest makes the messages behind a message that was not done visible again
// at once, so that SQS gives the group out again in order when that message
// comes back.
func (w *Worker) returnRest(stopped *sqsDelivery, rest []*sqsDelivery, cause string) {
	w.cfg.Metrics.GroupBlocked(cause)
	log := w.log.With(slog.String("message_group_id", stopped.group), slog.String("message_id", stopped.msg.ID))
	switch cause {
	case "held_elsewhere":
		log.Warn("FIFO group blocked: a message's key is held elsewhere; the group waits for the holder",
			slog.Int("returned", len(rest)))
	case causeStopping:
		log.Info("stopping: returning the group's unstarted messages", slog.Int("returned", len(rest)))
	default:
		log.Warn("FIFO group stopped: a message was not done; returning the group's later messages",
			slog.String("cause", cause), slog.Int("returned", len(rest)))
	}
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(rest))
	for i, d := range rest {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(d.receipt)}
	}
	out, err := w.cfg.SQS.ChangeMessageVisibilityBatch(context.Background(), &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(w.cfg.QueueURL), Entries: entries,
	})
	outcome := worker.OutcomeSkipped
	if cause == causeStopping {
		outcome = worker.OutcomeReturned
	}
	if err != nil {
		log.Warn("returning a FIFO group's later messages failed; they reappear when their visibility ends", slog.Any("error", err))
		return
	}
	for _, f := range out.Failed {
		log.Warn("returning a FIFO group's later message failed; it reappears when its visibility ends",
			slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
	}
	w.cfg.Metrics.RecordN(log, slog.LevelDebug, outcome, len(out.Successful), "returned a FIFO group's later messages to the queue")
}

// keeper extends the visibility of a FIFO group's messages while they wait
// behind the one that runs, a heartbeat interval after their lease began,
// so that none outlives its lease before it starts. A message leaves the
// keeper when it starts: its own heartbeat takes over from there.
type keeper struct {
	w    *Worker
	mu   sync.Mutex
	wait []*sqsDelivery // not started yet
	done chan struct{}  // closed by close
	once sync.Once
	exit chan struct{} // closed when the loop has returned
}

func (w *Worker) keep(ds []*sqsDelivery) *keeper {
	k := &keeper{w: w, wait: append([]*sqsDelivery(nil), ds...), done: make(chan struct{}), exit: make(chan struct{})}
	if len(ds) == 0 {
		close(k.exit)
		return k
	}
	go k.loop()
	return k
}

// start takes d off the keeper. After it returns, d.leaseFrom is final.
func (k *keeper) start(d *sqsDelivery) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, x := range k.wait {
		if x == d {
			k.wait = append(k.wait[:i], k.wait[i+1:]...)
			return
		}
	}
}

// close stops the keeper and waits for it.
func (k *keeper) close() {
	k.once.Do(func() { close(k.done) })
	<-k.exit
}

func (k *keeper) loop() {
	defer close(k.exit)
	w := k.w
	for {
		k.mu.Lock()
		if len(k.wait) == 0 {
			k.mu.Unlock()
			return
		}
		start := k.wait[0].leaseStart()
		for _, d := range k.wait[1:] {
			if d.leaseStart().Before(start) {
				start = d.leaseStart()
			}
		}
		next := start.Add(w.cfg.HeartbeatInterval)
		k.mu.Unlock()
		wait := next.Sub(w.cfg.Now())
		if wait <= 0 {
			// The last extension failed: try again shortly, within the lease.
			wait = min(time.Second, w.cfg.HeartbeatInterval/4)
		}
		t := time.NewTimer(wait)
		select {
		case <-k.done:
			t.Stop()
			return
		case <-t.C:
		}
		k.extend()
	}
}

// extend pushes the waiting messages' visibility to a full visibility
// timeout (within SQS's cap) and moves their lease start to now.
func (k *keeper) extend() {
	w := k.w
	k.mu.Lock()
	ds := append([]*sqsDelivery(nil), k.wait...)
	k.mu.Unlock()
	now := w.cfg.Now()
	var entries []types.ChangeMessageVisibilityBatchRequestEntry
	var ext []*sqsDelivery
	var leaseEnd time.Time
	for _, d := range ds {
		next := min(w.cfg.VisibilityTimeout, d.receivedAt.Add(MaxVisibility).Sub(now).Truncate(time.Second))
		if next <= w.cfg.LeaseMargin {
			continue // at SQS's cap: the message's own deadline ends it when it starts
		}
		entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(len(entries))), ReceiptHandle: aws.String(d.receipt), VisibilityTimeout: int32(next / time.Second),
		})
		ext = append(ext, d)
		end := d.leaseStart().Add(w.cfg.VisibilityTimeout - w.cfg.LeaseMargin)
		if leaseEnd.IsZero() || end.Before(leaseEnd) {
			leaseEnd = end
		}
	}
	if len(entries) == 0 {
		return
	}
	// Bounded by the lease: past it the messages are SQS's again.
	ctx, cancel := context.WithDeadline(context.Background(), leaseEnd)
	out, err := w.cfg.SQS.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(w.cfg.QueueURL), Entries: entries})
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		w.log.Warn("extending the visibility of waiting FIFO messages failed; retrying",
			slog.String("message_group_id", ds[0].group), slog.Any("error", err))
		return
	}
	for _, s := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		// Only those still waiting: a started one's lease is its handler's.
		if i >= 0 && i < len(ext) && slices.Contains(k.wait, ext[i]) {
			ext[i].leaseFrom = now
		}
	}
	w.cfg.Metrics.Heartbeats(len(out.Successful))
}

// reportRest reports the records behind a record of their FIFO group that was not
// done, and, where the function knows its queue, makes them visible again at
// once: otherwise they would stay in flight, and keep the group locked, for
// a whole visibility timeout after the failed record is due back.
func (l *Lambda) reportRest(ctx context.Context, stopped *events.SQSMessage, rest []*events.SQSMessage, cause string) {
	l.cfg.Metrics.GroupBlocked(cause)
	log := l.log.With(slog.String("message_group_id", stopped.Attributes[groupAttribute]), slog.String("message_id", stopped.MessageId))
	if cause == "held_elsewhere" {
		l.cfg.Metrics.RecordN(log, slog.LevelWarn, worker.OutcomeSkipped, len(rest), "FIFO group blocked: a record's key is held elsewhere; reporting the group's later records unprocessed", slog.Int("reported", len(rest)))
	} else {
		l.cfg.Metrics.RecordN(log, slog.LevelWarn, worker.OutcomeSkipped, len(rest), "FIFO group stopped: a record was not done; reporting the group's later records unprocessed",
			slog.String("cause", cause), slog.Int("reported", len(rest)))
	}
	if l.cfg.SQS == nil || l.cfg.QueueURL == "" {
		return
	}
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(rest))
	for i, r := range rest {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ReceiptHandle)}
	}
	for start := 0; start < len(entries); start += 10 {
		out, err := l.cfg.SQS.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(l.cfg.QueueURL), Entries: entries[start:min(start+10, len(entries))],
		})
		if err != nil {
			log.Warn("change visibility failed for the group's later records; they reappear when their visibility ends", slog.Any("error", err))
			continue
		}
		for _, f := range out.Failed {
			log.Warn("change visibility failed for a later record of the group", slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
		}
	}
}
