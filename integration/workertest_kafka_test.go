package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/workertest"
)

// The door contract (package workertest) run against kfake over the wire:
// the Kafka transport (package kafkaworker), each scenario with its own
// topic, dead-letter topic, consumer group and claim store (the memory
// store: the consumers run in this process, and the store is not what is
// under test here). Each consumer is one process: its broker connections
// go through its gate's dialer, which makes the faults on the wire (a
// crash cuts them and refuses new ones; a lost ack is an OffsetCommit
// request whose connection is cut before it is sent; a broker outage cuts
// and refuses for a while), and its store calls through a gatedStore. The
// producer's and the suite's reads use their own clients, straight to the
// broker. An ack is a commit: Acked is every record below its partition's
// committed offset that was not dead-lettered.

// Kafka's timings for the suite: short, so that a rebalance after a dead
// member comes within seconds.
const (
	kafkaSession   = 4 * time.Second
	kafkaRebalance = 5 * time.Second
	kafkaLease     = 3 * time.Second
	kafkaShutdown  = 2 * time.Second
)

// kafkaBrokers returns the brokers of the cluster emulator/with-kafka.sh
// started, skipping the test without one (failing it under `make test`).
func kafkaBrokers(tb testing.TB) []string {
	tb.Helper()
	b := os.Getenv("KAFKA_BROKERS")
	if b == "" {
		if os.Getenv("CLAIMFIRST_KAFKA") != "" || os.Getenv(awstest.RequiredEnv) != "" {
			tb.Fatalf("KAFKA_BROKERS is not set under `make test`: the Kafka launcher did not export it")
		}
		tb.Skip("needs a Kafka cluster: run under emulator/with-kafka.sh (make test does)")
	}
	return strings.Split(b, ",")
}

func TestWorkertestKafka(t *testing.T) {
	brokers := kafkaBrokers(t)
	t.Parallel()
	workertest.RunAll(t, func(t workertest.T, o workertest.Options) workertest.Harness {
		return newKafkaDoor(t, brokers)
	})
}

// kafkaDoor is the Kafka side of a workertest harness.
type kafkaDoor struct {
	t       workertest.T
	brokers []string
	topic   string
	dlt     string
	group   string
	store   *memory.Store
	prod    *kgo.Client // the producer: straight to the broker
	adm     *kadm.Client
	reader  *kgo.Client // reads the topic and the dead-letter topic

	lose   atomic.Bool
	lost   atomic.Int64
	outage atomic.Bool

	mu        sync.Mutex
	records   map[int32]map[int64]string // partition -> offset -> body
	dead      []workertest.DeadLetter
	deadAt    map[int32]map[int64]bool // original partition -> offset, dead-lettered
	gates     []*kafkaGate
	consumers []*kafkaConsumer
}

var _ workertest.Harness = (*kafkaDoor)(nil)

func newKafkaDoor(t workertest.T, brokers []string) *kafkaDoor {
	t.Helper()
	ctx := context.Background()
	name := awstest.Name("door")
	d := &kafkaDoor{t: t, brokers: brokers, topic: name, dlt: name + kafkaworker.DeadLetterSuffix, group: name + "-group",
		store: memory.New(memory.Config{}), records: map[int32]map[int64]string{}, deadAt: map[int32]map[int64]bool{}}
	var err error
	if d.prod, err = kgo.NewClient(kgo.SeedBrokers(brokers...)); err != nil {
		t.Fatalf("producer: %v", err)
	}
	t.Cleanup(d.prod.Close)
	d.adm = kadm.NewClient(d.prod)
	if _, err := d.adm.CreateTopic(ctx, 2, 1, nil, d.topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if _, err := d.adm.CreateTopic(ctx, 1, 1, nil, d.dlt); err != nil {
		t.Fatalf("create dead-letter topic: %v", err)
	}
	if d.reader, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(d.topic, d.dlt),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond)); err != nil {
		t.Fatalf("reader: %v", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.read(rctx) }()
	t.Cleanup(func() { cancel(); <-done; d.reader.Close() })
	return d
}

// read keeps the topic's records and the dead letters.
func (d *kafkaDoor) read(ctx context.Context) {
	for ctx.Err() == nil {
		fs := d.reader.PollFetches(ctx)
		d.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == d.topic {
				if d.records[r.Partition] == nil {
					d.records[r.Partition] = map[int64]string{}
				}
				d.records[r.Partition][r.Offset] = string(r.Value)
				return
			}
			dl := workertest.DeadLetter{Body: string(r.Value)}
			var part, off int64 = -1, -1
			for _, h := range r.Headers {
				switch h.Key {
				case kafkaworker.HeaderReason:
					dl.Reason = string(h.Value)
				case kafkaworker.HeaderPartition:
					part, _ = strconv.ParseInt(string(h.Value), 10, 32)
				case kafkaworker.HeaderOffset:
					off, _ = strconv.ParseInt(string(h.Value), 10, 64)
				}
			}
			d.dead = append(d.dead, dl)
			if d.deadAt[int32(part)] == nil {
				d.deadAt[int32(part)] = map[int64]bool{}
			}
			d.deadAt[int32(part)][off] = true
		})
		d.mu.Unlock()
	}
}

func (d *kafkaDoor) Timing() workertest.Timing {
	return workertest.Timing{Redelivery: kafkaSession + kafkaRebalance, Lease: kafkaLease, Shutdown: kafkaShutdown}
}

// Absent: the Kafka transport can do every fault and promise of the suite
// (Ordered: records of one key, the Message's Group, in order).
func (d *kafkaDoor) Absent(workertest.Capability) string { return "" }

func (d *kafkaDoor) Store() claimstore.Store { return d.store }

func (d *kafkaDoor) Send(ctx context.Context, m workertest.Message) error {
	r := &kgo.Record{Topic: d.topic, Value: []byte(m.Body)}
	if m.Group != "" {
		r.Key = []byte(m.Group)
	}
	return d.prod.ProduceSync(ctx, r).FirstErr()
}

func (d *kafkaDoor) Start(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	p.MinRetryBackoff = 200 * time.Millisecond
	p.MaxRetryBackoff = 2 * time.Second
	p.Retention = 30 * 24 * time.Hour
	g := &kafkaGate{d: d}
	d.mu.Lock()
	d.gates = append(d.gates, g)
	d.mu.Unlock()
	p.Store = gatedStore{Store: p.Store, g: &g.gate}
	c := &kafkaConsumer{d: d, g: g, p: p}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.consumers = append(d.consumers, c)
	d.mu.Unlock()
	d.t.Cleanup(func() { c.Crash(); _ = c.wait(context.Background()) })
	return c, nil
}

// committed returns the group's committed offset of each partition.
func (d *kafkaDoor) committed(ctx context.Context) (map[int32]int64, error) {
	offs, err := d.adm.FetchOffsets(ctx, d.group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == d.topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

func (d *kafkaDoor) Acked(ctx context.Context) ([]string, error) {
	committed, err := d.committed(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		var out []string
		complete := true
		for part, at := range committed {
			for off := int64(0); off < at; off++ {
				body, ok := d.records[part][off]
				if !ok {
					complete = false
					continue
				}
				if !d.deadAt[part][off] {
					out = append(out, body)
				}
			}
		}
		d.mu.Unlock()
		if complete || time.Now().After(deadline) {
			return out, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *kafkaDoor) DeadLetters(context.Context) ([]workertest.DeadLetter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]workertest.DeadLetter(nil), d.dead...), nil
}

func (d *kafkaDoor) Unsettled(ctx context.Context) (int, error) {
	ends, err := d.adm.ListEndOffsets(ctx, d.topic)
	if err != nil {
		return 0, err
	}
	committed, err := d.committed(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		n += int(o.Offset - max(committed[o.Partition], 0))
	})
	return n, nil
}

// Redeliver restarts every live consumer: it leaves the group and joins it
// again (a rebalance), and each partition is fetched again from its
// committed offset.
func (d *kafkaDoor) Redeliver(ctx context.Context) error {
	d.mu.Lock()
	cs := append([]*kafkaConsumer(nil), d.consumers...)
	d.mu.Unlock()
	var errs []error
	for _, c := range cs {
		if err := c.restart(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *kafkaDoor) LoseAcks(on bool) (int, error) {
	d.lose.Store(on)
	return int(d.lost.Load()), nil
}

func (d *kafkaDoor) BrokerOutage(on bool) error {
	d.outage.Store(on)
	if on {
		d.mu.Lock()
		gs := append([]*kafkaGate(nil), d.gates...)
		d.mu.Unlock()
		for _, g := range gs {
			g.cut()
		}
	}
	return nil
}

// kafkaGate is one consumer process's way to the brokers: its dialer
// wraps each connection so that the faults happen on the wire.
type kafkaGate struct {
	gate
	d *kafkaDoor

	mu    sync.Mutex
	conns map[*faultConn]struct{}
}

var errRefused = errors.New("door: connection refused (injected)")

func (g *kafkaGate) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if g.dead.Load() || g.d.outage.Load() {
		return nil, errRefused
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, g: g}
	g.mu.Lock()
	if g.conns == nil {
		g.conns = map[*faultConn]struct{}{}
	}
	g.conns[fc] = struct{}{}
	g.mu.Unlock()
	return fc, nil
}

// cut closes every connection of the gate.
func (g *kafkaGate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		_ = c.Close()
		delete(g.conns, c)
	}
}

func (g *kafkaGate) kill() {
	g.crash()
	g.cut()
}

// faultConn is a consumer's connection to a broker. Writes are whole
// requests (franz-go writes each in one call); one whose API key is
// OffsetCommit (8) is the ack: lost (the connection cut before it is
// sent) while acks are lost, or the crash of an armed CrashAtAck.
type faultConn struct {
	net.Conn
	g *kafkaGate
}

const offsetCommitKey = 8

func (c *faultConn) Write(b []byte) (int, error) {
	g := c.g
	if g.dead.Load() || g.d.outage.Load() {
		_ = c.Close()
		return 0, errRefused
	}
	if len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == offsetCommitKey {
		if g.crashAck.Load() {
			g.kill()
			return 0, errRefused
		}
		if g.d.lose.Load() {
			g.d.lost.Add(1)
			_ = c.Close()
			return 0, errors.New("door: the commit is lost (injected)")
		}
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Read(b []byte) (int, error) {
	if c.g.dead.Load() || c.g.d.outage.Load() {
		_ = c.Close()
		return 0, errRefused
	}
	return c.Conn.Read(b)
}

// kafkaConsumer is one consumer process running a kafkaworker.Worker; a
// restart (Redeliver) runs a new Worker in the same process.
type kafkaConsumer struct {
	d *kafkaDoor
	g *kafkaGate
	p worker.Protocol

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func (c *kafkaConsumer) start(ctx context.Context) error {
	w, err := kafkaworker.New(ctx, kafkaworker.Config{
		Protocol: c.p, Brokers: c.d.brokers, Topic: c.d.topic, Group: c.d.group,
		Concurrency: 4, Lease: kafkaLease, RenewInterval: time.Second, SessionTimeout: kafkaSession,
		RebalanceTimeout: kafkaRebalance, RevokeGrace: 2 * time.Second, CommitInterval: 200 * time.Millisecond,
		HoldFor: time.Minute, MaxHoldBackoff: 500 * time.Millisecond, ProbeInterval: 500 * time.Millisecond,
		ShutdownTimeout: kafkaShutdown, ClientOptions: []kgo.Opt{kgo.Dialer(c.g.dial)},
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	c.mu.Lock()
	c.cancel, c.done = cancel, done
	c.mu.Unlock()
	return nil
}

// wait stops the running Worker and waits for Run.
func (c *kafkaConsumer) wait(ctx context.Context) error {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case err := <-done:
		done <- err // for the next wait
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *kafkaConsumer) restart(ctx context.Context) error {
	c.mu.Lock()
	skip := c.stopped || c.g.dead.Load()
	c.mu.Unlock()
	if skip {
		return nil
	}
	_ = c.wait(ctx)
	if c.g.dead.Load() {
		return nil
	}
	return c.start(ctx)
}

func (c *kafkaConsumer) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	return c.wait(ctx)
}

func (c *kafkaConsumer) Crash() {
	c.g.kill()
	c.mu.Lock()
	c.stopped = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *kafkaConsumer) CrashAtAck() { c.g.crashAck.Store(true) }

func (c *kafkaConsumer) Dead() bool { return c.g.dead.Load() }

// String names the consumer in failures.
func (c *kafkaConsumer) String() string { return fmt.Sprintf("kafka consumer of %s", c.d.group) }
