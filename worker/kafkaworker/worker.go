package kafkaworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/internal/plant"
	"github.com/claimfirst/claimfirst/worker"
)

// The headers a dead letter carries beside the original record's own.
const (
	// HeaderReason is why the record was dead-lettered.
	HeaderReason = "claimfirst-reason"
	// HeaderAttempt is the in-process delivery that dead-lettered it.
	HeaderAttempt = "claimfirst-attempt"
	// HeaderTopic, HeaderPartition, HeaderOffset and HeaderTimestamp (Unix
	// milliseconds) say where the original record was.
	HeaderTopic     = "claimfirst-original-topic"
	HeaderPartition = "claimfirst-original-partition"
	HeaderOffset    = "claimfirst-original-offset"
	HeaderTimestamp = "claimfirst-original-timestamp"
	// HeaderKey is the original record's Kafka key (the dead letter keeps
	// it as its own key too).
	HeaderKey = "claimfirst-original-key"
)

// System is the messaging.system of the message spans.
const System = "kafka"

// ErrShutdownTimeout is what Run returns when handlers still ran at the
// end of ShutdownTimeout.
var ErrShutdownTimeout = errors.New("kafkaworker: shutdown timeout: handlers still running")

// Worker consumes one topic in a consumer group and runs the worker
// protocol for each record. See the package documentation.
type Worker struct {
	cfg Config
	eng *worker.Engine
	cl  *kgo.Client
	log *slog.Logger

	hctx   context.Context // the handlers' context
	cancel context.CancelFunc
	space  chan struct{} // signalled when buffered records settle or drop
	ran    atomic.Bool

	commitMu sync.Mutex // held by a commit; a revoke takes it to end its partitions' commits
	mu       sync.Mutex
	parts    map[tp]*partition
	buffered int
	// ready are the lanes whose head record may run, in the order they
	// became ready; Concurrency runners take them from the front (under
	// mu; readyCond is signalled when one is added or closing is set).
	ready     []*lane
	readyCond *sync.Cond
	closing   bool
	running   sync.WaitGroup // records being processed, all partitions
	inFlight  atomic.Int64

	// commitPastUnsettled is a fault planted by tests only: a settled
	// record moves its partition's commit past the unsettled records
	// before it.
	commitPastUnsettled bool
	// commitAfterRevoke is a fault planted by tests only: a revoke whose
	// grace ran out with records still running does not forget its
	// partitions, so when those records settle this member commits the
	// partitions' prefixes after its revoke callback returned, over the
	// new owner's commits (kfake accepts them: the member is still in the
	// group).
	commitAfterRevoke bool
}

// tp is a topic partition.
type tp struct {
	topic string
	part  int32
}

// New checks cfg, connects to the brokers, reads the topic's retention and
// checks the claims' Retention against it, and checks that the dead-letter
// topic exists. It does not join the group: Run does. Errors for bad
// settings wrap worker.ErrConfig; a retention too short wraps ErrRetention.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = worker.NewMetrics(nil)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(slog.String("topic", cfg.Topic), slog.String("group", cfg.Group))
	w := &Worker{
		cfg: cfg, log: log, parts: map[tp]*partition{},
		space: make(chan struct{}, 1),
	}
	w.readyCond = sync.NewCond(&w.mu)
	// Faults planted by the simulator's mutants (internal/plant): none
	// outside this module's tests.
	pl := plant.KafkaFrom(ctx)
	w.commitPastUnsettled, w.commitAfterRevoke = pl.CommitPastUnsettled, pl.CommitAfterRevoke
	w.hctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, cfg.SessionTimeout/3)),
		kgo.OnPartitionsAssigned(w.assigned),
		kgo.OnPartitionsRevoked(w.revoked),
		kgo.OnPartitionsLost(w.lost),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	}
	cl, err := kgo.NewClient(append(opts, cfg.ClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
	}
	if err := w.checkTopics(ctx, kadm.NewClient(cl)); err != nil {
		cl.Close()
		return nil, err
	}
	eng, err := worker.NewEngine(w.cfg.Protocol, worker.EngineOptions{
		System: System, MaxHoldBackoff: cfg.MaxHoldBackoff, BreakerThreshold: cfg.BreakerThreshold,
	})
	if err != nil {
		cl.Close()
		return nil, err
	}
	w.eng, w.cl = eng, cl
	return w, nil
}

// checkTopics reads the topic's retention, fills or checks Retention, and
// checks the dead-letter topic exists.
func (w *Worker) checkTopics(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rcs, err := adm.DescribeTopicConfigs(ctx, w.cfg.Topic, w.cfg.DeadLetterTopic)
	if err != nil {
		return fmt.Errorf("kafkaworker: describe topics %s, %s: %w", w.cfg.Topic, w.cfg.DeadLetterTopic, err)
	}
	rc, err := rcs.On(w.cfg.Topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("kafkaworker: topic %s: %w (create it: worker setup)", w.cfg.Topic, err)
	}
	if d, err := rcs.On(w.cfg.DeadLetterTopic, nil); err != nil || d.Err != nil {
		return fmt.Errorf("kafkaworker: DeadLetterTopic %s: %w (create it: worker setup)", w.cfg.DeadLetterTopic, errors.Join(err, d.Err))
	}
	retention, unbounded, err := topicRetention(rc)
	if err != nil {
		return fmt.Errorf("kafkaworker: topic %s: %w", w.cfg.Topic, err)
	}
	if unbounded {
		if w.cfg.Retention == 0 {
			return fmt.Errorf("%w: topic %s keeps records without end (compacted, or retention.ms -1): set Retention explicitly to how long a key must be remembered", ErrRetention, w.cfg.Topic)
		}
		w.log.Warn("topic keeps records without end: the claims' Retention is the explicit setting", slog.String("retention", w.cfg.Retention.String()))
		return nil
	}
	least := w.cfg.MinRetention(retention)
	if w.cfg.Retention == 0 {
		w.cfg.Retention = least
		return nil
	}
	if w.cfg.Retention < least {
		return fmt.Errorf("%w: Retention %s is shorter than %s: the topic's retention.ms %s plus HoldFor %s, Lease %s and RetentionMargin %s",
			ErrRetention, w.cfg.Retention, least, retention, w.cfg.HoldFor, w.cfg.Lease, w.cfg.RetentionMargin)
	}
	return nil
}

// topicRetention is a topic's retention.ms, or unbounded for a compacted
// topic or one that keeps records forever.
func topicRetention(rc kadm.ResourceConfig) (d time.Duration, unbounded bool, err error) {
	ms := int64(7 * 24 * time.Hour / time.Millisecond) // Kafka's default
	for _, c := range rc.Configs {
		if c.Value == nil {
			continue
		}
		switch c.Key {
		case "cleanup.policy":
			if strings.Contains(*c.Value, "compact") {
				unbounded = true
			}
		case "retention.ms":
			if ms, err = strconv.ParseInt(*c.Value, 10, 64); err != nil {
				return 0, false, fmt.Errorf("retention.ms %q: %w", *c.Value, err)
			}
		}
	}
	if ms < 0 {
		unbounded = true
	}
	return time.Duration(ms) * time.Millisecond, unbounded, nil
}

// Retention is the claims' retention in use: Config.Retention, or its
// default from the topic's retention.ms.
func (w *Worker) Retention() time.Duration { return w.cfg.Retention }

// Health returns nil while the worker claims normally, and an error naming
// the dependency and its last failure while the breaker is open.
func (w *Worker) Health() error { return w.eng.Health() }

// Run joins the group and processes records until ctx ends, then shuts
// down within ShutdownTimeout: no new records; running handlers finish or
// are cancelled; the settled prefixes are committed; the group is left.
// Run may be called once per Worker.
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return errors.New("kafkaworker: Run called twice")
	}
	defer w.cancel()
	pollDone := make(chan struct{})
	go func() { defer close(pollDone); w.poll(ctx) }()
	commitDone := make(chan struct{})
	go func() { defer close(commitDone); w.commitLoop(ctx) }()
	for range w.cfg.Concurrency {
		go w.runner()
	}
	defer func() {
		w.mu.Lock()
		w.closing = true
		w.mu.Unlock()
		w.readyCond.Broadcast()
	}()
	w.log.Info("worker started", slog.Int("concurrency", w.cfg.Concurrency), slog.String("lease", w.cfg.Lease.String()),
		slog.String("retention", w.cfg.Retention.String()), slog.String("dead_letter_topic", w.cfg.DeadLetterTopic))

	<-ctx.Done()
	deadline := time.NewTimer(w.cfg.ShutdownTimeout)
	defer deadline.Stop()
	cancelAt := time.NewTimer(w.cfg.ShutdownTimeout - min(w.cfg.ShutdownTimeout/4, 5*time.Second))
	defer cancelAt.Stop()
	w.log.Info("stopping: no new records; waiting for running records", slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
	<-pollDone
	<-commitDone
	w.mu.Lock()
	for _, p := range w.parts {
		p.halt()
	}
	w.mu.Unlock()
	drained := make(chan struct{})
	go func() { w.running.Wait(); close(drained) }()
	var runErr error
	select {
	case <-drained:
	case <-cancelAt.C:
		w.log.Warn("shutdown timeout near: cancelling running handlers")
		w.cancel()
		select {
		case <-drained:
		case <-deadline.C:
			n := w.inFlight.Load()
			w.log.Error("shutdown timeout: handlers still running; their records are replayed by the partitions' next owner",
				slog.Int64("abandoned", n), slog.String("shutdown_timeout", w.cfg.ShutdownTimeout.String()))
			runErr = fmt.Errorf("%w (%s)", ErrShutdownTimeout, w.cfg.ShutdownTimeout)
		}
	}
	// The settled prefixes, then leave: the leave's revoke finds nothing.
	cctx, cancel := context.WithTimeout(context.Background(), max(2*time.Second, w.cfg.ShutdownTimeout/4))
	w.commitMu.Lock()
	w.mu.Lock()
	parts := make([]*partition, 0, len(w.parts))
	for _, p := range w.parts {
		parts = append(parts, p)
	}
	w.mu.Unlock()
	if err := w.commitLocked(cctx, parts); err != nil {
		w.log.Warn("final commit failed: the settled records are replayed as duplicates by the next owner", slog.Any("error", err))
	}
	w.dropAll(parts)
	w.commitMu.Unlock()
	cancel()
	closed := make(chan struct{})
	go func() {
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer lcancel()
		_ = w.cl.LeaveGroupContext(lctx)
		w.cl.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		w.log.Warn("leaving the group timed out")
	}
	w.log.Info("worker stopped")
	return runErr
}

// poll fetches records while ctx lives and hands them to their partitions.
func (w *Worker) poll(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.Lock()
		free := w.cfg.MaxBuffered - w.buffered
		w.mu.Unlock()
		probing := w.eng.Health() != nil
		if probing {
			free = min(free, 1)
		}
		if free <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.space:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		fs := w.cl.PollRecords(ctx, free)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, part int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			w.log.Warn("fetch failed", slog.String("fetch_topic", topic), slog.Int("partition", int(part)), slog.Any("error", err))
		})
		if fs.IsClientClosed() {
			return
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			w.dispatch(r)
		})
		w.cfg.Metrics.Received(n)
		if probing && n > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w.cfg.ProbeInterval):
			}
		}
	}
}

// dispatch queues r behind its key in its partition, starting the key's
// lane if idle. A record of a partition not owned, or seen already in this
// ownership (a fetch from before a revoke), is dropped.
func (w *Worker) dispatch(r *kgo.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[tp{r.Topic, r.Partition}]
	if p == nil || p.stopped || r.Offset < p.next {
		return
	}
	p.next = r.Offset + 1
	e := &entry{rec: r}
	p.pending = append(p.pending, e)
	w.buffered++
	key := w.laneKey(r)
	l := p.lanes[key]
	if l == nil {
		l = &lane{p: p, key: key}
		p.lanes[key] = l
	}
	l.queue = append(l.queue, e)
	if !l.busy {
		l.busy = true
		w.makeReady(l)
	}
}

// makeReady queues l for a runner; under mu.
func (w *Worker) makeReady(l *lane) {
	w.ready = append(w.ready, l)
	w.readyCond.Signal()
}

// laneKey is the lane of r within its partition: one for the partition
// with PartitionOrder, else the record's key; records without a key each
// have their own.
func (w *Worker) laneKey(r *kgo.Record) string {
	switch {
	case w.cfg.PartitionOrder:
		return ""
	case r.Key == nil:
		return "\x00" + strconv.FormatInt(r.Offset, 10)
	default:
		return "k" + string(r.Key)
	}
}

// runner runs lanes' head records, one at a time, in the order the lanes
// became ready, until the worker closes. Concurrency runners run at once:
// a goroutine per runner, not per record.
func (w *Worker) runner() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.ready) == 0 && !w.closing {
			w.readyCond.Wait()
		}
		if len(w.ready) == 0 {
			return
		}
		l := w.ready[0]
		w.ready[0] = nil
		w.ready = w.ready[1:]
		w.runHead(l)
	}
}

// runHead delivers l's head record once and then queues l again, for its
// next record or, after the retry delay, for the same one; or ends it.
// Called under mu, which it releases while the record runs.
func (w *Worker) runHead(l *lane) {
	p := l.p
	if p.stopped || len(l.queue) == 0 {
		w.endLane(l)
		return
	}
	e := l.queue[0]
	e.attempt++
	if e.attempt == 1 {
		e.first = w.cfg.Now()
	}
	p.running.Add(1)
	w.running.Add(1)
	w.mu.Unlock()
	w.inFlight.Add(1)
	s := &settler{w: w, p: p, e: e, attempt: e.attempt}
	done := w.deliver(p, e, e.attempt, e.first, s)
	w.inFlight.Add(-1)
	if done {
		w.settle(p, e)
	}
	p.running.Done()
	w.running.Done()
	w.mu.Lock()
	switch {
	case p.stopped:
		// Dropped with its partition: the record, if unsettled, is the
		// next owner's, or this member's again from the committed offset.
		w.endLane(l)
	case !done:
		l.retry = time.AfterFunc(s.delay, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			l.retry = nil
			if p.stopped {
				w.endLane(l)
				return
			}
			w.makeReady(l)
		})
	default:
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if len(l.queue) == 0 {
			w.endLane(l)
			return
		}
		w.makeReady(l)
	}
}

// endLane forgets l; under mu.
func (w *Worker) endLane(l *lane) {
	l.queue, l.busy = nil, false
	if l.p.lanes[l.key] == l {
		delete(l.p.lanes, l.key)
	}
}

// deliver runs the protocol for one delivery of e's record and carries out
// its disposition with s; it reports whether the record is settled.
func (w *Worker) deliver(p *partition, e *entry, attempt int, first time.Time, s *settler) bool {
	r := e.rec
	m := worker.Message{
		ID:            fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset),
		Body:          string(r.Value),
		Attempt:       attempt,
		FirstReceived: first,
		Redelivered:   attempt > 1,
		Native:        r,
	}
	if len(r.Headers) > 0 {
		m.Attributes = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			m.Attributes[h.Key] = string(h.Value)
		}
	}
	start := w.cfg.Now()
	watchdog := start.Add(w.cfg.HoldFor)
	h := worker.Hold{
		Until:    start.Add(w.cfg.Lease),
		Interval: w.cfg.RenewInterval,
		RenewAt:  start.Add(w.cfg.RenewInterval),
		// Kafka holds nothing: the claim's lease stands alone. It is
		// renewed while the record runs, even after its partition was
		// revoked (the next owner finds the key held and waits), up to
		// HoldFor: the watchdog kgo lacks.
		Extend: func(context.Context) (time.Time, error) {
			now := w.cfg.Now()
			if now.After(watchdog) {
				return time.Time{}, nil
			}
			return now.Add(w.cfg.Lease), nil
		},
		Stop:      p.stop,
		HoldUntil: watchdog,
	}
	disp := w.eng.Process(w.hctx, &m, h)
	if disp.Action == worker.Leave {
		// The lease was lost or the outcome is unknown: try again once the
		// lease has surely ended.
		s.delay = w.cfg.Lease
	}
	return disp.Settle(s)
}

// settle marks e settled and advances its partition's committable prefix.
func (w *Worker) settle(p *partition, e *entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.settled = true
	if w.commitPastUnsettled && e.rec.Offset+1 > p.commit.Offset {
		p.commit = kgo.EpochOffset{Epoch: e.rec.LeaderEpoch, Offset: e.rec.Offset + 1}
	}
	n := 0
	for n < len(p.pending) && p.pending[n].settled {
		n++
	}
	if n == 0 || p.gone {
		return
	}
	last := p.pending[n-1].rec
	if !w.commitPastUnsettled || last.Offset+1 > p.commit.Offset {
		p.commit = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
	}
	p.pending = p.pending[n:]
	w.buffered -= n
	select {
	case w.space <- struct{}{}:
	default:
	}
}

// settler carries out a record's disposition.
type settler struct {
	w       *Worker
	p       *partition
	e       *entry
	attempt int
	delay   time.Duration // ReturnAfter
}

func (s *settler) Ack() {}

func (s *settler) ReturnAfter(delay time.Duration) { s.delay = delay }

// DeadLetter writes the record to the dead-letter topic and waits for the
// write to be acknowledged; a failed write is retried with backoff until
// it succeeds or the partition stops (then the record is not settled and
// its offset not committed).
func (s *settler) DeadLetter(reason string) bool {
	w, r := s.w, s.e.rec
	dl := &kgo.Record{Topic: w.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value}
	dl.Headers = append(dl.Headers, r.Headers...)
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderAttempt, Value: []byte(strconv.Itoa(s.attempt))},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderTimestamp, Value: []byte(strconv.FormatInt(r.Timestamp.UnixMilli(), 10))},
		kgo.RecordHeader{Key: HeaderKey, Value: r.Key},
	)
	log := w.log.With(slog.String("message_id", fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)))
	wait := w.cfg.MinRetryBackoff
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.cl.ProduceSync(ctx, dl).FirstErr()
		cancel()
		if err == nil {
			w.cfg.Metrics.Record(log, slog.LevelWarn, worker.OutcomeDeadLettered, "dead-lettered",
				slog.String("reason", reason), slog.String("dead_letter_topic", w.cfg.DeadLetterTopic))
			return true
		}
		w.cfg.Metrics.Record(log, slog.LevelError, worker.OutcomeSendFailed, "dead-letter write failed; not committing the record, retrying the write",
			slog.Any("error", err), slog.String("retry_in", wait.String()))
		select {
		case <-time.After(wait):
		case <-s.p.stop:
			return false
		}
		wait = min(2*wait, w.cfg.MaxHoldBackoff)
	}
}
