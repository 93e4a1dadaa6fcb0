package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// workerBin is the worker binary built once for the package's tests.
var workerBin string

func TestMain(m *testing.M) {
	// INTEGRATION_WORKER_BIN runs the tests against a worker built
	// elsewhere (an older commit, to see a test fail on the code it protects).
	if bin := os.Getenv("INTEGRATION_WORKER_BIN"); bin != "" {
		workerBin = bin
		os.Exit(m.Run())
	}
	// A canned endpoint's child process (startCanned) runs no worker:
	// building one would only delay its start by seconds.
	if os.Getenv(cannedEnv) != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "claimfirst-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-race", "-o", workerBin, "../cmd/worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build worker:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's resources: a queue with a DLQ, a claim table and a fake provider.
type env struct {
	t        *testing.T
	sqs      *sqs.Client
	ddb      *dynamodb.Client
	queueURL string
	dlqURL   string
	table    string
	fake     *fakeprovider.Server
	provURL  string
	visSecs  int
	procs    []*proc
}

type envOptions struct {
	visibility     time.Duration // queue visibility timeout; default 5s
	maxReceive     int           // default 5
	queueRetention time.Duration // default 4 days
	noDLQ          bool
	fake           fakeprovider.Config
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	cfg := awstest.Config(t)
	if o.visibility == 0 {
		o.visibility = 5 * time.Second
	}
	if o.maxReceive == 0 {
		o.maxReceive = 5
	}
	if o.queueRetention == 0 {
		o.queueRetention = 96 * time.Hour
	}
	e := &env{t: t, sqs: sqs.NewFromConfig(cfg), ddb: dynamodb.NewFromConfig(cfg), table: awstest.Name("claims"), visSecs: int(o.visibility.Seconds())}
	ctx := context.Background()
	attrs := map[string]string{
		"VisibilityTimeout":      strconv.Itoa(e.visSecs),
		"MessageRetentionPeriod": strconv.Itoa(int(o.queueRetention.Seconds())),
	}
	if !o.noDLQ {
		dlq, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("dlq")),
			Attributes: map[string]string{"MessageRetentionPeriod": "1209600"}})
		if err != nil {
			t.Fatal(err)
		}
		e.dlqURL = aws.ToString(dlq.QueueUrl)
		arn, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
		if err != nil {
			t.Fatal(err)
		}
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arn.Attributes["QueueArn"], o.maxReceive)
	}
	q, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("payments")), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	e.queueURL = aws.ToString(q.QueueUrl)
	if err := dynamo.CreateTable(ctx, e.ddb, dynamo.TableSpec{Name: e.table}); err != nil {
		t.Fatal(err)
	}
	fake, srv := fakeprovider.StartTest(t, o.fake)
	e.fake, e.provURL = fake, srv.URL
	return e
}

func payments(prefix string, n int) []provider.Payment {
	ps := make([]provider.Payment, n)
	for i := range ps {
		ps[i] = provider.Payment{PaymentID: fmt.Sprintf("%s_%04d", prefix, i), Amount: int64(100 + i), Currency: "EUR"}
	}
	return ps
}

// send puts one message per body on the queue, in batches of ten.
func (e *env) send(bodies ...string) {
	e.t.Helper()
	for start := 0; start < len(bodies); start += 10 {
		batch := bodies[start:min(start+10, len(bodies))]
		entries := make([]types.SendMessageBatchRequestEntry, len(batch))
		for i, b := range batch {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := e.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.queueURL), Entries: entries})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(out.Failed) > 0 {
			e.t.Fatalf("send: %d failed", len(out.Failed))
		}
	}
}

func (e *env) sendPayments(ps []provider.Payment) {
	e.t.Helper()
	bodies := make([]string, len(ps))
	for i, p := range ps {
		b, _ := json.Marshal(p)
		bodies[i] = string(b)
	}
	e.send(bodies...)
}

// queueDepth returns visible + in-flight + delayed messages.
func (e *env) queueDepth(url string) int {
	e.t.Helper()
	out, err := e.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}

// waitDrained waits until the source queue is empty.
func (e *env) waitDrained(timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for e.queueDepth(e.queueURL) > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("queue not drained after %s: %d messages left; provider stats %+v", timeout, e.queueDepth(e.queueURL), e.fake.Stats())
		}
		// Each query makes the emulator count every message: poll gently.
		time.Sleep(500 * time.Millisecond)
	}
}

// dlqMessages drains the dead-letter queue and returns its messages.
func (e *env) dlqMessages() []types.Message {
	e.t.Helper()
	var all []types.Message
	for {
		out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.dlqURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}, VisibilityTimeout: 60,
		})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
	}
}

// assertNoDeadLetters fails the test if anything reached the dead-letter
// queue, and says what every worker logged about each message that did.
func (e *env) assertNoDeadLetters() {
	e.t.Helper()
	dead := e.dlqMessages()
	if len(dead) == 0 {
		return
	}
	e.t.Errorf("%d messages dead-lettered, want 0", len(dead))
	for _, m := range dead {
		id := aws.ToString(m.MessageId)
		var body struct {
			PaymentID string `json:"payment_id"`
		}
		_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &body)
		var history []string
		for _, p := range e.procs {
			for _, line := range strings.Split(p.log.String(), "\n") {
				if strings.Contains(line, id) || (body.PaymentID != "" && strings.Contains(line, `"`+body.PaymentID+`"`)) {
					history = append(history, p.name+": "+line)
				}
			}
		}
		e.t.Logf("dead-lettered %s (%s); what the workers logged of it:\n%s", id, aws.ToString(m.Body), strings.Join(history, "\n"))
	}
}

// assertChargedOnce checks every payment was charged exactly once and nothing else was.
func (e *env) assertChargedOnce(ps []provider.Payment) fakeprovider.Stats {
	e.t.Helper()
	st := e.fake.Stats()
	for _, p := range ps {
		if n := st.ChargesByPayment[p.PaymentID]; n != 1 {
			e.t.Errorf("payment %s charged %d times, want 1", p.PaymentID, n)
		}
	}
	if st.Charges != int64(len(ps)) {
		e.t.Errorf("charges = %d, want %d (one per payment)", st.Charges, len(ps))
	}
	return st
}

// proc is a worker process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error
}

type workerOptions struct {
	concurrency int
	extraEnv    []string
}

func (e *env) workerEnv(o workerOptions) []string {
	if o.concurrency == 0 {
		o.concurrency = 8
	}
	env := append(withoutBrokers(os.Environ()), // this worker consumes SQS, whatever else the launchers started
		"QUEUE_URL="+e.queueURL,
		"CLAIM_TABLE="+e.table,
		"PROVIDER_URL="+e.provURL,
		"WORKER_CONCURRENCY="+strconv.Itoa(o.concurrency),
		"LOG_LEVEL=info",
		"SHUTDOWN_TIMEOUT=10s",
		"PROVIDER_TIMEOUT=2s",
		"ORIGINAL_ID_SECRET="+string(testOriginalIDSecret),
	)
	return append(env, o.extraEnv...)
}

// start runs a worker process; it is killed at the end of the test if still running.
func (e *env) start(name string, o workerOptions, args ...string) *proc {
	e.t.Helper()
	p := startProc(e.t, name, e.workerEnv(o), args...)
	e.procs = append(e.procs, p)
	return p
}

// startProc runs the worker binary (args, default run) with env as its
// whole environment; it is killed at the end of the test if still
// running, and its log's tail is shown if the test failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	if len(args) == 0 {
		args = []string{"run"}
	}
	p := &proc{name: name, cmd: exec.Command(workerBin, args...), log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s log (last 40 lines) ---\n%s", p.name, tail(p.log.String(), 40))
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
// stopCleanly stops each of ps with SIGTERM and fails t for each that
// does not exit 0 within 20s.
func stopCleanly(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		if code := p.stop(t, 20*time.Second); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM, want 0", p.name, code)
		}
	}
}

func (p *proc) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(t, timeout)
}

func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logLine is the part of a worker's JSON log line the tests read.
type logLine struct {
	Msg          string `json:"msg"`
	Outcome      string `json:"outcome"`
	Token        int64  `json:"token"`
	ReceiveCount int    `json:"attempt"`
}

// logLines returns the JSON lines of a worker's log, skipping any other.
func logLines(log string) []logLine {
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line logLine
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			lines = append(lines, line)
		}
	}
	return lines
}

// logCount counts log lines whose msg contains s. For what happened to a
// message, count its outcome instead (outcomeCount): words recur across
// messages ("completed" is in "duplicate: key already completed").
func (p *proc) logCount(s string) int {
	return p.logCountWhere(s, func(logLine) bool { return true })
}

// logCountWhere counts log lines whose msg contains s and that match.
func (p *proc) logCountWhere(s string, match func(logLine) bool) int {
	return countLines(p.log.String(), func(l logLine) bool { return strings.Contains(l.Msg, s) && match(l) })
}

// outcomeCount counts the log lines whose outcome attribute is o (a
// worker.Outcome: "completed", "duplicate", "lease_lost", ...): the one
// final line the worker writes for each delivery, whatever its message says.
func (p *proc) outcomeCount(o string) int {
	return p.outcomeCountWhere(o, func(logLine) bool { return true })
}

// outcomeCountWhere counts the log lines whose outcome is o and that match.
func (p *proc) outcomeCountWhere(o string, match func(logLine) bool) int {
	return countOutcome(p.log.String(), o, match)
}

// countOutcome counts the lines of log whose outcome is o and that match.
func countOutcome(log, o string, match func(logLine) bool) int {
	return countLines(log, func(l logLine) bool { return l.Outcome == o && match(l) })
}

func countLines(log string, match func(logLine) bool) int {
	n := 0
	for _, l := range logLines(log) {
		if match(l) {
			n++
		}
	}
	return n
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// claim returns the raw claim row for key, attribute values as strings.
func (e *env) claim(key string) map[string]string {
	e.t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{dynamo.DefaultKeyAttribute: &ddbtypes.AttributeValueMemberS{Value: key}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	row := map[string]string{}
	for k, v := range out.Item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			row[k] = v.Value
		case *ddbtypes.AttributeValueMemberN:
			row[k] = v.Value
		}
	}
	return row
}

// logField returns field of the first log line whose msg contains msg.
func (p *proc) logField(msg, field string) string {
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.Contains(fmt.Sprint(line["msg"]), msg) {
			if v, ok := line[field].(string); ok {
				return v
			}
		}
	}
	return ""
}
