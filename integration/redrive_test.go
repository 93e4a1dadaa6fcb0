package integration

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/redrive"
)

// TestRedriveByReason: the runbook's "do not redrive key reuse and
// reconcile messages" can be followed: -exclude-reason leaves them in the
// dead-letter queue, visible again, and -reason moves only its own.
func TestRedriveByReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("byreason", 5)
	reasons := []string{"permanent: provider rejected the request", "permanent: provider rejected the request",
		"key_reused: idempotency key reused with a different payment: HTTP 422", "reconcile: " + payment.ReasonReconcile, ""}
	for i, p := range ps {
		e.sendTo(e.dlqURL, paymentBody(p), deadLetterAttrs(reasons[i], fmt.Sprintf("orig-%d", i), paymentBody(p)))
	}
	code, stdout, stderr := e.command(nil, "redrive", "-exclude-reason", "key_reused", "-exclude-reason", "reconcile")
	if code != 0 || !strings.Contains(stdout, "moved 3 messages") || !strings.Contains(stdout, "left 2") {
		t.Fatalf("redrive -exclude-reason: exit %d, stdout %q, stderr %q; want 3 moved and 2 left", code, stdout, stderr)
	}
	if d := e.queueDepth(e.queueURL); d != 3 {
		t.Errorf("source queue depth %d, want 3", d)
	}
	waitFor(t, 10*time.Second, "the 2 excluded visible again in the DLQ", func() bool { return e.visibleDepth(e.dlqURL) == "2" })
	// The dry run groups reasons by category: the code before the first ": ".
	if out := e.mustCommand(nil, "redrive", "-dry-run"); !strings.Contains(out, "1  key_reused") || !strings.Contains(out, "1  reconcile") {
		t.Errorf("the DLQ after the filtered move:\n%s\nwant the key reuse and the reconcile messages", out)
	}
	if out := e.mustCommand(nil, "redrive", "-reason", "reconcile"); !strings.Contains(out, "moved 1 messages") {
		t.Errorf("redrive -reason reconcile printed %q, want 1 moved", out)
	}
	if out := e.mustCommand(nil, "redrive", "-reason", redrive.NoReason); !strings.Contains(out, "moved 0 messages") {
		t.Errorf("redrive -reason (none) printed %q, want nothing moved", out)
	}
}

// TestRedriveStopsWhilePoisonComesBack: with a worker running, poison the
// redrive moves is dead-lettered again at once; the redrive moves each
// message once and exits, rather than chasing them until the DLQ reads empty.
func TestRedriveStopsWhilePoisonComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const n = 40
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"payment_id": "poison-%d", "amount": 1`, i) // not JSON: poison
	}
	e.sendBatch(e.dlqURL, bodies, map[string]string{"DeadLetterReason": "invalid message"})
	e.start("w1", workerOptions{})
	code, stdout, stderr := e.command(nil, "redrive", "-move-unkeyed") // no OriginalMessageId: sent as if without room
	m := regexp.MustCompile(`moved (\d+) messages`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("redrive with poison coming back: exit %d, stdout %q, stderr %q; want it to finish", code, stdout, stderr)
	}
	if moved, _ := strconv.Atoi(m[1]); moved > n {
		t.Errorf("redrive moved %d messages of a DLQ of %d: it moved poison again as it came back", moved, n)
	}
}

// TestRedriveSizesBatchesByBytes: ten messages whose bodies together pass
// SQS's limit on a batch's total size are moved, in smaller batches.
func TestRedriveSizesBatchesByBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	bodies := make([]string, 10)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", 200<<10))
	}
	for _, b := range bodies { // one at a time: as a batch they are too big
		a := deadLetterAttrs("provider unavailable", fmt.Sprintf("orig-%d", len(b)), b)
		e.sendTo(e.dlqURL, b, a)
	}
	code, stdout, stderr := e.command(nil, "redrive")
	if code != 0 || !strings.Contains(stdout, "moved 10 messages") {
		t.Fatalf("redrive of 10 x 200 KiB: exit %d, stdout %q, stderr %q; want all 10 moved", code, stdout, stderr)
	}
	if d := e.queueDepth(e.dlqURL); d != 0 {
		t.Errorf("DLQ depth %d after the move, want 0", d)
	}
}
