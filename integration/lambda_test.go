package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

// The Lambda tests build the worker as a Lambda `bootstrap` and run it under
// the AWS Lambda Runtime Interface Emulator (`make rie` installs it into
// bin/), which serves the Runtime API to bootstrap and takes invocations
// over HTTP. The tests play the event source mapping: they receive real
// messages from the emulator's queue (so receipt handles work for
// ChangeMessageVisibility), invoke the function with them as an SQS event,
// one invocation at a time (the emulator handles one at a time), and delete
// the records the response does not report as failures.

// lambdaFunctionTimeout is the function timeout the emulator gives every
// invocation (AWS_LAMBDA_FUNCTION_TIMEOUT), in seconds.
const lambdaFunctionTimeout = 30

// lambdaPoison is a record no payment handler accepts: the amount is not an
// integer in minor units.
const lambdaPoison = `{"payment_id":"lambda_poison","amount":19.99,"currency":"EUR"}`

// TestLambdaBatches sends the same batch twice: distinct payments, one
// payment in two records (a producer's retry), and a poison record. Each
// payment is charged once; the first response reports at most the
// duplicate's twin (it may find its twin's claim in progress), never the
// poison record (with QUEUE_URL the function dead-letters it itself); the
// second reports nothing, since every payment is complete.
func TestLambdaBatches(t *testing.T) {
	t.Parallel()
	rie := lambdaRIEBinary(t)
	// Visibility six times the function timeout, as template.yaml requires;
	// latency so that the duplicate's twins overlap.
	e := newEnv(t, envOptions{visibility: 6 * lambdaFunctionTimeout * time.Second, fake: fakeprovider.Config{Latency: 50 * time.Millisecond}})
	fn := lambdaStart(t, rie, lambdaBuildBootstrap(t), []string{
		"QUEUE_URL=" + e.queueURL,
		"CLAIM_TABLE=" + e.table,
		"PROVIDER_URL=" + e.provURL,
		"PROVIDER_TIMEOUT=2s",
		"LOG_LEVEL=info",
	})

	ps := payments("lambda", 6)
	dup := ps[0]
	var bodies []string
	for _, p := range ps {
		bodies = append(bodies, lambdaBody(t, p))
	}
	bodies = append(bodies, lambdaBody(t, dup), lambdaPoison)

	for round := 1; round <= 2; round++ {
		ev := e.lambdaEvent(bodies)
		start := time.Now()
		resp, raw := fn.invoke(t, ev)
		t.Logf("invocation %d: %d records, %s, response %s", round, len(ev.Records), time.Since(start).Round(time.Millisecond), raw)
		failed := lambdaFailures(t, resp)
		switch round {
		case 1:
			// The duplicate's two records run concurrently: one claims and
			// charges; the other is acked as a duplicate if it comes after
			// the completion, or reported as a failure (held elsewhere) if
			// it comes during the charge. Nothing else may fail.
			twins := lambdaRecordIDs(ev, lambdaBody(t, dup))
			for _, id := range failed {
				if !slices.Contains(twins, id) {
					t.Errorf("invocation 1 reported %s (%.60s) as failed; only a record of the duplicated payment %s may be", id, lambdaRecordBody(ev, id), dup.PaymentID)
				}
			}
			if len(failed) > 1 {
				t.Errorf("invocation 1 reported %d failures %q, want at most one (a twin of %s)", len(failed), failed, dup.PaymentID)
			}
		case 2:
			if len(failed) != 0 {
				t.Errorf("invocation 2 reported failures %q, want none: every payment was complete", failed)
			}
		}
		e.lambdaDeleteDone(ev, failed)
	}

	e.assertChargedOnce(ps)

	// Both poison records were dead-lettered by the function, with the reason.
	dead := e.dlqMessages()
	if len(dead) != 2 {
		t.Errorf("%d messages dead-lettered, want 2 (the poison record of each invocation)", len(dead))
	}
	for _, m := range dead {
		if aws.ToString(m.Body) != lambdaPoison {
			t.Errorf("dead-lettered %.60q, want only the poison record", aws.ToString(m.Body))
		}
		r, ok := m.MessageAttributes[worker.ReasonAttribute]
		if !ok || aws.ToString(r.StringValue) == "" {
			t.Errorf("dead-lettered %.60q has no %s attribute", aws.ToString(m.Body), worker.ReasonAttribute)
			continue
		}
		t.Logf("dead-lettered %s: %s", aws.ToString(m.Body), aws.ToString(r.StringValue))
	}

	// Each payment's claim is complete, with the provider's charge as its result.
	store, err := dynamo.New(dynamo.Config{Client: e.ddb, Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		c, err := store.Get(context.Background(), p.PaymentID)
		if err != nil {
			t.Errorf("claim %s: %v", p.PaymentID, err)
			continue
		}
		if c.Status != claimstore.StatusCompleted || c.Result == "" {
			t.Errorf("claim %s: status %s, result %q; want %s with a result", p.PaymentID, c.Status, c.Result, claimstore.StatusCompleted)
		}
	}
	fn.checkLog(t)
	// The invocations' metrics, as CloudWatch would read them from the log.
	fn.checkEMF(t, 2, map[string]float64{string(worker.OutcomeCompleted): float64(len(ps)), string(worker.OutcomeDeadLettered): 2})
}

// TestLambdaPoisonWithoutQueueURL: without QUEUE_URL the function cannot
// dead-letter, so a poison record is reported as a batch item failure and
// left to the queue's redrive policy; the others are done.
func TestLambdaPoisonWithoutQueueURL(t *testing.T) {
	t.Parallel()
	rie := lambdaRIEBinary(t)
	e := newEnv(t, envOptions{visibility: 6 * lambdaFunctionTimeout * time.Second})
	fn := lambdaStart(t, rie, lambdaBuildBootstrap(t), []string{
		"CLAIM_TABLE=" + e.table,
		"PROVIDER_URL=" + e.provURL,
		"CLAIM_RETENTION=120h", // required without a queue to derive it from
		"LOG_LEVEL=info",
	})

	ps := payments("lambdanq", 3)
	var bodies []string
	for _, p := range ps {
		bodies = append(bodies, lambdaBody(t, p))
	}
	bodies = append(bodies, lambdaPoison)
	ev := e.lambdaEvent(bodies)
	resp, raw := fn.invoke(t, ev)
	t.Logf("invocation: %d records, response %s", len(ev.Records), raw)
	failed := lambdaFailures(t, resp)
	if want := lambdaRecordIDs(ev, lambdaPoison); !slices.Equal(failed, want) {
		t.Errorf("failures %q, want exactly the poison record %q", failed, want)
	}
	e.assertChargedOnce(ps)
	if n := len(e.dlqMessages()); n != 0 {
		t.Errorf("%d messages dead-lettered by the function, want 0 (it has no queue URL)", n)
	}
	fn.checkLog(t)
}

// lambdaRIEBinary returns the Runtime Interface Emulator's path: AWS_LAMBDA_RIE,
// or bin/aws-lambda-rie as `make rie` installs it.
func lambdaRIEBinary(t *testing.T) string {
	t.Helper()
	awstest.Config(t) // skips without the emulator
	p := os.Getenv("AWS_LAMBDA_RIE")
	if p == "" {
		p = filepath.Join("..", "bin", "aws-lambda-rie")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv(awstest.RequiredEnv) != "" {
			t.Fatalf("the Lambda tests need the Runtime Interface Emulator (%v): run `make rie`, or set AWS_LAMBDA_RIE to its path", err)
		}
		t.Skip("needs the Lambda Runtime Interface Emulator: `make rie`, then `make test` (or set AWS_LAMBDA_RIE)")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// lambdaBuildBootstrap builds the worker as Lambda builds it (`-tags
// lambda.norpc`, named bootstrap) for this machine, with the race detector.
func lambdaBuildBootstrap(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.Command("go", "build", "-race", "-tags", "lambda.norpc", "-o", out, "../cmd/worker")
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bootstrap: %v\n%s", err, b)
	}
	return out
}

// lambdaFunction is a bootstrap running under the emulator.
type lambdaFunction struct {
	url  string // invocations endpoint
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
}

// lambdaStart runs bootstrap under the emulator at rie, on two free
// loopback ports, with settings and the caller's AWS settings as its
// environment. It is stopped, with bootstrap, at the end of the test.
func lambdaStart(t *testing.T, rie, bootstrap string, settings []string) *lambdaFunction {
	t.Helper()
	ports := lambdaFreePorts(t, 2)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(lambdaFunctionTimeout)}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "AWS_LAMBDA_") {
			env = append(env, kv) // the emulator's endpoint, region and credentials
		}
	}
	env = append(env, settings...)
	f := &lambdaFunction{
		url: "http://" + ports[0] + "/2015-03-31/functions/function/invocations",
		cmd: exec.Command(rie, "--runtime-interface-emulator-address", ports[0], "--runtime-api-address", ports[1], bootstrap),
		log: &syncbuf.Buffer{}, done: make(chan struct{}),
	}
	f.cmd.Dir = filepath.Dir(bootstrap)
	f.cmd.Env = env
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // bootstrap joins its group
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	t.Cleanup(func() {
		pgid := f.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-f.done:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // bootstrap, if the emulator left it
		<-f.done
		if t.Failed() {
			t.Logf("--- emulator and bootstrap log (last 60 lines) ---\n%s", tail(f.log.String(), 60))
		}
	})
	return f
}

// lambdaFreePorts returns n distinct free loopback addresses.
func lambdaFreePorts(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	lns := make([]net.Listener, 0, n) // held until all are chosen, so they differ
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// invoke sends ev as one invocation and returns the decoded response and
// its body. The first invocation waits up to 30s for the emulator to
// listen; a request that reached it is never resent.
func (f *lambdaFunction) invoke(t *testing.T, ev events.SQSEvent) (events.SQSEventResponse, []byte) {
	t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * lambdaFunctionTimeout * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var res *http.Response
	for {
		res, err = client.Post(f.url, "application/json", bytes.NewReader(payload))
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" {
			break
		}
		select {
		case <-f.done:
			t.Fatalf("the emulator exited before it served an invocation:\n%s", tail(f.log.String(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the emulator did not listen on %s within 30s: %v", f.url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("invoke: %s: %s", res.Status, body)
	}
	var resp events.SQSEventResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields() // a function error ({"errorMessage": ...}) is not a response
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("invoke: response %s: %v", body, err)
	}
	return resp, body
}

// checkLog fails the test if the race detector reported in bootstrap, or
// if the function could not set a record's visibility (a receipt handle
// the event carried did not work).
func (f *lambdaFunction) checkLog(t *testing.T) {
	t.Helper()
	log := f.log.String()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Error("the race detector reported a data race in bootstrap (see the log)")
	}
	if strings.Contains(log, "change visibility failed") {
		t.Error("the function could not change a record's visibility (see the log)")
	}
}

// lambdaEvent sends bodies to the queue, receives them back as the event
// source mapping would, and returns them as one SQS event in the order of
// bodies.
func (e *env) lambdaEvent(bodies []string) events.SQSEvent {
	e.t.Helper()
	ctx := context.Background()
	entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
	for i, b := range bodies {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
	}
	sent, err := e.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.queueURL), Entries: entries})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(sent.Failed) > 0 || len(sent.Successful) != len(bodies) {
		e.t.Fatalf("send: %d of %d failed", len(sent.Failed), len(bodies))
	}
	order := map[string]int{} // message id -> index in bodies
	for _, s := range sent.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		order[aws.ToString(s.MessageId)] = i
	}
	return e.lambdaReceive(order)
}

// lambdaReceive receives the messages whose ids order holds, as the event
// source mapping would, and returns them as one SQS event in order's order
// (message id -> index). Other messages received are left to come back.
func (e *env) lambdaReceive(order map[string]int) events.SQSEvent {
	e.t.Helper()
	ctx := context.Background()
	arn, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(e.queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	records := make([]events.SQSMessage, len(order))
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < len(order) {
		if time.Now().After(deadline) {
			e.t.Fatalf("received %d of the %d messages", got, len(order))
		}
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range out.Messages {
			i, ok := order[aws.ToString(m.MessageId)]
			if !ok {
				continue // an earlier invocation's failure, redelivered: not part of this batch
			}
			attrs := map[string]events.SQSMessageAttribute{}
			for k, v := range m.MessageAttributes {
				attrs[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
			}
			records[i] = events.SQSMessage{
				MessageId:         aws.ToString(m.MessageId),
				ReceiptHandle:     aws.ToString(m.ReceiptHandle),
				Body:              aws.ToString(m.Body),
				Md5OfBody:         aws.ToString(m.MD5OfBody),
				Attributes:        m.Attributes,
				MessageAttributes: attrs,
				EventSource:       "aws:sqs",
				EventSourceARN:    arn.Attributes[string(types.QueueAttributeNameQueueArn)],
				AWSRegion:         e.sqs.Options().Region,
			}
			got++
		}
	}
	for _, r := range records {
		if r.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)] == "" {
			e.t.Fatalf("message %s came without ApproximateReceiveCount", r.MessageId)
		}
	}
	return events.SQSEvent{Records: records}
}

// lambdaDeleteDone deletes the records of ev not reported as failed, as the
// event source mapping does after a response.
func (e *env) lambdaDeleteDone(ev events.SQSEvent, failed []string) {
	e.t.Helper()
	var entries []types.DeleteMessageBatchRequestEntry
	for i, r := range ev.Records {
		if !slices.Contains(failed, r.MessageId) {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ReceiptHandle)})
		}
	}
	for start := 0; start < len(entries); start += 10 {
		out, err := e.sqs.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(e.queueURL), Entries: entries[start:min(start+10, len(entries))],
		})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(out.Failed) > 0 {
			e.t.Fatalf("delete: %d failed: %+v", len(out.Failed), out.Failed)
		}
	}
}

// lambdaFailures returns the message ids a response reports, sorted, and
// fails the test on a repeated or empty one.
func lambdaFailures(t *testing.T, resp events.SQSEventResponse) []string {
	t.Helper()
	var ids []string
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" || slices.Contains(ids, f.ItemIdentifier) {
			t.Errorf("batch item failure %q: empty or repeated", f.ItemIdentifier)
		}
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

// lambdaRecordIDs returns the sorted ids of ev's records with body.
func lambdaRecordIDs(ev events.SQSEvent, body string) []string {
	var ids []string
	for _, r := range ev.Records {
		if r.Body == body {
			ids = append(ids, r.MessageId)
		}
	}
	slices.Sort(ids)
	return ids
}

func lambdaRecordBody(ev events.SQSEvent, id string) string {
	for _, r := range ev.Records {
		if r.MessageId == id {
			return r.Body
		}
	}
	return fmt.Sprintf("(no record %s)", id)
}

func lambdaBody(t *testing.T, p provider.Payment) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
