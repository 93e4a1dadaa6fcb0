package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

// Experiment 9's cluster and group: a topic of kafkaPartitions partitions
// on an in-process kfake cluster, and timeouts far shorter than
// production's so that a dead member's partitions move within a second.
const (
	kafkaTopic      = "payments"
	kafkaGroup      = "charges"
	kafkaPartitions = 6
	// kafkaSession is the group session timeout: a member silent for
	// longer loses its partitions.
	kafkaSession = 1500 * time.Millisecond
	// kafkaLease is the claims' lease, shorter than the session timeout so
	// that a dead member's claims have ended when its partitions move, and
	// long enough that a busy test machine's stalls do not end a live one
	// (a handler whose lease ends on its clock is cancelled, and its charge,
	// its outcome unknown, is made again by the next holder).
	kafkaLease = 1200 * time.Millisecond
	// kafkaRebalance is the group's rebalance timeout.
	kafkaRebalance = 3 * time.Second
	// kafkaProduceSpan is how long the producer takes to produce the
	// payments, at an even pace, so that the join and the death happen while
	// the group consumes.
	kafkaProduceSpan = 1500 * time.Millisecond
	// kafkaChargeLatency is how long a charge takes: a consumer that
	// charges one record at a time keeps up with the producer only just,
	// so it has records polled and not yet committed when it dies.
	kafkaChargeLatency = 2 * time.Millisecond
	// kafkaProduceSteps is how many batches the producer sends in that time.
	kafkaProduceSteps = 40
	// kafkaRetention is the claims' retention: longer than kfake's default
	// retention.ms of seven days plus the worker's margins.
	kafkaRetention = 30 * 24 * time.Hour
	// kafkaQuiet ends a row that stopped moving without every record
	// committed: nothing charged and no offset committed for this long.
	kafkaQuiet = 6 * time.Second
	// kafkaDrainWait bounds how long a dying claim-based member waits for its
	// charges under way to be completed before it is cut off.
	kafkaDrainWait = 5 * time.Second
)

// kafkaResult is what experiment 9 measured: a consumer group on an
// in-process Kafka cluster charging payments, some produced twice, while a
// member joins and another dies.
type kafkaResult struct {
	// Plain is a franz-go consumer that charges each record, then commits
	// what it polled.
	Plain kafkaRow
	// Claims is kafkaworker.Worker members, claiming the payment id.
	Claims kafkaRow
}

// kafkaRow is one consumer's numbers in experiment 9.
type kafkaRow struct {
	// Records is the number of records produced: every payment once, the
	// producer's retries twice.
	Records int
	// Payments is the number of distinct payments.
	Payments int
	// Charges is the number of charges the provider made.
	Charges int
	// ReadAgain counts the reads beyond one per record: the records the
	// members read, summed, less the records produced. A rebalance and the
	// dead member's uncommitted records make them.
	ReadAgain int
	// Uncommitted is the sum over the partitions of the end offset minus
	// the group's committed offset, at the end: 0 when every record is
	// committed.
	Uncommitted int64
	// Elapsed is the row's wall time, cluster start to members stopped.
	Elapsed time.Duration
	// effects counts the payments charged more than once, or never.
	effects
}

func (r kafkaResult) rows() []tableRow {
	row := func(label string, x kafkaRow) tableRow {
		return tableRow{label, []pair{
			{"records", x.Records}, {"payments", x.Payments}, {"read again", x.ReadAgain}, {"charges", x.Charges}, {"uncommitted", int(x.Uncommitted)},
		}, x.effects}
	}
	return []tableRow{
		row(labelKafkaPlain, r.Plain),
		row(labelKafkaClaims, r.Claims),
	}
}

const (
	labelKafkaPlain  = "charge, then commit"
	labelKafkaClaims = "claim first (kafkaworker)"
)

// runKafka runs experiment 9: opts.Payments payments produced to a topic
// of six partitions over 1.5 s, 1 in 20 (chosen by opts.Seed) produced a
// second time, at a later offset, as a producer's retry does. Two members
// consume from the start; a third joins when a quarter of the records are
// produced; when half are, and the group is stable, the first member dies:
// its connections are cut and it never leaves the group, after the charges
// it had started were made (and, with claims, completed) and before its
// offsets were committed. Its partitions move after the session timeout of
// 1.5 s. The provider ignores idempotency keys, so the charges count what the
// consumers did alone.
func runKafka(ctx context.Context, opts Options) (kafkaResult, error) {
	if err := opts.setDefaults(); err != nil {
		return kafkaResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	twice := choose(ps, redeliverEvery, opts.Seed, saltKafka)
	var res kafkaResult
	var err error
	if res.Plain, err = runKafkaRow(ctx, opts, "kafka-plain", labelKafkaPlain, false, ps, twice); err != nil {
		return res, err
	}
	res.Claims, err = runKafkaRow(ctx, opts, "kafka-claims", labelKafkaClaims, true, ps, twice)
	return res, err
}

// kafkaMember is one member of the consumer group.
type kafkaMember interface {
	// reads returns how many records the member read.
	reads() int
	// die stops the member charging, and cuts it off from the cluster (and
	// from the claim store) without leaving the group.
	die()
	// stop ends the member: it reconnects only to leave the group and close.
	stop() error
}

// runKafkaRow runs one row of experiment 9 on a fresh cluster and provider.
func runKafkaRow(ctx context.Context, opts Options, id, label string, claims bool, ps []provider.Payment, twice map[string]bool) (kafkaRow, error) {
	start := time.Now()
	spec := rowSpec{id: id, label: label, fake: fakeprovider.Config{IgnoreKeys: true, Latency: kafkaChargeLatency}, client: oneAttempt, claims: claims}
	r, err := newRow(ctx, opts, spec)
	if err != nil {
		return kafkaRow{}, err
	}
	defer r.close()
	fail := func(err error) (kafkaRow, error) { return kafkaRow{}, fmt.Errorf("%s: %w", label, err) }
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(kafkaPartitions, kafkaTopic),
		kfake.SeedTopics(1, kafkaTopic+kafkaworker.DeadLetterSuffix),
		kfake.GroupMinSessionTimeout(kafkaSession/4),
	)
	if err != nil {
		return fail(fmt.Errorf("kfake: %w", err))
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return fail(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	// A handler's error stops the row: its numbers would mean nothing.
	var (
		errMu    sync.Mutex
		firstErr error
	)
	report := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	failed := func() error {
		errMu.Lock()
		defer errMu.Unlock()
		return firstErr
	}
	var members, all []kafkaMember
	var names []string
	defer func() {
		for _, m := range members {
			_ = m.stop()
		}
	}()
	join := func(name string) error {
		var m kafkaMember
		var err error
		if claims {
			m, err = startClaimMember(ctx, opts, r, addrs, name, report)
		} else {
			m, err = startPlainMember(ctx, opts, r, addrs, name, report)
		}
		if err != nil {
			return fmt.Errorf("member %s: %w", name, err)
		}
		members = append(members, m)
		all = append(all, m)
		names = append(names, name)
		return nil
	}
	for _, name := range []string{"a", "b"} {
		if err := join(name); err != nil {
			return fail(err)
		}
	}

	// The producer, at an even pace; a payment produced twice gets its
	// second copy one batch later, at a later offset of its partition.
	recs := kafkaRecords(ps, twice)
	var produced atomic.Int64
	prodErr := make(chan error, 1)
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	go func() { prodErr <- produce(pctx, admCl, recs, &produced) }()

	total := int64(len(recs))
	waitProduced := func(n int64) error {
		for produced.Load() < n {
			select {
			case err := <-prodErr:
				prodErr <- err
				if err != nil {
					return err
				}
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	if err := waitProduced(total / 4); err != nil {
		return fail(err)
	}
	if err := join("c"); err != nil {
		return fail(err)
	}
	if err := waitProduced(total / 2); err != nil {
		return fail(err)
	}
	// kfake's classic group coordinator can wedge when a leader dies in the
	// middle of a rebalance, which a real broker survives: the member dies
	// while the group is stable.
	g, err := waitStable(ctx, adm)
	if err != nil {
		return fail(err)
	}
	members[busiest(g, names)].die()
	if err := <-prodErr; err != nil {
		return fail(fmt.Errorf("produce: %w", err))
	}
	uncommitted, err := waitCommitted(ctx, adm, r.fake, failed)
	if err != nil {
		return fail(err)
	}
	var errs []error
	for _, m := range members {
		errs = append(errs, m.stop())
	}
	members = nil
	if err := errors.Join(append(errs, failed())...); err != nil {
		return fail(err)
	}
	read := 0
	for _, m := range all {
		read += m.reads()
	}
	st := r.fake.Stats()
	return kafkaRow{ReadAgain: read - len(recs),
		Records: len(recs), Payments: len(ps), Charges: int(st.Charges), Uncommitted: uncommitted,
		Elapsed: time.Since(start), effects: countEffects(paymentIDs(ps), st.ChargesByPayment),
	}, nil
}

// kafkaRecords returns the records to produce, in order: each payment, and
// the second copy of a payment produced twice after the next few.
func kafkaRecords(ps []provider.Payment, twice map[string]bool) []*kgo.Record {
	const retryLag = 3 // payments produced between a record and its retry
	rec := func(p provider.Payment) *kgo.Record {
		b, _ := json.Marshal(p) // a Payment always marshals
		return &kgo.Record{Topic: kafkaTopic, Key: []byte(p.PaymentID), Value: b}
	}
	var recs []*kgo.Record
	var retries []provider.Payment
	for i, p := range ps {
		recs = append(recs, rec(p))
		if twice[p.PaymentID] {
			retries = append(retries, p)
		}
		if len(retries) > 0 && (i%retryLag == retryLag-1 || i == len(ps)-1) {
			for _, q := range retries {
				recs = append(recs, rec(q))
			}
			retries = retries[:0]
		}
	}
	return recs
}

// produce sends recs in kafkaProduceSteps batches spread over
// kafkaProduceSpan, counting the records acknowledged in produced.
func produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, produced *atomic.Int64) error {
	step := (len(recs) + kafkaProduceSteps - 1) / kafkaProduceSteps
	begin := time.Now()
	for i := 0; i < len(recs); i += step {
		batch := recs[i:min(i+step, len(recs))]
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return err
		}
		produced.Add(int64(len(batch)))
		next := begin.Add(kafkaProduceSpan * time.Duration(i/step+1) / kafkaProduceSteps)
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// waitStable waits until the group is stable, its rebalance done, and
// returns it.
func waitStable(ctx context.Context, adm *kadm.Client) (kadm.DescribedGroup, error) {
	deadline := time.Now().Add(20 * kafkaSession)
	for {
		gs, err := adm.DescribeGroups(ctx, kafkaGroup)
		if err == nil {
			if g, ok := gs[kafkaGroup]; ok && g.Err == nil && g.State == "Stable" {
				return g, nil
			}
		}
		if time.Now().After(deadline) {
			return kadm.DescribedGroup{}, fmt.Errorf("group %s not stable after %s (kfake's coordinator wedged?)", kafkaGroup, 20*kafkaSession)
		}
		select {
		case <-ctx.Done():
			return kadm.DescribedGroup{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// busiest returns the index in names (the members' client ids) of the
// member of g assigned the most partitions, the first of them on a tie: the
// member that dies, so that the death moves partitions.
func busiest(g kadm.DescribedGroup, names []string) int {
	best, most := 0, -1
	for i, name := range names {
		n := 0
		for _, m := range g.Members {
			if m.ClientID != clientID(name) {
				continue
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					n += len(t.Partitions)
				}
			}
		}
		if n > most {
			best, most = i, n
		}
	}
	return best
}

// clientID is the Kafka client id of the member named name.
func clientID(name string) string { return "demo-" + name }

// waitCommitted waits until the group's committed offsets are the
// partitions' end offsets, or nothing was charged nor committed for
// kafkaQuiet, and returns how many records are left uncommitted.
func waitCommitted(ctx context.Context, adm *kadm.Client, fake *fakeprovider.Server, failed func() error) (int64, error) {
	var last struct {
		charges int64
		left    int64
		at      time.Time
	}
	last.left, last.at = -1, time.Now()
	for {
		left, err := uncommitted(ctx, adm)
		if err != nil {
			return 0, err
		}
		if left == 0 {
			return 0, nil
		}
		if err := failed(); err != nil {
			return 0, err
		}
		charges := fake.Stats().Charges
		if charges != last.charges || left != last.left {
			last.charges, last.left, last.at = charges, left, time.Now()
		} else if time.Since(last.at) > kafkaQuiet {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// uncommitted returns the sum over the topic's partitions of the end offset
// minus the group's committed offset (0 where none is committed).
func uncommitted(ctx context.Context, adm *kadm.Client) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, kafkaTopic)
	if err != nil {
		return 0, fmt.Errorf("end offsets: %w", err)
	}
	offs, err := adm.FetchOffsets(ctx, kafkaGroup)
	if err != nil {
		return 0, fmt.Errorf("committed offsets: %w", err)
	}
	var left int64
	var errs []error
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			errs = append(errs, lo.Err)
			return
		}
		var at int64
		if o, ok := offs.Lookup(lo.Topic, lo.Partition); ok && o.Err == nil && o.At > 0 {
			at = o.At
		}
		left += lo.Offset - at
	})
	return left, errors.Join(errs...)
}

// errCut is what a dead member's connections and store calls fail with.
var errCut = errors.New("demo: member cut off")

// wire dials a member's connections and can cut them all at once: a
// process that dies, or a network that drops it, without a word to the
// cluster.
type wire struct {
	mu    sync.Mutex
	cut   bool
	conns map[*wireConn]struct{}
}

type wireConn struct {
	net.Conn
	w *wire
}

func (c *wireConn) Close() error {
	c.w.mu.Lock()
	delete(c.w.conns, c)
	c.w.mu.Unlock()
	return c.Conn.Close()
}

// dial is the member's kgo.Dialer.
func (w *wire) dial(ctx context.Context, network, host string) (net.Conn, error) {
	w.mu.Lock()
	cut := w.cut
	w.mu.Unlock()
	if cut {
		return nil, errCut
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		_ = c.Close()
		return nil, errCut
	}
	wc := &wireConn{Conn: c, w: w}
	if w.conns == nil {
		w.conns = map[*wireConn]struct{}{}
	}
	w.conns[wc] = struct{}{}
	return wc, nil
}

// setCut cuts every connection and refuses new ones, or allows them again.
func (w *wire) setCut(cut bool) {
	w.mu.Lock()
	w.cut = cut
	var open []*wireConn
	if cut {
		for c := range w.conns {
			open = append(open, c)
		}
	}
	w.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// groupOpts are the group settings every member's client shares.
func groupOpts(addrs []string, name string, w *wire) []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(clientID(name)),
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(kafkaGroup),
		kgo.ConsumeTopics(kafkaTopic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(kafkaSession),
		kgo.RebalanceTimeout(kafkaRebalance),
		kgo.HeartbeatInterval(kafkaSession / 3),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.Dialer(w.dial),
	}
}

// readCount counts the records a member read: handed to its handler, or
// to the protocol (an in-process retry is not a new read; a record fetched
// again is).
type readCount struct{ n atomic.Int64 }

func (c *readCount) reads() int { return int(c.n.Load()) }

// plainMember is a consumer as teams write one with franz-go: poll, charge
// each record, commit what was polled.
type plainMember struct {
	readCount
	cl     *kgo.Client
	wire   *wire
	dying  atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startPlainMember(ctx context.Context, opts Options, r *row, addrs []string, name string, report func(error)) (*plainMember, error) {
	m := &plainMember{wire: &wire{}, done: make(chan struct{})}
	cl, err := kgo.NewClient(groupOpts(addrs, name, m.wire)...)
	if err != nil {
		return nil, err
	}
	m.cl = cl
	ctx, m.cancel = context.WithCancel(ctx)
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() || ctx.Err() != nil {
				return
			}
			for it := fs.RecordIter(); !it.Done(); {
				rec := it.Next()
				if m.dying.Load() {
					return // dead: no more charges, no commit
				}
				var p provider.Payment
				if err := json.Unmarshal(rec.Value, &p); err != nil {
					report(fmt.Errorf("record %s/%d/%d: %w", rec.Topic, rec.Partition, rec.Offset, err))
					return
				}
				m.n.Add(1)
				opts.progress.receive()
				if _, err := r.client.Charge(ctx, p.PaymentID, p); err != nil {
					if ctx.Err() == nil {
						report(fmt.Errorf("%s: %w", p.PaymentID, err))
					}
					return
				}
			}
			if m.dying.Load() {
				return
			}
			// An error here (a rebalance, a closing client) leaves the
			// records for the next poll or the next owner: charged again.
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}()
	return m, nil
}

func (m *plainMember) die() {
	m.dying.Store(true)
	m.wire.setCut(true)
}

func (m *plainMember) stop() error {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.wire.setCut(false) // to leave the group and close promptly
		m.cl.Close()
	})
	return nil
}

// claimMember is a kafkaworker.Worker charging through the handler below,
// over the row's claim store.
type claimMember struct {
	readCount
	w      *kafkaworker.Worker
	wire   *wire
	store  *cutStore
	gate   *chargeGate
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startClaimMember(ctx context.Context, opts Options, r *row, addrs []string, name string, report func(error)) (*claimMember, error) {
	m := &claimMember{wire: &wire{}, gate: &chargeGate{charging: map[string]int{}}, done: make(chan error, 1)}
	m.store = &cutStore{Store: r.store, gate: m.gate}
	dec := &payment.Decoder{KeyFrom: payment.KeyPaymentID}
	h := worker.HandlerFunc(func(ctx context.Context, msg *worker.Message) (string, error) {
		opts.progress.receive()
		p, ok := msg.Payload.(provider.Payment)
		if !ok {
			return "", fmt.Errorf("payload %T, want provider.Payment", msg.Payload)
		}
		if !m.gate.enter(msg.Key) {
			<-ctx.Done() // dead: this handler never returns in time
			return "", ctx.Err()
		}
		ch, err := r.client.Charge(ctx, msg.Key, p)
		if err != nil {
			m.gate.leave(msg.Key)
			if !m.gate.isDying() && ctx.Err() == nil && !unknown(err) {
				report(fmt.Errorf("%s: %w", msg.Key, err))
			}
			return "", err
		}
		return ch.ID, nil // the gate is left when the claim is completed
	})
	w, err := kafkaworker.New(ctx, kafkaworker.Config{
		Protocol: worker.Protocol{
			Store:   m.store,
			Handler: h,
			Decoder: worker.DecoderFunc(func(msg *worker.Message) error {
				if msg.Attempt == 1 {
					m.n.Add(1)
				}
				return dec.Decode(msg)
			}),
			Retention: kafkaRetention,
			Owner:     clientID(name),
			Logger:    slog.New(slog.DiscardHandler),
			Now:       r.clock.Now,
		},
		Brokers: addrs, Topic: kafkaTopic, Group: kafkaGroup,
		Concurrency:      opts.Workers,
		SessionTimeout:   kafkaSession,
		RebalanceTimeout: kafkaRebalance,
		Lease:            kafkaLease,
		ShutdownTimeout:  time.Second,
		ClientOptions: []kgo.Opt{
			kgo.ClientID(clientID(name)), kgo.Dialer(m.wire.dial), kgo.FetchMaxWait(100 * time.Millisecond),
		},
	})
	if err != nil {
		return nil, err
	}
	m.w = w
	rctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	go func() { m.done <- w.Run(rctx) }()
	return m, nil
}

// die lets the charges under way finish and their claims complete, then
// cuts the member off from the cluster and the claim store: a process that
// dies after its charges and before its offset commit.
func (m *claimMember) die() {
	m.gate.close(kafkaDrainWait)
	m.store.cut.Store(true)
	m.wire.setCut(true)
}

func (m *claimMember) stop() error {
	m.once.Do(func() {
		dead := m.gate.isDying()
		m.wire.setCut(false) // to leave the group and close promptly
		m.cancel()
		m.err = <-m.done
		if dead && errors.Is(m.err, kafkaworker.ErrShutdownTimeout) {
			m.err = nil // its handlers were stuck by design
		}
	})
	return m.err
}

// chargeGate counts a member's charges under way, by key, from the charge
// to the claim's completion, and closes for good when the member dies.
type chargeGate struct {
	mu       sync.Mutex
	dying    bool
	charging map[string]int
}

// enter reports whether the member may charge key, and counts the charge.
func (g *chargeGate) enter(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dying {
		return false
	}
	g.charging[key]++
	return true
}

// leave ends a charge of key counted by enter.
func (g *chargeGate) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.charging[key] > 0 {
		if g.charging[key]--; g.charging[key] == 0 {
			delete(g.charging, key)
		}
	}
}

func (g *chargeGate) isDying() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dying
}

// close refuses new charges and waits up to d for those under way.
func (g *chargeGate) close(d time.Duration) {
	g.mu.Lock()
	g.dying = true
	g.mu.Unlock()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		g.mu.Lock()
		n := len(g.charging)
		g.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// cutStore is a member's view of the claim store: every call fails once
// the member is cut off, and a completion ends the charge it completes.
type cutStore struct {
	claimstore.Store
	gate *chargeGate
	cut  atomic.Bool
}

func (s *cutStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if s.cut.Load() {
		return claimstore.Acquisition{}, errCut
	}
	return s.Store.Acquire(ctx, p)
}

func (s *cutStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if s.cut.Load() {
		return errCut
	}
	return s.Store.Renew(ctx, p)
}

func (s *cutStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if s.cut.Load() {
		return errCut
	}
	defer s.gate.leave(p.Key)
	return s.Store.Complete(ctx, p)
}

func (s *cutStore) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if s.cut.Load() {
		return errCut
	}
	return s.Store.Release(ctx, p)
}

func (s *cutStore) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if s.cut.Load() {
		return claimstore.Claim{}, errCut
	}
	return s.Store.Get(ctx, key)
}
