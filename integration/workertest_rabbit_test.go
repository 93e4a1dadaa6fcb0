package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
	"github.com/claimfirst/claimfirst/worker/workertest"
)

// The door contract (package workertest) run against a real RabbitMQ
// broker (emulator/with-rabbitmq.sh). Each scenario gets its own queue and
// dead-letter queue (declared by rabbitworker.Setup) and a memory claim
// store. Each consumer reaches the broker through its own AMQP-aware TCP
// proxy (amqpProxy), which reads the frames it forwards: it records what
// the broker delivered and which acks it passed on (the suite's Acked),
// drops acks to lose them, cuts connections for Redeliver, the broker
// outage and a crash. A crashed consumer's store calls fail from then on,
// as if its process had died; its handlers' effects are not counted.

const (
	rabbitLease    = 2 * time.Second
	rabbitShutdown = time.Second
)

// rabbitRequiredEnv is set by the RabbitMQ launcher: a test without
// AMQP_URL then fails instead of skipping.
const rabbitRequiredEnv = "CLAIMFIRST_RABBITMQ"

func amqpURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		if os.Getenv(rabbitRequiredEnv) != "" {
			t.Fatalf("%s is set but AMQP_URL is not: the RabbitMQ launcher did not export it", rabbitRequiredEnv)
		}
		t.Skip("needs RabbitMQ: run `make test`, or emulator/with-rabbitmq.sh go test ..., or set AMQP_URL")
	}
	return u
}

func TestWorkertestRabbit(t *testing.T) {
	u := amqpURL(t)
	t.Parallel()
	var n atomic.Int64
	workertest.RunAll(t, func(t workertest.T, o workertest.Options) workertest.Harness {
		d := newRabbitDoor(t, u, fmt.Sprintf("door-%d-%d", time.Now().UnixNano(), n.Add(1)))
		d.ordered = o.Ordered
		return d
	})
}

// rabbitDoor is the RabbitMQ side of a workertest harness.
type rabbitDoor struct {
	t     workertest.T
	url   string
	queue string
	dlq   string
	store claimstore.Store
	conn  *amqp.Connection // the producer's and the suite's, straight to the broker

	// ordered: one delivery at a time (prefetch 1), the queue's order:
	// a failure is retried in process, never requeued behind the others.
	ordered  bool
	loseAcks atomic.Bool
	outage   atomic.Bool

	mu       sync.Mutex
	pubCh    *amqp.Channel
	proxies  []*amqpProxy
	acked    []string
	lost     int
	deadSent map[string]int
	dead     []workertest.DeadLetter
}

func newRabbitDoor(t workertest.T, u, queue string) *rabbitDoor {
	t.Helper()
	d := &rabbitDoor{t: t, url: u, queue: queue, dlq: rabbitworker.DeadLetterQueueOf(queue), store: memory.New(memory.Config{}), deadSent: map[string]int{}}
	ctx := context.Background()
	// A short hop through the delay queue: the suite's retries that wait
	// longer than MaxReturnDelay go through it, and come back in time.
	if err := rabbitworker.Setup(ctx, u, rabbitworker.Topology{Queue: queue, DelayTTL: 500 * time.Millisecond}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	d.conn = conn
	if d.pubCh, err = conn.Channel(); err != nil {
		t.Fatalf("channel: %v", err)
	}
	if err := d.pubCh.Confirm(false); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	t.Cleanup(func() {
		d.mu.Lock()
		ps := d.proxies
		d.mu.Unlock()
		for _, p := range ps {
			p.close()
		}
		deleteTopology(conn, queue)
		_ = conn.Close()
	})
	return d
}

var _ workertest.Harness = (*rabbitDoor)(nil)

func (d *rabbitDoor) Timing() workertest.Timing {
	return workertest.Timing{Redelivery: 2 * time.Second, Lease: rabbitLease, Shutdown: rabbitShutdown}
}

func (d *rabbitDoor) Absent(c workertest.Capability) string {
	if c == workertest.Ordered && !d.ordered {
		return "asked through Options"
	}
	return ""
}

func (d *rabbitDoor) Store() claimstore.Store { return d.store }

func (d *rabbitDoor) Send(ctx context.Context, m workertest.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.pubCh.PublishWithDeferredConfirmWithContext(ctx, "", d.queue, true, false,
		amqp.Publishing{Body: []byte(m.Body), DeliveryMode: amqp.Persistent})
	if err != nil {
		return err
	}
	ok, err := c.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("publish nacked")
	}
	return nil
}

func (d *rabbitDoor) Start(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	p.MinRetryBackoff = 200 * time.Millisecond
	p.MaxRetryBackoff = 2 * time.Second
	p.OutageCover = 20 * time.Second
	p.Retention = time.Hour
	g := &gate{}
	p.Store = gatedStore{Store: p.Store, g: g}
	upstream, err := url.Parse(d.url)
	if err != nil {
		return nil, err
	}
	px, err := startAMQPProxy(d, g, upstream.Host)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.proxies = append(d.proxies, px)
	d.mu.Unlock()
	pu := *upstream
	pu.Host = px.addr()
	concurrency := 4
	if d.ordered {
		concurrency = 1
	}
	w, err := rabbitworker.New(ctx, rabbitworker.Config{
		Protocol: p, URL: pu.String(), Queue: d.queue, Concurrency: concurrency,
		Lease: rabbitLease, HoldFor: 3 * time.Second, MaxHoldBackoff: 500 * time.Millisecond,
		MaxReturnDelay: 2 * time.Second, ShutdownTimeout: rabbitShutdown,
		MinReconnect: 50 * time.Millisecond, MaxReconnect: 500 * time.Millisecond, DialTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lp := &longPoll{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { lp.done <- w.Run(rctx) }()
	rc := &rabbitConsumer{longPoll: lp, px: px}
	d.t.Cleanup(func() { rc.Crash(); _ = lp.Stop(context.Background()) })
	return rc, nil
}

// rabbitConsumer is a consumer: a worker behind its gate and its proxy.
type rabbitConsumer struct {
	*longPoll
	px *amqpProxy
}

func (c *rabbitConsumer) Crash() {
	c.g.crash()
	c.px.cut()
	c.cancel()
}

func (d *rabbitDoor) Acked(context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.acked...), nil
}

// DeadLetters takes what arrived in the dead-letter queue since the last
// call (basic.get, acked: the suite is its only reader) and returns all.
func (d *rabbitDoor) DeadLetters(context.Context) ([]workertest.DeadLetter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, err := d.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer func() { _ = ch.Close() }()
	for {
		m, ok, err := ch.Get(d.dlq, true)
		if err != nil {
			return nil, err
		}
		if !ok {
			return append([]workertest.DeadLetter(nil), d.dead...), nil
		}
		dl := workertest.DeadLetter{Body: string(m.Body)}
		if r, ok := m.Headers[rabbitworker.ReasonHeader].(string); ok {
			dl.Reason = r
		} else if r, ok := m.Headers["x-first-death-reason"].(string); ok {
			dl.Reason = r
		}
		d.dead = append(d.dead, dl)
	}
}

// Unsettled is what the queue holds ready plus what the consumers'
// connections hold delivered and not yet settled.
func (d *rabbitDoor) Unsettled(context.Context) (int, error) {
	ch, err := d.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(d.queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	n := q.Messages
	d.mu.Lock()
	ps := d.proxies
	d.mu.Unlock()
	for _, p := range ps {
		n += p.outstanding()
	}
	return n, nil
}

// Redeliver closes every consumer connection: the broker requeues what
// they held unacked, and the consumers reconnect.
func (d *rabbitDoor) Redeliver(context.Context) error {
	d.mu.Lock()
	ps := d.proxies
	d.mu.Unlock()
	for _, p := range ps {
		p.cut()
	}
	return nil
}

func (d *rabbitDoor) LoseAcks(on bool) (int, error) {
	d.loseAcks.Store(on)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost, nil
}

func (d *rabbitDoor) BrokerOutage(on bool) error {
	d.outage.Store(on)
	if on {
		return d.Redeliver(context.Background())
	}
	return nil
}

// amqpProxy forwards one consumer's connections to the broker frame by
// frame (AMQP 0-9-1: type, channel, size, payload, 0xCE), reading the
// deliveries, acks and dead-letter publishes it passes on.
type amqpProxy struct {
	d        *rabbitDoor
	g        *gate
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns map[*amqpLink]struct{}
}

type amqpLink struct {
	client, server net.Conn
	mu             sync.Mutex
	delivered      map[[2]uint64]string // (channel, tag) -> body, unsettled
}

func startAMQPProxy(d *rabbitDoor, g *gate, upstream string) (*amqpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &amqpProxy{d: d, g: g, ln: ln, upstream: upstream, conns: map[*amqpLink]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *amqpProxy) addr() string { return p.ln.Addr().String() }

func (p *amqpProxy) close() {
	_ = p.ln.Close()
	p.cut()
}

func (p *amqpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		_ = l.client.Close()
		_ = l.server.Close()
		delete(p.conns, l)
	}
}

func (p *amqpProxy) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.conns {
		l.mu.Lock()
		n += len(l.delivered)
		l.mu.Unlock()
	}
	return n
}

func (p *amqpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.g.dead.Load() || p.d.outage.Load() {
			_ = c.Close() // the broker is unreachable, or the process dead
			continue
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &amqpLink{client: c, server: s, delivered: map[[2]uint64]string{}}
		p.mu.Lock()
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		end := func() {
			_ = c.Close()
			_ = s.Close()
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
		}
		go func() { defer end(); p.pipe(l, c, s, true) }()
		go func() { defer end(); p.pipe(l, s, c, false) }()
	}
}

// frame is one AMQP frame, whole.
type frame struct {
	typ     byte
	channel uint16
	payload []byte
	raw     []byte
}

func readFrame(r *bufio.Reader) (frame, error) {
	head := make([]byte, 7)
	if _, err := io.ReadFull(r, head); err != nil {
		return frame{}, err
	}
	size := binary.BigEndian.Uint32(head[3:7])
	rest := make([]byte, size+1)
	if _, err := io.ReadFull(r, rest); err != nil {
		return frame{}, err
	}
	raw := make([]byte, 0, len(head)+len(rest))
	raw = append(raw, head...)
	raw = append(raw, rest...)
	return frame{typ: head[0], channel: binary.BigEndian.Uint16(head[1:3]), payload: rest[:size], raw: raw}, nil
}

// shortstr reads an AMQP short string at b[i:], returning it and the index after.
func shortstr(b []byte, i int) (string, int) {
	if i >= len(b) {
		return "", i
	}
	n := int(b[i])
	if i+1+n > len(b) {
		return "", len(b)
	}
	return string(b[i+1 : i+1+n]), i + 1 + n
}

// content gathers the body following a method frame on a channel.
type content struct {
	tag    uint64 // deliver: the delivery tag; publish: 0
	dlq    bool   // publish to the dead-letter queue
	size   uint64
	body   []byte
	active bool
}

// pipe forwards frames from src to dst; fromBroker says which way.
func (p *amqpProxy) pipe(l *amqpLink, dst, src net.Conn, fromBroker bool) {
	r := bufio.NewReader(src)
	if !fromBroker {
		// The protocol header: "AMQP" 0 0 9 1.
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		if _, err := dst.Write(hdr); err != nil {
			return
		}
	}
	pending := map[uint16]*content{}
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		forward := true
		switch f.typ {
		case 1: // method
			if len(f.payload) < 4 {
				break
			}
			class, method := binary.BigEndian.Uint16(f.payload[0:2]), binary.BigEndian.Uint16(f.payload[2:4])
			args := f.payload[4:]
			switch {
			case fromBroker && class == 60 && method == 60: // basic.deliver
				_, i := shortstr(args, 0)
				if i+8 <= len(args) {
					pending[f.channel] = &content{tag: binary.BigEndian.Uint64(args[i : i+8]), active: true}
				}
			case !fromBroker && class == 60 && method == 40: // basic.publish
				_, i := shortstr(args, 2)
				key, _ := shortstr(args, i)
				pending[f.channel] = &content{dlq: key == p.d.dlq, active: true}
			case !fromBroker && class == 60 && (method == 80 || method == 90 || method == 120): // ack, reject, nack
				if len(args) < 8 {
					break
				}
				tag := binary.BigEndian.Uint64(args[0:8])
				forward = p.settle(l, f.channel, tag, method == 80)
			}
		case 2: // content header: class, weight, body size
			if c := pending[f.channel]; c != nil && len(f.payload) >= 12 {
				c.size = binary.BigEndian.Uint64(f.payload[4:12])
				if c.size == 0 {
					p.gathered(l, f.channel, c, fromBroker)
					delete(pending, f.channel)
				}
			}
		case 3: // body
			if c := pending[f.channel]; c != nil {
				c.body = append(c.body, f.payload...)
				if uint64(len(c.body)) >= c.size {
					p.gathered(l, f.channel, c, fromBroker)
					delete(pending, f.channel)
				}
			}
		}
		if !forward {
			continue
		}
		if _, err := dst.Write(f.raw); err != nil {
			return
		}
	}
}

func (p *amqpProxy) gathered(l *amqpLink, channel uint16, c *content, fromBroker bool) {
	if fromBroker {
		l.mu.Lock()
		l.delivered[[2]uint64{uint64(channel), c.tag}] = string(c.body)
		l.mu.Unlock()
		return
	}
	if c.dlq {
		p.d.mu.Lock()
		p.d.deadSent[string(c.body)]++
		p.d.mu.Unlock()
	}
}

// settle records an ack (or a requeue) the consumer sends and reports
// whether to pass it on: a lost ack is dropped, and an ack of an armed
// consumer crashes it instead.
func (p *amqpProxy) settle(l *amqpLink, channel uint16, tag uint64, ack bool) bool {
	k := [2]uint64{uint64(channel), tag}
	if ack && p.g.crashAck.Load() {
		p.g.crash()
		go p.cut()
		return false
	}
	if p.g.dead.Load() {
		return false
	}
	l.mu.Lock()
	body, ok := l.delivered[k]
	if ack && p.d.loseAcks.Load() {
		l.mu.Unlock()
		p.d.mu.Lock()
		p.d.lost++
		p.d.mu.Unlock()
		// Lost on the wire: the connection breaks after the ack was
		// written and before the broker read it, so the broker requeues.
		go func() { _ = l.client.Close(); _ = l.server.Close() }()
		return false
	}
	delete(l.delivered, k)
	l.mu.Unlock()
	if !ok || !ack {
		return true
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if p.d.deadSent[body] > 0 { // the ack that ends a dead-lettering is no ack
		p.d.deadSent[body]--
		return true
	}
	p.d.acked = append(p.d.acked, body)
	return true
}
