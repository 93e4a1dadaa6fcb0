package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// RabbitMQ's own faults, end to end with worker processes: two `worker
// run` processes on one queue, claims in PostgreSQL, each reaching the
// broker through its own proxy (rabbitCutProxy) that can cut its
// connections, or drop the next ack it sees and then cut (an ack written
// and lost on the way). The provider charges every request, key or not
// (fakeprovider IgnoreKeys): a payment run twice is charged twice. Each
// case injects one fault into the first worker and then checks that every
// payment was charged once, the queue and the dead-letter queue are empty
// once the workers stopped, and the worker that was not killed exits 0.
//
// Each case was seen failing against a worker binary built with a fault
// planted in rabbitworker (INTEGRATION_WORKER_BIN=<that binary>):
//
//   - ack before completion (deliver acks each delivery as it arrives and
//     settles nothing after): LostAck lost a payment (a delivery retried in
//     process was given up when its connection was cut, acked already);
//     KilledDuringInProcessRetry lost the 8 the killed worker held.
//   - stale tags (settle on the connection of the moment, as amqp091's
//     recovery does; Worker.tagReuse): DropMidHandler lost 11 payments, the
//     old handlers' acks settling the new connection's deliveries.
//   - renewals that end with the connection (Hold.Extend fails once the
//     delivery's incarnation ended): DropMidHandler charged 8 payments
//     twice, the other worker taking the keys over when their leases ran
//     out under handlers still charging.

// rabbitFault is one case: the provider's behaviour, when to inject the
// fault (polled with the provider's counts), and the fault, done to the
// first worker.
type rabbitFault struct {
	name   string
	fake   fakeprovider.Config
	env    []string // the workers' own settings
	when   func(st fakeprovider.Stats) bool
	inject func(t *testing.T, px *rabbitCutProxy, p *proc)
	killed bool // inject SIGKILLs the first worker
}

func TestRabbitProcessFaults(t *testing.T) {
	u := amqpURL(t)
	dbURL := pgtest.URL(t)
	t.Parallel()
	const n = 40
	for _, c := range []rabbitFault{
		{
			// A quarter charged: the first worker's next ack is dropped
			// and its connection cut. The broker redelivers the message
			// it did not see acked; its claim is completed, so it is
			// acked as a duplicate, charged nothing. A charge takes a
			// second, longer than the reconnection, and a third of the
			// payments fail once (retried in process): handlers of the
			// lost connection finish on the next one, and their late acks
			// must not settle that connection's deliveries.
			name: "LostAck",
			fake: fakeprovider.Config{Latency: time.Second, FailFirst: func(key string, _ provider.Payment) bool { return key[len(key)-1]%3 == 0 }},
			env:  []string{"PROVIDER_ATTEMPTS=1"},
			when: func(st fakeprovider.Stats) bool { return st.Charges >= n/4 },
			inject: func(t *testing.T, px *rabbitCutProxy, _ *proc) {
				px.cutAtNextAck()
			},
		},
		{
			// Handlers running (a charge takes 4s, longer than the 3s
			// lease): the first worker's connection is cut under them.
			// The broker redelivers at once; the other worker finds the
			// keys held and waits; the first worker renews their leases
			// though its connection is gone, its handlers finish, their
			// acks dropped with their connection, and their redeliveries
			// are acked as duplicates.
			name: "DropMidHandler",
			fake: fakeprovider.Config{Latency: 4 * time.Second},
			when: func(st fakeprovider.Stats) bool { return st.Calls >= 6 },
			inject: func(t *testing.T, px *rabbitCutProxy, _ *proc) {
				px.cut()
			},
		},
		{
			// Every payment's first charge fails retryably (503), so each
			// worker holds its deliveries unacked, retrying in process
			// under their claims; the first is SIGKILLed then. The broker
			// requeues what it held; the other worker waits for the dead
			// one's leases, takes the keys over and charges each once.
			name: "KilledDuringInProcessRetry",
			fake: fakeprovider.Config{FailFirst: func(string, provider.Payment) bool { return true }},
			env:  []string{"PROVIDER_ATTEMPTS=1"}, // the 503 fails the handler: the worker retries
			when: func(st fakeprovider.Stats) bool { return st.Faults >= 12 && st.Charges == 0 },
			inject: func(t *testing.T, _ *rabbitCutProxy, p *proc) {
				p.kill()
				if n := p.logCount("retrying in process"); n == 0 {
					t.Fatalf("%s held no delivery in an in-process retry when it was killed", p.name)
				} else {
					t.Logf("%s SIGKILLed with %d in-process retries logged", p.name, n)
				}
			},
			killed: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rabbitProcessFault(t, u, dbURL, n, c)
		})
	}
}

// rabbitProcessFault runs one case with n payments.
func rabbitProcessFault(t *testing.T, u, dbURL string, n int, c rabbitFault) {
	c.fake.IgnoreKeys = true
	fake, srv := fakeprovider.StartTest(t, c.fake)
	queue := pgtest.Name("rabbitfault")
	dlq := rabbitworker.DeadLetterQueueOf(queue)
	conn := dialTopology(t, u, queue)
	depth := func(q string) int {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ch.Close() }()
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Messages
	}

	env := slices.DeleteFunc(withoutBrokers(os.Environ()), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	env = append(env, "AMQP_QUEUE="+queue, "STORE=postgres", "DATABASE_URL="+dbURL, "CLAIM_TABLE="+pgtest.Name("claims"),
		"CLAIM_RETENTION=96h", "CLAIM_LEASE=3s")
	if code, stdout, stderr := runBinary(t, append(slices.Clip(env), "AMQP_URL="+u), "setup", "-postgres"); code != 0 {
		t.Fatalf("setup: exit %d\n%s%s", code, stdout, stderr)
	}

	ps := payments(queue, n)
	publishPayments(t, conn, queue, ps...)

	runEnv := append(slices.Clip(env), "PROVIDER_URL="+srv.URL, "WORKER_CONCURRENCY=8", "LOG_LEVEL=info",
		"SHUTDOWN_TIMEOUT=5s", "PROVIDER_TIMEOUT=5s")
	runEnv = append(runEnv, c.env...)
	var pxs []*rabbitCutProxy
	var procs []*proc
	for i := range 2 {
		px := startRabbitCutProxy(t, u)
		pxs = append(pxs, px)
		procs = append(procs, startProc(t, fmt.Sprintf("%s-worker-%d", c.name, i+1), append(slices.Clip(runEnv), "AMQP_URL="+px.url)))
	}
	t.Cleanup(func() {
		for _, p := range procs {
			select {
			case <-p.done:
			default:
				p.kill()
			}
		}
	})

	start := time.Now()
	injected := false
	last, stableSince := int64(-1), time.Now()
	for {
		st := fake.Stats()
		if !injected && c.when(st) {
			c.inject(t, pxs[0], procs[0])
			injected = true
			t.Logf("injected after %s: %d calls, %d charges, %d faults", time.Since(start).Round(time.Millisecond), st.Calls, st.Charges, st.Faults)
		}
		for i, p := range procs {
			select {
			case <-p.done:
				if i == 0 && c.killed {
					continue
				}
				t.Fatalf("%s exited (%v):\n%s", p.name, p.err, tail(p.log.String(), 20))
			default:
			}
		}
		if st.Calls != last {
			last, stableSince = st.Calls, time.Now()
		}
		// Settled: every payment charged, nothing ready, and no call to
		// the provider for longer than a duplicate waits for its key's
		// holder (a lease and a second).
		if injected && len(st.ChargesByPayment) >= n && depth(queue) == 0 && time.Since(stableSince) > 6*time.Second {
			break
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("not settled in 90s: injected %t, %d of %d payments charged, %d ready in the queue, %d dead letters; %+v",
				injected, len(st.ChargesByPayment), n, depth(queue), depth(dlq), st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.killed {
		stopCleanly(t, procs[1:]...)
	} else {
		stopCleanly(t, procs...)
	}
	st := fake.Stats()
	t.Logf("%s: %d payments, %d charges, %d calls, %d faults in %s", c.name, n, st.Charges, st.Calls, st.Faults, time.Since(start).Round(time.Millisecond))
	for _, p := range ps {
		if got := st.ChargesByPayment[p.PaymentID]; got != 1 {
			t.Errorf("payment %s charged %d times, want 1", p.PaymentID, got)
		}
	}
	// What a worker held unacked when it stopped is back in the queue.
	if q, d := depth(queue), depth(dlq); q != 0 || d != 0 {
		t.Errorf("after the workers stopped: %d in the queue, %d dead letters; want none", q, d)
	}
	if t.Failed() {
		for _, p := range procs {
			t.Logf("%s:\n%s", p.name, tail(p.log.String(), 30))
		}
	}
}

// rabbitCutProxy forwards one worker's AMQP connections to the broker. It
// can cut them all (cut), or drop the next basic.ack a client sends and
// then cut that connection (cutAtNextAck): the worker wrote the ack, the
// broker never read it. internal/tcpproxy forwards bytes and cannot see
// an ack; this reads the client's frames (readFrame).
type rabbitCutProxy struct {
	ln       net.Listener
	upstream string
	url      string
	armed    atomic.Bool
	crash    []byte // a body that kills the consumer (crashOn)
	onCrash  func()

	mu    sync.Mutex
	links map[net.Conn]net.Conn
}

func startRabbitCutProxy(t *testing.T, brokerURL string) *rabbitCutProxy {
	t.Helper()
	bu, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pu := *bu
	pu.Host = ln.Addr().String()
	p := &rabbitCutProxy{ln: ln, upstream: bu.Host, url: pu.String(), links: map[net.Conn]net.Conn{}}
	go p.accept()
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	return p
}

func (p *rabbitCutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.links[c] = s
		p.mu.Unlock()
		end := func() {
			_ = c.Close()
			_ = s.Close()
			p.mu.Lock()
			delete(p.links, c)
			p.mu.Unlock()
		}
		go func() { defer end(); p.fromBroker(c, s) }()
		go func() { defer end(); p.fromClient(s, c) }()
	}
}

// fromClient forwards the client's frames to the broker, unless armed
// and the frame is a basic.ack: then it drops it and returns (the link
// ends).
func (p *rabbitCutProxy) fromClient(dst, src net.Conn) {
	r := bufio.NewReader(src)
	hdr := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(r, hdr); err != nil {
		return
	}
	if _, err := dst.Write(hdr); err != nil {
		return
	}
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		if f.typ == 1 && len(f.payload) >= 4 &&
			binary.BigEndian.Uint16(f.payload[0:2]) == 60 && binary.BigEndian.Uint16(f.payload[2:4]) == 80 &&
			p.armed.CompareAndSwap(true, false) {
			return // basic.ack, written by the worker, never read by the broker
		}
		if _, err := dst.Write(f.raw); err != nil {
			return
		}
	}
}

// fromBroker forwards the broker's frames to the client; a body frame
// holding the crash marker is not forwarded: onCrash runs (the test kills
// the worker) and the link ends, the delivery unacked.
func (p *rabbitCutProxy) fromBroker(dst, src net.Conn) {
	p.mu.Lock()
	crash, onCrash := p.crash, p.onCrash
	p.mu.Unlock()
	if crash == nil {
		_, _ = io.Copy(dst, src)
		return
	}
	r := bufio.NewReader(src)
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		if f.typ == 3 && strings.Contains(string(f.payload), string(crash)) {
			onCrash()
			return
		}
		if _, err := dst.Write(f.raw); err != nil {
			return
		}
	}
}

// crashOn makes a delivery whose body holds marker call onCrash instead
// of reaching the client. Set before the first connection.
func (p *rabbitCutProxy) crashOn(marker []byte, onCrash func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.crash, p.onCrash = marker, onCrash
}

// cut closes every connection open now: each side sees it end.
func (p *rabbitCutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, s := range p.links {
		_ = c.Close()
		_ = s.Close()
	}
}

// cutAtNextAck drops the next ack a client sends and cuts its connection.
func (p *rabbitCutProxy) cutAtNextAck() { p.armed.Store(true) }

// TestRabbitProcessCrashLoop: a message that kills every worker process
// it reaches (the proxy SIGKILLs the worker when the message's body comes
// through, before the worker reads it) is dead-lettered by the broker at
// the queue's x-delivery-limit (setup's AMQP_DELIVERY_LIMIT, 2 here: the
// third delivery is the last), with the broker's reason, while the
// workers started after each crash charge every other payment once. Seen
// failing against a worker binary whose setup declared no
// x-delivery-limit: 435 crashes in 90s and nothing else charged.
func TestRabbitProcessCrashLoop(t *testing.T) {
	u := amqpURL(t)
	dbURL := pgtest.URL(t)
	t.Parallel()
	const n, limit = 10, 2
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{IgnoreKeys: true})
	queue := pgtest.Name("rabbitcrash")
	dlq := rabbitworker.DeadLetterQueueOf(queue)
	conn := dialTopology(t, u, queue)
	env := slices.DeleteFunc(withoutBrokers(os.Environ()), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	env = append(env, "AMQP_QUEUE="+queue, "STORE=postgres", "DATABASE_URL="+dbURL, "CLAIM_TABLE="+pgtest.Name("claims"),
		"CLAIM_RETENTION=96h", "CLAIM_LEASE=3s", fmt.Sprintf("AMQP_DELIVERY_LIMIT=%d", limit))
	if code, stdout, stderr := runBinary(t, append(slices.Clip(env), "AMQP_URL="+u), "setup", "-postgres"); code != 0 {
		t.Fatalf("setup: exit %d\n%s%s", code, stdout, stderr)
	}
	ps := payments(queue, n+1)
	crash := ps[n].PaymentID // the message that kills its consumer
	publishPayments(t, conn, queue, append([]provider.Payment{ps[n]}, ps[:n]...)...)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}

	px := startRabbitCutProxy(t, u)
	crashed := make(chan struct{}, 1)
	px.crashOn([]byte(crash), func() {
		select {
		case crashed <- struct{}{}:
		default:
		}
	})
	// One delivery at a time: a crashing process returns every delivery it
	// held, each counted toward the limit (with 4, the payments delivered
	// beside the crashing one were dead-lettered with it: the broker's
	// count cannot tell the culprit from its neighbours).
	runEnv := append(slices.Clip(env), "PROVIDER_URL="+srv.URL, "WORKER_CONCURRENCY=1", "LOG_LEVEL=info",
		"SHUTDOWN_TIMEOUT=5s", "AMQP_URL="+px.url)
	kills := 0
	p := startProc(t, "crashloop-worker-1", runEnv)
	defer func() { p.kill() }()
	start := time.Now()
	for {
		select {
		case <-crashed:
			p.kill()
			kills++
			p = startProc(t, fmt.Sprintf("crashloop-worker-%d", kills+1), runEnv)
			continue
		case <-time.After(100 * time.Millisecond):
		}
		st := fake.Stats()
		dl, ok, err := ch.Get(dlq, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok && len(st.ChargesByPayment) >= n {
			reason, _ := dl.Headers["x-first-death-reason"].(string)
			var got provider.Payment
			_ = json.Unmarshal(dl.Body, &got)
			t.Logf("dead-lettered after %d crashes in %s: %s, reason %q", kills, time.Since(start).Round(time.Millisecond), got.PaymentID, reason)
			if got.PaymentID != crash || reason != "delivery_limit" {
				t.Errorf("dead letter %s with reason %q, want %s, delivery_limit", got.PaymentID, reason, crash)
			}
			if kills != limit+1 {
				t.Errorf("%d crashes, want %d: the delivery limit and the first delivery", kills, limit+1)
			}
			_ = dl.Nack(false, true)
			break
		}
		if ok {
			_ = dl.Nack(false, true)
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("not settled in 90s: %d crashes, %d of %d payments charged", kills, len(st.ChargesByPayment), n)
		}
	}
	stopCleanly(t, p)
	st := fake.Stats()
	for _, p := range ps[:n] {
		if got := st.ChargesByPayment[p.PaymentID]; got != 1 {
			t.Errorf("payment %s charged %d times, want 1", p.PaymentID, got)
		}
	}
	if got := st.ChargesByPayment[crash]; got != 0 {
		t.Errorf("the crashing payment was charged %d times, want 0 (it never reached a handler)", got)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in the queue, want 0", q.Messages)
	}
}

// TestRabbitProcessQueueDeleted: when its queue is deleted the broker
// cancels the worker's consumer; the worker process tries to subscribe
// again, finds the queue gone, and exits 1 saying so, rather than spin or
// wait for ever. What it had charged stays charged once. Seen failing
// against a worker that takes a missing queue for a lost broker and
// reconnects without end (still running 20s after the deletion).
func TestRabbitProcessQueueDeleted(t *testing.T) {
	u := amqpURL(t)
	dbURL := pgtest.URL(t)
	t.Parallel()
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{IgnoreKeys: true})
	queue := pgtest.Name("rabbitgone")
	conn := dialTopology(t, u, queue)
	env := slices.DeleteFunc(withoutBrokers(os.Environ()), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	env = append(env, "AMQP_URL="+u, "AMQP_QUEUE="+queue, "STORE=postgres", "DATABASE_URL="+dbURL, "CLAIM_TABLE="+pgtest.Name("claims"),
		"CLAIM_RETENTION=96h", "CLAIM_LEASE=3s")
	if code, stdout, stderr := runBinary(t, env, "setup", "-postgres"); code != 0 {
		t.Fatalf("setup: exit %d\n%s%s", code, stdout, stderr)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ps := payments(queue, 5)
	publishPayments(t, conn, queue, ps...)
	p := startProc(t, "gone-worker", append(slices.Clip(env), "PROVIDER_URL="+srv.URL, "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=5s"))
	defer func() {
		select {
		case <-p.done:
		default:
			p.kill()
		}
	}()
	for end := time.Now().Add(30 * time.Second); len(fake.Stats().ChargesByPayment) < len(ps); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d of %d payments charged in 30s:\n%s", len(fake.Stats().ChargesByPayment), len(ps), tail(p.log.String(), 20))
		}
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker still runs 20s after its queue was deleted:\n%s", tail(p.log.String(), 20))
	}
	code := p.cmd.ProcessState.ExitCode()
	t.Logf("exit %d %s after the queue was deleted", code, time.Since(deleted).Round(time.Millisecond))
	if code != 1 || !strings.Contains(p.log.String(), "the queue no longer exists") {
		t.Errorf("exit %d, want 1 and why:\n%s", code, tail(p.log.String(), 10))
	}
	for _, pm := range ps {
		if got := fake.Stats().ChargesByPayment[pm.PaymentID]; got != 1 {
			t.Errorf("payment %s charged %d times, want 1", pm.PaymentID, got)
		}
	}
}

// publishPayments publishes each payment to queue and waits for the
// broker to confirm it: a publish on a channel without confirms can be
// dropped by a busy broker without a word, which a test would take for a
// lost message.
func publishPayments(t *testing.T, conn *amqp.Connection, queue string, ps ...provider.Payment) {
	t.Helper()
	bodies := make([]string, len(ps))
	for i, p := range ps {
		b, _ := json.Marshal(p)
		bodies[i] = string(b)
	}
	publishConfirmed(t, conn, queue, bodies)
}

// publishConfirmed publishes each body to queue, persistent and mandatory,
// and waits for the broker to confirm each; a body it returns or refuses
// fails t.
func publishConfirmed(t *testing.T, conn *amqp.Connection, queue string, bodies []string) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, len(bodies)))
	for _, body := range bodies {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false,
			amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("publish to %s not confirmed: %v", queue, err)
		}
		select {
		case r := <-returns:
			t.Fatalf("publish to %s returned: %d %s", queue, r.ReplyCode, r.ReplyText)
		default:
		}
	}
}

// dialTopology dials the broker at u and, when t ends, deletes what setup
// declares for queue and closes the connection.
func dialTopology(t *testing.T, u, queue string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteTopology(conn, queue)
		_ = conn.Close()
	})
	return conn
}

// deleteTopology deletes, on conn, the queues and the exchange setup
// declares for queue; a test's cleanup, so errors are ignored.
func deleteTopology(conn *amqp.Connection, queue string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	_, _ = ch.QueueDelete(queue, false, false, false)
	_, _ = ch.QueueDelete(rabbitworker.DeadLetterQueueOf(queue), false, false, false)
	_, _ = ch.QueueDelete(rabbitworker.DelayQueueOf(queue), false, false, false)
	_ = ch.ExchangeDelete(rabbitworker.DeadLetterExchange(queue), false, false)
}
