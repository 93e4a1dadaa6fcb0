package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker"
)

// command runs the worker binary to completion with the env's settings and
// extra, returning its exit code and output.
func (e *env) command(extra []string, args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, args...)
	cmd.Env = append(e.workerEnv(workerOptions{}), extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("worker %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// mustCommand runs the worker binary and fails the test unless it exits 0.
func (e *env) mustCommand(extra []string, args ...string) string {
	e.t.Helper()
	code, stdout, stderr := e.command(extra, args...)
	if code != 0 {
		e.t.Fatalf("worker %v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
	}
	return stdout
}

// getClaim runs `worker claims get key` and decodes its JSON.
func (e *env) getClaim(extra []string, key string) map[string]any {
	e.t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(e.mustCommand(extra, "claims", "get", key)), &c); err != nil {
		e.t.Fatalf("claims get %s: %v", key, err)
	}
	return c
}

func paymentBody(p provider.Payment) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// sendTo puts one message on url and returns its id.
func (e *env) sendTo(url, body string, attrs map[string]string) string {
	e.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	if len(attrs) > 0 {
		in.MessageAttributes = map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	out, err := e.sqs.SendMessage(context.Background(), in)
	if err != nil {
		e.t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// logLines returns the JSON log lines of p whose msg is msg.
func (p *proc) logLines(msg string) []map[string]any {
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == msg {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestClaimsCommands: every `worker claims` command against real rows, with
// a real worker showing what each change does to the next delivery.
func TestClaimsCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const prefix = "ops#"
	withPrefix := []string{"CLAIM_KEY_PREFIX=" + prefix}
	store, err := dynamo.New(dynamo.Config{Client: e.ddb, Table: e.table, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()

	// get: absent is exit 1 and one line.
	code, stdout, stderr := e.command(withPrefix, "claims", "get", "pay_absent")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `"pay_absent" not found`) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("claims get of an absent key: exit %d, stdout %q, stderr %q; want 1 and one line", code, stdout, stderr)
	}

	// A claim stuck in progress, its lease ten minutes away.
	stuck := provider.Payment{PaymentID: "pay_stuck", Amount: 100, Currency: "EUR"}
	a, err := store.Acquire(ctx, claimstore.AcquireParams{Key: stuck.PaymentID, Owner: "dead-host/1",
		LeaseUntil: now.Add(10 * time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || a.Outcome != claimstore.Acquired {
		t.Fatalf("acquire: %v %v", a.Outcome, err)
	}
	got := e.getClaim(withPrefix, stuck.PaymentID)
	row := e.claim(claimstore.StoredKey(prefix, stuck.PaymentID))
	for k, want := range map[string]any{
		"key": "pay_stuck", "stored_key": claimstore.StoredKey(prefix, "pay_stuck"), "status": "IN_PROGRESS", "token": 1.0, "acq": a.Claim.Acq,
		"owner": "dead-host/1", "attempts": 1.0, "lease_until_ms": json.Number(row["lease_until"]),
		"expires_at_s": json.Number(row["expires_at"]), "first_at_ms": json.Number(row["first_at"]),
		"lease_until": a.Claim.LeaseUntil.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	} {
		if n, ok := want.(json.Number); ok {
			f, _ := n.Float64()
			want = f
		}
		if got[k] != want {
			t.Errorf("claims get: %s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}

	// release: refused without -yes, and nothing changes.
	code, _, stderr = e.command(withPrefix, "claims", "release", stuck.PaymentID)
	if code != 2 || !strings.Contains(stderr, "refusing without -yes") {
		t.Fatalf("claims release without -yes: exit %d, stderr %q; want 2, refusing", code, stderr)
	}
	if r := e.claim(claimstore.StoredKey(prefix, stuck.PaymentID)); r["status"] != "IN_PROGRESS" {
		t.Fatalf("refused release changed the row: %v", r)
	}
	// release: refused while the lease lives, for the holder may still be
	// working: the next delivery would run beside it.
	code, _, stderr = e.command(withPrefix, "claims", "release", stuck.PaymentID, "-yes")
	if code != 1 || !strings.Contains(stderr, "lease") || !strings.Contains(stderr, "-force") {
		t.Fatalf("claims release -yes of a live lease: exit %d, stderr %q; want 1, saying the lease is live and -force overrides", code, stderr)
	}
	if r := e.claim(claimstore.StoredKey(prefix, stuck.PaymentID)); r["status"] != "IN_PROGRESS" {
		t.Fatalf("refused release changed the row: %v", r)
	}
	out := e.mustCommand(withPrefix, "claims", "release", stuck.PaymentID, "-yes", "-force")
	if !strings.Contains(out, "status IN_PROGRESS -> RELEASED") {
		t.Errorf("claims release printed %q, want the change", out)
	}
	// A second release is refused: the claim is no longer in progress.
	if code, _, stderr := e.command(withPrefix, "claims", "release", stuck.PaymentID, "-yes"); code != 1 || !strings.Contains(stderr, "is RELEASED") {
		t.Errorf("release of a released claim: exit %d, stderr %q; want 1 saying it is RELEASED", code, stderr)
	}

	// complete: a payment reconciled by hand after its claim was released.
	recon := provider.Payment{PaymentID: "pay_recon", Amount: 200, Currency: "EUR"}
	b, err := store.Acquire(ctx, claimstore.AcquireParams{Key: recon.PaymentID, Owner: "w", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, claimstore.ReleaseParams{Holder: b.Claim.Holder(), LastError: "outcome unknown"}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := e.command(withPrefix, "claims", "complete", recon.PaymentID, "-result", "ch_manual"); code != 2 || !strings.Contains(stderr, "-yes") {
		t.Fatalf("claims complete without -yes: exit %d, stderr %q", code, stderr)
	}
	out = e.mustCommand(withPrefix, "claims", "complete", recon.PaymentID, "-result", "ch_manual", "-yes")
	if !strings.Contains(out, "status RELEASED -> COMPLETED") || !strings.Contains(out, `result "" -> "ch_manual"`) {
		t.Errorf("claims complete printed %q, want the change", out)
	}

	// A worker now: the released claim is taken over at once (the lease had
	// ten minutes left), the reconciled one is a duplicate and not charged.
	w := e.start("w1", workerOptions{extraEnv: withPrefix})
	e.sendPayments([]provider.Payment{stuck, recon})
	e.waitDrained(30 * time.Second)
	if r := e.claim(claimstore.StoredKey(prefix, stuck.PaymentID)); r["status"] != "COMPLETED" || r["token"] != "2" {
		t.Errorf("pay_stuck after release and a delivery = %v, want COMPLETED with token 2", r)
	}
	st := e.fake.Stats()
	if st.ChargesByPayment[stuck.PaymentID] != 1 || st.ChargesByPayment[recon.PaymentID] != 0 {
		t.Errorf("charges %v: want pay_stuck once, pay_recon (completed by hand) never", st.ChargesByPayment)
	}
	if n := w.outcomeCount("duplicate"); n != 1 {
		t.Errorf("duplicates logged = %d, want 1 (pay_recon)", n)
	}

	// forget: refused without -yes and for a claim not completed; then the
	// key runs again: a fresh row, the handler called again (the provider
	// replays its stored answer for the key).
	if code, _, stderr := e.command(withPrefix, "claims", "forget", stuck.PaymentID); code != 2 || !strings.Contains(stderr, "refusing without -yes") {
		t.Fatalf("claims forget without -yes: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := e.command(withPrefix, "claims", "forget", "pay_absent", "-yes"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("forget of an absent key: exit %d, stderr %q; want 1, not found", code, stderr)
	}
	out = e.mustCommand(withPrefix, "claims", "forget", stuck.PaymentID, "-yes")
	if !strings.Contains(out, "status COMPLETED") || !strings.Contains(out, "-> absent") {
		t.Errorf("claims forget printed %q, want the change", out)
	}
	if code, _, _ := e.command(withPrefix, "claims", "get", stuck.PaymentID); code != 1 {
		t.Errorf("claims get after forget: exit %d, want 1", code)
	}
	calls := e.fake.Stats().Calls
	e.sendPayments([]provider.Payment{stuck})
	e.waitDrained(30 * time.Second)
	waitFor(t, 10*time.Second, "the forgotten key to complete again", func() bool { return e.claim(claimstore.StoredKey(prefix, stuck.PaymentID))["status"] == "COMPLETED" })
	if r := e.claim(claimstore.StoredKey(prefix, stuck.PaymentID)); r["token"] != "1" || r["attempts"] != "1" {
		t.Errorf("pay_stuck after forget and a delivery = %v, want a fresh row (token 1, attempts 1)", r)
	}
	if st := e.fake.Stats(); st.Calls != calls+1 || st.ChargesByPayment[stuck.PaymentID] != 1 {
		t.Errorf("after forget: provider calls %d -> %d, charges %v; want one call more, replayed by the provider's key", calls, st.Calls, st.ChargesByPayment)
	}
	e.assertNoDeadLetters()
}

// deadLetterAttrs is what the worker puts on a message with body it
// dead-letters: OriginalMessageId signed with the tests' secret.
func deadLetterAttrs(reason, originalID, body string) map[string]string {
	a := map[string]string{worker.FirstReceivedAttribute: "2026-01-02T03:04:05Z",
		worker.OriginalIDAttribute: origin.Sign(testOriginalIDSecret, originalID, "2026-01-02T03:04:05Z", body)}
	if reason != "" {
		a[worker.ReasonAttribute] = reason
	}
	return a
}

// visibleDepth is the number of visible messages on url.
func (e *env) visibleDepth(url string) string {
	e.t.Helper()
	out, err := e.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)]
}

// TestRedrive: the dry run counts by reason and changes nothing; the move
// empties the dead-letter queue, drops the reason, keeps the original id,
// and the messages are processed.
func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("redrive", 6)
	reasons := []string{"provider unavailable", "provider unavailable", "provider unavailable", "provider rejected the request", "provider rejected the request", ""}
	for i, p := range ps {
		e.sendTo(e.dlqURL, paymentBody(p), deadLetterAttrs(reasons[i], fmt.Sprintf("orig-%d", i), paymentBody(p)))
	}

	out := e.mustCommand(nil, "redrive", "-dry-run")
	for _, want := range []string{"6 messages (dry run", "     3  provider unavailable", "     2  provider rejected the request", "     1  " + redrive.NoReason} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run printed:\n%s\nwant a line with %q", out, want)
		}
	}
	if v := e.visibleDepth(e.dlqURL); v != "6" {
		t.Fatalf("after the dry run %s messages are visible in the DLQ, want all 6 at once", v)
	}
	if e.queueDepth(e.queueURL) != 0 {
		t.Fatal("the dry run sent messages")
	}
	out = e.mustCommand(nil, "redrive", "-dry-run", "-max", "2")
	if !strings.Contains(out, "2 messages (dry run") {
		t.Errorf("dry run -max 2 printed %q", out)
	}
	waitFor(t, 5*time.Second, "the DLQ visible again", func() bool { return e.visibleDepth(e.dlqURL) == "6" })

	// -max moves only that many; then the rest.
	code, stdout, stderr := e.command(nil, "redrive", "-max", "2")
	if code != 0 || !strings.Contains(stdout, "moved 2 messages") || !strings.Contains(stderr, "loop") || strings.Contains(stderr, "\r") {
		t.Fatalf("redrive -max 2: exit %d, stdout %q, stderr %q; want 2 moved, the loop named, no progress line off a terminal", code, stdout, stderr)
	}
	// -native: the emulator has no move task; the loop takes over, saying so.
	code, stdout, stderr = e.command(nil, "redrive", "-native")
	if code != 0 || !strings.Contains(stdout, "moved 4 messages") || !strings.Contains(stderr, "does not support StartMessageMoveTask") {
		t.Fatalf("redrive -native: exit %d, stdout %q, stderr %q; want the fallback named and 4 moved", code, stdout, stderr)
	}
	if d := e.queueDepth(e.dlqURL); d != 0 {
		t.Fatalf("DLQ depth after redrive = %d, want 0", d)
	}

	// On the source queue: bodies and attributes kept, the reason gone.
	seen := map[string]types.Message{}
	waitFor(t, 10*time.Second, "6 redriven messages on the source queue", func() bool {
		r, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queueURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: 0, MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			seen[aws.ToString(m.Body)] = m
		}
		return len(seen) == 6
	})
	for i, p := range ps {
		m, ok := seen[paymentBody(p)]
		if !ok {
			t.Fatalf("payment %s not on the source queue", p.PaymentID)
		}
		if _, ok := m.MessageAttributes[worker.ReasonAttribute]; ok {
			t.Errorf("%s still has %s", p.PaymentID, worker.ReasonAttribute)
		}
		if got, _ := origin.Verify(testOriginalIDSecret, aws.ToString(m.MessageAttributes[worker.OriginalIDAttribute].StringValue),
			"2026-01-02T03:04:05Z", paymentBody(p)); got != fmt.Sprintf("orig-%d", i) {
			t.Errorf("%s: %s = %q, want orig-%d", p.PaymentID, worker.OriginalIDAttribute, got, i)
		}
		if got := aws.ToString(m.MessageAttributes[worker.FirstReceivedAttribute].StringValue); got != "2026-01-02T03:04:05Z" {
			t.Errorf("%s: %s = %q, want it kept", p.PaymentID, worker.FirstReceivedAttribute, got)
		}
	}

	e.start("w1", workerOptions{})
	e.waitDrained(30 * time.Second)
	e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
}

// crashAfterSend is SQS with the dead-letter queue's deletes lost, as when
// the redrive process dies between sending a batch and deleting it.
type crashAfterSend struct {
	redrive.API
}

func (crashAfterSend) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return nil, errors.New("process killed before the delete")
}

// TestRedriveInterruptedChargesOnce: a redrive that dies between send and
// delete leaves each message in both queues; run again, it moves them a
// second time, and the claims make the doubled deliveries one charge each.
func TestRedriveInterruptedChargesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("interrupted", 5)
	for i, p := range ps {
		e.sendTo(e.dlqURL, paymentBody(p), deadLetterAttrs("provider unavailable", fmt.Sprintf("orig-%d", i), paymentBody(p)))
	}
	r, err := redrive.Move(context.Background(), crashAfterSend{e.sqs}, e.queueURL, e.dlqURL, redrive.Options{Visibility: time.Second, Secret: testOriginalIDSecret})
	if err == nil || r.Moved != 0 {
		t.Fatalf("interrupted move = %+v, %v; want an error and nothing counted as moved", r, err)
	}
	waitFor(t, 10*time.Second, "the DLQ's 5 messages visible again", func() bool { return e.visibleDepth(e.dlqURL) == "5" })
	if d := e.queueDepth(e.queueURL); d != 5 {
		t.Fatalf("source depth after the interrupted move = %d, want 5 (sent before the delete)", d)
	}
	if out := e.mustCommand(nil, "redrive"); !strings.Contains(out, "moved 5 messages") {
		t.Fatalf("second redrive printed %q, want 5 moved", out)
	}
	if d := e.queueDepth(e.queueURL); d != 10 {
		t.Fatalf("source depth = %d, want 10: each payment twice", d)
	}
	w := e.start("w1", workerOptions{})
	e.waitDrained(60 * time.Second)
	e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	if n := w.outcomeCount("duplicate"); n != 5 {
		t.Errorf("duplicates logged = %d, want 5 (the second copy of each)", n)
	}
}

// rejectAfterCharge forwards charges to the provider at target, but answers
// the first charge of each chosen payment with a 400 after the provider has
// charged it: a forced permanent failure whose charge happened.
func rejectAfterCharge(t *testing.T, target string, chosen ...string) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	left := map[string]bool{}
	for _, id := range chosen {
		left[id] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		respBody, _ := io.ReadAll(resp.Body)
		var p provider.Payment
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		reject := r.Method == http.MethodPost && resp.StatusCode == http.StatusOK && left[p.PaymentID]
		delete(left, p.PaymentID)
		mu.Unlock()
		if reject {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"forced rejection after the charge"}}`)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(respBody)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRedriveKeepsMessageIDKey: with IDEMPOTENCY_KEY_FROM=message_id, a
// message the worker dead-lettered and `worker redrive` sent back (with a new
// SQS message id) is recognized by its first id: reconciled by hand, it is a
// duplicate and not charged; left released, the same row is taken over and
// the provider sees the same key.
func TestRedriveKeepsMessageIDKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	recon := provider.Payment{PaymentID: "pay_recon", Amount: 300, Currency: "EUR"}
	retry := provider.Payment{PaymentID: "pay_retry", Amount: 400, Currency: "EUR"}
	e.provURL = rejectAfterCharge(t, e.provURL, recon.PaymentID, retry.PaymentID).URL
	byMessageID := []string{"IDEMPOTENCY_KEY_FROM=message_id"}
	w := e.start("w1", workerOptions{extraEnv: byMessageID})
	idRecon := e.sendTo(e.queueURL, paymentBody(recon), nil)
	idRetry := e.sendTo(e.queueURL, paymentBody(retry), nil)
	waitFor(t, 30*time.Second, "both messages dead-lettered by the worker", func() bool {
		return e.queueDepth(e.queueURL) == 0 && e.queueDepth(e.dlqURL) == 2
	})
	if n := w.logCount("failed permanently: dead-lettering"); n != 2 {
		t.Fatalf("permanent-failure lines = %d, want 2", n)
	}
	if st := e.fake.Stats(); st.ChargesByPayment[recon.PaymentID] != 1 || st.ChargesByPayment[retry.PaymentID] != 1 {
		t.Fatalf("charges %v, want each charged once before the forced rejection", st.ChargesByPayment)
	}
	c := e.getClaim(nil, idRecon)
	if c["status"] != "RELEASED" || !strings.Contains(fmt.Sprint(c["last_error"]), "provider rejected the request") {
		t.Fatalf("claim %s = %v, want RELEASED with the rejection as last_error", idRecon, c)
	}

	// The row pay_retry's redrive must take over: its token as dead-lettered
	// (1, or more if a slow emulator made a delivery outlast its lease).
	retryToken, _ := e.getClaim(nil, idRetry)["token"].(float64)
	if retryToken < 1 {
		t.Fatalf("claim %s has no token before the redrive: %v", idRetry, e.getClaim(nil, idRetry))
	}

	// The operator finds pay_recon's charge and records it; pay_retry is left.
	e.mustCommand(nil, "claims", "complete", idRecon, "-result", "ch_reconciled", "-yes")
	if out := e.mustCommand(nil, "redrive"); !strings.Contains(out, "moved 2 messages") {
		t.Fatalf("redrive printed %q", out)
	}
	waitFor(t, 30*time.Second, "both redriven messages processed", func() bool {
		return e.queueDepth(e.queueURL) == 0 && len(w.logLines("duplicate: key already completed"))+len(w.logLines("completed")) >= 2
	})
	dups, completions := w.logLines("duplicate: key already completed"), w.logLines("completed")
	if len(dups) != 1 || len(completions) != 1 {
		t.Fatalf("after the redrive: %d duplicates and %d completions, want 1 and 1 (charges %v)", len(dups), len(completions), e.fake.Stats().ChargesByPayment)
	}
	dup := dups[0]
	if dup["idempotency_key"] != idRecon || dup["message_id"] == idRecon || dup["result"] != "ch_reconciled" {
		t.Errorf("duplicate line %v: want key %s (the first id) on a message with a new id, result ch_reconciled", dup, idRecon)
	}
	done := completions[0]
	if done["idempotency_key"] != idRetry || done["message_id"] == idRetry || done["token"] != retryToken+1 {
		t.Errorf("completed line %v: want key %s on a message with a new id, token %v (the same row taken over)", done, idRetry, retryToken+1)
	}
	for _, id := range []string{fmt.Sprint(dup["message_id"]), fmt.Sprint(done["message_id"])} {
		if row := e.claim(id); len(row) != 0 {
			t.Errorf("a claim row exists for the redriven message id %s: %v; the key should be the first id", id, row)
		}
	}
	st := e.fake.Stats()
	if st.ChargesByPayment[recon.PaymentID] != 1 || st.ChargesByPayment[retry.PaymentID] != 1 {
		t.Errorf("charges %v, want each payment charged once in all", st.ChargesByPayment)
	}
	e.assertNoDeadLetters()
}

// sendBatch puts bodies on url, ten at a time.
func (e *env) sendBatch(url string, bodies []string, attrs map[string]string) {
	e.t.Helper()
	ma := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		ma[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	for start := 0; start < len(bodies); start += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i, b := range bodies[start:min(start+10, len(bodies))] {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b), MessageAttributes: ma})
		}
		out, err := e.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			e.t.Fatalf("send batch: %v %v", err, out)
		}
	}
}

// TestRedriveInterruptible: SIGINT in the middle of a move finishes the
// batch in flight and stops: every message is in exactly one of the queues.
func TestRedriveInterruptible(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const n = 400
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	e.sendBatch(e.dlqURL, bodies, map[string]string{worker.ReasonAttribute: "provider unavailable"})
	p := e.start("redrive", workerOptions{}, "redrive", "-move-unkeyed") // no OriginalMessageId: sent as if without room
	waitFor(t, 30*time.Second, "the move to start", func() bool { return e.queueDepth(e.queueURL) >= 20 })
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 1 || !strings.Contains(p.log.String(), "interrupted") {
		t.Fatalf("interrupted redrive: exit %d, output %q; want 1, saying it was interrupted", code, p.log.String())
	}
	src, dlq := e.queueDepth(e.queueURL), e.queueDepth(e.dlqURL)
	if src+dlq != n || src == n {
		t.Fatalf("after the interrupt: %d on the source, %d in the DLQ; want %d in all, the move stopped part way", src, dlq, n)
	}
	if out := e.mustCommand(nil, "redrive", "-move-unkeyed"); !strings.Contains(out, fmt.Sprintf("moved %d messages", dlq)) {
		t.Fatalf("the second redrive printed %q, want the %d left", out, dlq)
	}
	if src, dlq := e.queueDepth(e.queueURL), e.queueDepth(e.dlqURL); src != n || dlq != 0 {
		t.Fatalf("after the second redrive: %d on the source, %d in the DLQ; want %d and 0", src, dlq, n)
	}
}

// TestSetupExport: `eval "$(worker setup -export)"` sets the variables the
// other commands read.
func TestSetupExport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	queue, table := awstest.Name("setup"), awstest.Name("claims")
	script := fmt.Sprintf(`set -e; eval "$(%q setup -export -queue-name %s -claim-table %s)"; echo "$QUEUE_URL|$DLQ_URL|$CLAIM_TABLE"`, workerBin, queue, table)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = e.workerEnv(workerOptions{})
	out, err := cmd.Output() // stderr: what setup did
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	parts := strings.Split(strings.TrimSpace(string(out)), "|")
	if len(parts) != 3 || !strings.HasSuffix(parts[0], "/"+queue) || !strings.HasSuffix(parts[1], "/"+queue+"-dlq") || parts[2] != table {
		t.Fatalf("after eval: %q, want the queue, its DLQ and the table", out)
	}
}
