package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/worker"
)

// testOriginalIDSecret is ORIGINAL_ID_SECRET of every worker and command
// the integration tests run (workerEnv).
const testOriginalIDSecret origin.Secret = "integration-original-id-secret"

// TestRedriveLeavesForgedAndUnkeyed: someone with send rights on the
// dead-letter queue (but not on the payments queue) sends a payment
// straight to it with a made-up OriginalMessageId; another message sits
// there with none at all, as the worker leaves one whose own attributes
// filled SQS's ten. `worker redrive` moves only the worker's signed dead
// letter and leaves both, counted and named; -move-unkeyed moves the
// unkeyed one, never the forged one.
func TestRedriveLeavesForgedAndUnkeyed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("origin", 3)
	e.sendTo(e.dlqURL, paymentBody(ps[0]), deadLetterAttrs("provider unavailable", "orig-0", paymentBody(ps[0])))
	forged := e.sendTo(e.dlqURL, paymentBody(ps[1]), map[string]string{worker.OriginalIDAttribute: "victim-id", worker.ReasonAttribute: "provider unavailable"})
	unkeyed := e.sendTo(e.dlqURL, paymentBody(ps[2]), map[string]string{"Tenant": "t1"})

	out := e.mustCommand(nil, "redrive")
	if !strings.Contains(out, "moved 1 messages") {
		t.Errorf("redrive printed %q, want 1 moved (the signed one)", out)
	}
	if !strings.Contains(out, "1 whose "+worker.OriginalIDAttribute+" does not verify") || !strings.Contains(out, forged) {
		t.Errorf("redrive printed %q, want the forged message %s left and named", out, forged)
	}
	if !strings.Contains(out, "1 without "+worker.OriginalIDAttribute) || !strings.Contains(out, unkeyed) {
		t.Errorf("redrive printed %q, want the unkeyed message %s left and named", out, unkeyed)
	}
	waitFor(t, 10*time.Second, "both left visible again", func() bool { return e.visibleDepth(e.dlqURL) == "2" })

	out = e.mustCommand(nil, "redrive", "-move-unkeyed")
	if !strings.Contains(out, "moved 1 messages") || !strings.Contains(out, forged) {
		t.Errorf("redrive -move-unkeyed printed %q, want the unkeyed one moved and the forged %s left", out, forged)
	}
	waitFor(t, 10*time.Second, "the forged one visible again", func() bool { return e.visibleDepth(e.dlqURL) == "1" })
	got := e.receiveBodies(e.queueURL)
	if len(got) != 2 || strings.Contains(strings.Join(got, " "), ps[1].PaymentID) {
		t.Errorf("payments queue holds %q, want %s and %s, never the forged %s", got, ps[0].PaymentID, ps[2].PaymentID, ps[1].PaymentID)
	}
}
