package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

// newFIFOEnv is newEnv with a FIFO queue and a FIFO dead-letter queue, both
// without content-based deduplication (producers give deduplication ids).
func newFIFOEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	cfg := awstest.Config(t)
	if o.visibility == 0 {
		o.visibility = 5 * time.Second
	}
	if o.maxReceive == 0 {
		o.maxReceive = 5
	}
	e := &env{t: t, sqs: sqs.NewFromConfig(cfg), table: awstest.Name("claims"), visSecs: int(o.visibility.Seconds())}
	e.ddb = dynamodb.NewFromConfig(cfg)
	ctx := context.Background()
	fifo := map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"}
	dlqAttrs := map[string]string{"MessageRetentionPeriod": "1209600"}
	for k, v := range fifo {
		dlqAttrs[k] = v
	}
	dlq, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("dlq") + ".fifo"), Attributes: dlqAttrs})
	if err != nil {
		t.Fatal(err)
	}
	e.dlqURL = aws.ToString(dlq.QueueUrl)
	arn, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{
		"VisibilityTimeout":      strconv.Itoa(e.visSecs),
		"MessageRetentionPeriod": strconv.Itoa(96 * 3600),
		"RedrivePolicy":          fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arn.Attributes["QueueArn"], o.maxReceive),
	}
	for k, v := range fifo {
		attrs[k] = v
	}
	q, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name("payments") + ".fifo"), Attributes: attrs})
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

// fifoMessage is one message a FIFO producer sends.
type fifoMessage struct {
	group, body string
}

// sendFIFO sends msgs in order, in batches of up to ten, each with a new
// deduplication id (a producer's retry is a new message).
func (e *env) sendFIFO(msgs []fifoMessage) []string {
	e.t.Helper()
	var ids []string
	for start := 0; start < len(msgs); start += 10 {
		batch := msgs[start:min(start+10, len(msgs))]
		entries := make([]types.SendMessageBatchRequestEntry, len(batch))
		for i, m := range batch {
			entries[i] = types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.body),
				MessageGroupId: aws.String(m.group), MessageDeduplicationId: aws.String(awstest.Name("dedup")),
			}
		}
		out, err := e.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.queueURL), Entries: entries})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(out.Failed) > 0 || len(out.Successful) != len(batch) {
			e.t.Fatalf("send: %d of %d failed: %+v", len(out.Failed), len(batch), out.Failed)
		}
		got := make([]string, len(batch))
		for _, s := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(s.Id))
			got[i] = aws.ToString(s.MessageId)
		}
		ids = append(ids, got...)
	}
	return ids
}

// firstCharges returns the payment ids of log whose prefix is prefix, in the
// order of their first charge.
func firstCharges(log []string, prefix string) []string {
	var out []string
	for _, id := range log {
		if strings.HasPrefix(id, prefix) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestFIFOGroups: two worker processes on a FIFO queue with 8 groups of 15
// payments each, sent group by group in bursts as producers do. The
// producers retry about one send in ten (a new deduplication id: a second
// message for the payment), group 3 holds a poison message in the middle,
// and the provider fails the first call for about 8% of the payments. With
// one provider attempt and no in-process hold, every failure goes back
// through the queue, stopping its group: the group's later messages from
// the same receive are returned and come back after the failed one.
//
// Every payment is charged once; within every group the first charges are
// in sequence order (the fake provider's charge log); the poison message is
// in the FIFO dead-letter queue with its reason and group, and its group is
// processed to the end.
func TestFIFOGroups(t *testing.T) {
	t.Parallel()
	e := newFIFOEnv(t, envOptions{fake: fakeprovider.Config{FailBeforeCharge: 0.08, Latency: 5 * time.Millisecond}})
	const groups, perGroup = 8, 15
	poisonGroup, poisonAfter := "acct-3", 7
	poison := `{"payment_id":"fifo_poison","amount":19.99,"currency":"EUR"}`
	var all []provider.Payment
	queues := make([][]fifoMessage, groups) // each group's messages, in order
	rng := rand.New(rand.NewPCG(16, 16))
	retries := 0
	for g := range groups {
		group := fmt.Sprintf("acct-%d", g)
		for i := range perGroup {
			p := provider.Payment{PaymentID: fmt.Sprintf("fifo_%d_%02d", g, i), Amount: int64(100 + i), Currency: "EUR"}
			all = append(all, p)
			b, _ := json.Marshal(p)
			queues[g] = append(queues[g], fifoMessage{group, string(b)})
			if rng.IntN(10) == 0 {
				queues[g] = append(queues[g], fifoMessage{group, string(b)}) // the producer's retry
				retries++
			}
			if group == poisonGroup && i == poisonAfter {
				queues[g] = append(queues[g], fifoMessage{group, poison})
			}
		}
	}
	// Interleave the groups in bursts of one to five messages.
	var msgs []fifoMessage
	for left := true; left; {
		left = false
		for g := range queues {
			n := min(1+rng.IntN(5), len(queues[g]))
			msgs = append(msgs, queues[g][:n]...)
			queues[g] = queues[g][n:]
			left = left || len(queues[g]) > 0
		}
	}
	e.sendFIFO(msgs)

	opts := workerOptions{concurrency: 8, extraEnv: []string{
		"PROVIDER_ATTEMPTS=1", // every injected failure reaches the worker
		"HOLD_FOR=1ms",        // and goes back through the queue
		"OUTAGE_COVER=4s",     // after a second or so
	}}
	w1 := e.start("w1", opts)
	w2 := e.start("w2", opts)
	e.waitDrained(3 * time.Minute)
	st := e.assertChargedOnce(all)
	for _, w := range []*proc{w1, w2} {
		if code := w.stop(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", w.name, code)
		}
	}

	for g := range groups {
		prefix := fmt.Sprintf("fifo_%d_", g)
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf("%s%02d", prefix, i))
		}
		if got := firstCharges(st.ChargeLog, prefix); !slices.Equal(got, want) {
			t.Errorf("group acct-%d charged in the order %v, want %v", g, got, want)
		}
	}

	dead := e.fifoDLQMessages()
	if len(dead) != 1 || aws.ToString(dead[0].Body) != poison {
		t.Errorf("dead-lettered %d messages, want exactly the poison one", len(dead))
	}
	for _, m := range dead {
		reason := aws.ToString(m.MessageAttributes[worker.ReasonAttribute].StringValue)
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		t.Logf("dead-lettered %.60s: group %s, reason %q", aws.ToString(m.Body), group, reason)
		if reason == "" || group != poisonGroup {
			t.Errorf("dead-lettered %.60s: reason %q, group %q; want a reason and group %s", aws.ToString(m.Body), reason, group, poisonGroup)
		}
	}

	stopped := w1.logCount("FIFO group stopped") + w2.logCount("FIFO group stopped")
	dups := w1.outcomeCount("duplicate") + w2.outcomeCount("duplicate")
	t.Logf("payments %d, messages %d (producer retries %d), provider calls %d, charges %d, injected failures %d, duplicates acked %d, groups stopped with messages returned %d",
		len(all), len(msgs), retries, st.Calls, st.Charges, st.Faults, dups, stopped)
	// Whether a failure has later messages of its group in the same receive
	// depends on how receives fall; TestFIFOGroupStopsBehindFailure makes
	// sure of it.
	if st.Faults == 0 {
		t.Error("no injected failure: the test did not exercise failures within a group")
	}
	if dups == 0 {
		t.Error("no duplicate was acked: the producer's retries were not exercised")
	}
}

// fifoDLQMessages drains the dead-letter queue with each message's group.
func (e *env) fifoDLQMessages() []types.Message {
	e.t.Helper()
	var all []types.Message
	for {
		out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.dlqURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
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

// receiveFIFOEvent receives n messages from the FIFO queue, in the order
// SQS gives them, as one SQS event (the event source mapping's part).
func (e *env) receiveFIFOEvent(n int) events.SQSEvent {
	e.t.Helper()
	ctx := context.Background()
	arn, err := e.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(e.queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	var ev events.SQSEvent
	deadline := time.Now().Add(30 * time.Second)
	for len(ev.Records) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("received %d of %d messages", len(ev.Records), n)
		}
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.queueURL), MaxNumberOfMessages: int32(n - len(ev.Records)), WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes, EventSource: "aws:sqs",
				EventSourceARN: arn.Attributes[string(types.QueueAttributeNameQueueArn)], AWSRegion: e.sqs.Options().Region,
			})
		}
	}
	return ev
}

// recordPayments returns the payment ids of ev's records, in order.
func recordPayments(t *testing.T, ev events.SQSEvent) []string {
	t.Helper()
	ids := make([]string, len(ev.Records))
	for i, r := range ev.Records {
		var p provider.Payment
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
			t.Fatal(err)
		}
		ids[i] = p.PaymentID
	}
	return ids
}

// TestLambdaFIFO runs the function under the Runtime Interface Emulator
// with a FIFO event [A0, A1, B0, A2, B1] whose A1 fails at the provider:
// A1 and A2 are reported, A2 is not charged in that invocation, B is
// processed; SQS keeps group A locked while A1 waits out its retry delay, and
// then gives A1 and A2 back, which a second invocation charges in order.
func TestLambdaFIFO(t *testing.T) {
	t.Parallel()
	rie := lambdaRIEBinary(t)
	e := newFIFOEnv(t, envOptions{visibility: 6 * lambdaFunctionTimeout * time.Second, fake: fakeprovider.Config{
		FailFirst: func(key string, _ provider.Payment) bool { return key == "lfifo_a1" },
	}})
	fn := lambdaStart(t, rie, lambdaBuildBootstrap(t), []string{
		"QUEUE_URL=" + e.queueURL,
		"CLAIM_TABLE=" + e.table,
		"PROVIDER_URL=" + e.provURL,
		"PROVIDER_TIMEOUT=2s",
		"PROVIDER_ATTEMPTS=1",
		"LOG_LEVEL=info",
	})
	pay := func(id string) fifoMessage {
		b, _ := json.Marshal(provider.Payment{PaymentID: id, Amount: 100, Currency: "EUR"})
		return fifoMessage{group: "acct-" + id[len(id)-2:len(id)-1], body: string(b)}
	}
	order := []string{"lfifo_a0", "lfifo_a1", "lfifo_b0", "lfifo_a2", "lfifo_b1"}
	var msgs []fifoMessage
	for _, id := range order {
		msgs = append(msgs, pay(id))
	}
	e.sendFIFO(msgs)

	ev := e.receiveFIFOEvent(len(order))
	if got := recordPayments(t, ev); !slices.Equal(got, order) {
		t.Fatalf("received %v, want %v", got, order)
	}
	resp, raw := fn.invoke(t, ev)
	t.Logf("invocation 1: %v, response %s", recordPayments(t, ev), raw)
	failed := lambdaFailures(t, resp)
	want := []string{ev.Records[1].MessageId, ev.Records[3].MessageId}
	slices.Sort(want)
	if !slices.Equal(failed, want) {
		t.Errorf("invocation 1 reported %q, want A1 and A2 %q", failed, want)
	}
	st := e.fake.Stats()
	if got, want := st.ChargeLog, []string{"lfifo_a0", "lfifo_b0", "lfifo_b1"}; !slices.Equal(firstCharges(got, "lfifo_a"), want[:1]) ||
		!slices.Equal(firstCharges(got, "lfifo_b"), want[1:]) || len(got) != 3 {
		t.Errorf("invocation 1 charged %v, want A0 and B0, B1 in order, and not A2", got)
	}
	if st.Calls != 4 {
		t.Errorf("invocation 1 made %d provider calls, want 4 (A0, A1 failing, B0, B1): A2 must not be processed", st.Calls)
	}
	e.lambdaDeleteDone(ev, failed)

	// A1 is in flight until its retry delay ends: SQS gives out nothing of
	// group A meanwhile, though A2 was made visible again.
	out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queueURL), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("received %d messages while A1 waits: group A is not locked", len(out.Messages))
	}

	ev2 := e.receiveFIFOEvent(2)
	if got, want := recordPayments(t, ev2), []string{"lfifo_a1", "lfifo_a2"}; !slices.Equal(got, want) {
		t.Fatalf("second delivery %v, want %v", got, want)
	}
	resp, raw = fn.invoke(t, ev2)
	t.Logf("invocation 2: %v, response %s", recordPayments(t, ev2), raw)
	if failed := lambdaFailures(t, resp); len(failed) != 0 {
		t.Errorf("invocation 2 reported %q, want none", failed)
	}
	e.lambdaDeleteDone(ev2, nil)
	st = e.assertChargedOnce([]provider.Payment{
		{PaymentID: "lfifo_a0"}, {PaymentID: "lfifo_a1"}, {PaymentID: "lfifo_a2"}, {PaymentID: "lfifo_b0"}, {PaymentID: "lfifo_b1"},
	})
	if got, want := firstCharges(st.ChargeLog, "lfifo_a"), []string{"lfifo_a0", "lfifo_a1", "lfifo_a2"}; !slices.Equal(got, want) {
		t.Errorf("group A charged in the order %v, want %v", got, want)
	}
	if n := e.queueDepth(e.queueURL); n != 0 {
		t.Errorf("%d messages left on the queue", n)
	}
	fn.checkLog(t)
}

// checkFIFOPair checks that queueURL is a FIFO queue redriving to the FIFO
// queue dlqURL, neither with content-based deduplication, as the worker reads them.
func checkFIFOPair(t *testing.T, sq *sqs.Client, queueURL, dlqURL string) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Read(ctx, sq, queueURL)
	if err != nil {
		t.Fatal(err)
	}
	if !q.FIFO || !q.DeadLetterFIFO || q.DeadLetterURL != dlqURL {
		t.Errorf("queue %s: FIFO %v, dead-letter queue %s (FIFO %v); want a FIFO queue redriving to the FIFO queue %s",
			queueURL, q.FIFO, q.DeadLetterURL, q.DeadLetterFIFO, dlqURL)
	}
	for _, u := range []string{queueURL, dlqURL} {
		out, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameContentBasedDeduplication},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Attributes[string(types.QueueAttributeNameContentBasedDeduplication)]; got != "false" {
			t.Errorf("queue %s: ContentBasedDeduplication %q, want false", u, got)
		}
	}
}

// TestSetupFIFO: `worker setup -fifo`, run twice, creates and then keeps
// name.fifo redriving to name-dlq.fifo.
func TestSetupFIFO(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t)
	name, table := awstest.Name("setup"), awstest.Name("claims")
	var first map[string]string
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(workerBin, "setup", "-fifo", "-queue-name", name, "-claim-table", table)
		cmd.Env = withoutBrokers(os.Environ()) // SQS's setup, whatever else the launchers started
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				stderr = ee.Stderr
			}
			t.Fatalf("setup run %d: %v\n%s", run, err, stderr)
		}
		printed := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			printed[k] = v
		}
		if !strings.HasSuffix(printed["QUEUE_URL"], "/"+name+".fifo") || !strings.HasSuffix(printed["DLQ_URL"], "/"+name+"-dlq.fifo") {
			t.Fatalf("setup run %d printed %q, want queues %s.fifo and %s-dlq.fifo", run, out, name, name)
		}
		if first == nil {
			first = printed
		} else if !maps.Equal(printed, first) {
			t.Errorf("second run printed %v, first %v", printed, first)
		}
		checkFIFOPair(t, sqs.NewFromConfig(cfg), printed["QUEUE_URL"], printed["DLQ_URL"])
	}
}

// TestLocalStackInitScriptFIFO: the init script, run twice, creates and
// then keeps the FIFO pair next to the standard one.
func TestLocalStackInitScriptFIFO(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t)
	names := deployNewNames()
	sq := sqs.NewFromConfig(cfg)
	for run := 1; run <= 2; run++ {
		if _, _, err := deployRunInitScript(t, names); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		urls := make([]string, 2)
		for i, n := range []string{names.queue + ".fifo", names.dlq + ".fifo"} {
			out, err := sq.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(n)})
			if err != nil {
				t.Fatalf("run %d: queue %s: %v", run, n, err)
			}
			urls[i] = aws.ToString(out.QueueUrl)
		}
		checkFIFOPair(t, sq, urls[0], urls[1])
	}
}

// TestFIFOWaitingKeepsLease: four messages of one group arrive in one
// receive and take 1.5 s each with a 3 s visibility timeout, so the last
// waits 4.5 s for its turn. The waiting messages' visibility is extended
// meanwhile: each is processed on its first receive, in order, and none
// reaches its turn with its lease over.
func TestFIFOWaitingKeepsLease(t *testing.T) {
	t.Parallel()
	e := newFIFOEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 1500 * time.Millisecond}})
	ps := payments("fifowait", 4)
	var msgs []fifoMessage
	for _, p := range ps {
		b, _ := json.Marshal(p)
		msgs = append(msgs, fifoMessage{"acct", string(b)})
	}
	e.sendFIFO(msgs)
	w := e.start("w1", workerOptions{concurrency: 8})
	e.waitDrained(time.Minute)
	st := e.assertChargedOnce(ps)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	var want []string
	for _, p := range ps {
		want = append(want, p.PaymentID)
	}
	if !slices.Equal(st.ChargeLog, want) {
		t.Errorf("charged in the order %v, want %v", st.ChargeLog, want)
	}
	if n := w.outcomeCountWhere("completed", func(l logLine) bool { return l.ReceiveCount == 1 }); n != len(ps) {
		t.Errorf("%d payments completed on their first receive, want all %d: a waiting message lost its lease", n, len(ps))
	}
	if n := w.logCount("lease ended before processing started"); n != 0 {
		t.Errorf("%d messages reached their turn with the lease over", n)
	}
}

// TestFIFOGroupStopsBehindFailure: four messages of one group arrive in one
// receive and the second fails at the provider: the third and fourth are
// not started but returned at once; the second comes back first after its
// retry delay, and the group is charged in order.
func TestFIFOGroupStopsBehindFailure(t *testing.T) {
	t.Parallel()
	e := newFIFOEnv(t, envOptions{fake: fakeprovider.Config{
		FailFirst: func(key string, _ provider.Payment) bool { return key == "fifostop_0001" },
	}})
	ps := payments("fifostop", 4)
	var msgs []fifoMessage
	for _, p := range ps {
		b, _ := json.Marshal(p)
		msgs = append(msgs, fifoMessage{"acct", string(b)})
	}
	e.sendFIFO(msgs)
	w := e.start("w1", workerOptions{concurrency: 8, extraEnv: []string{"PROVIDER_ATTEMPTS=1", "HOLD_FOR=1ms", "OUTAGE_COVER=4s"}})
	e.waitDrained(time.Minute)
	st := e.assertChargedOnce(ps)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	var want []string
	for _, p := range ps {
		want = append(want, p.PaymentID)
	}
	if !slices.Equal(st.ChargeLog, want) {
		t.Errorf("charged in the order %v, want %v", st.ChargeLog, want)
	}
	if n := w.logCount("FIFO group stopped"); n != 1 {
		t.Errorf("group stopped %d times, want once (behind %s)", n, ps[1].PaymentID)
	}
	if n := w.logField("FIFO group stopped", "cause"); n != "failed" {
		t.Errorf("group stopped with cause %q, want failed", n)
	}
	// The first completed on its first receive; the others on their second.
	if n := w.outcomeCountWhere("completed", func(l logLine) bool { return l.ReceiveCount == 2 }); n != 3 {
		t.Errorf("%d payments completed on their second receive, want 3 (the failed one and the two behind it)", n)
	}
}
