package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestFIFOBackoffFollowsOwnFailures: 4 groups of 6 payments on a FIFO queue
// with maxReceiveCount 10, every payment failing once at the provider, and
// retries not held in process (receives of ten), so every failure goes back through the queue
// and returns its group's later messages unstarted. Each of those comes back
// with a receive count grown by the failures in front of it; its own first
// failure must still get the first, short delay. Scheduled by the receive
// count instead, the last messages of a group waited minutes on one
// failure: the queue was not drained after 120s.
func TestFIFOBackoffFollowsOwnFailures(t *testing.T) {
	t.Parallel()
	e := newFIFOEnv(t, envOptions{maxReceive: 10, fake: fakeprovider.Config{
		FailFirst: func(string, provider.Payment) bool { return true },
	}})
	const groups, perGroup = 4, 6
	var all []provider.Payment
	var msgs []fifoMessage
	for g := range groups {
		for i := range perGroup {
			p := provider.Payment{PaymentID: fmt.Sprintf("fifob_%d_%02d", g, i), Amount: int64(100 + i), Currency: "EUR"}
			all = append(all, p)
			b, _ := json.Marshal(p)
			msgs = append(msgs, fifoMessage{fmt.Sprintf("acct-%d", g), string(b)})
		}
	}
	e.sendFIFO(msgs)
	w := e.start("w1", workerOptions{concurrency: 20, extraEnv: []string{
		"PROVIDER_ATTEMPTS=1", // every failure reaches the worker
		"HOLD_FOR=1ms",        // and goes back through the queue
	}})
	start := time.Now()
	e.waitDrained(60 * time.Second)
	t.Logf("drained in %s", time.Since(start).Round(100*time.Millisecond))
	st := e.assertChargedOnce(all)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	if st.Faults != groups*perGroup {
		t.Errorf("%d injected failures, want one per payment (%d)", st.Faults, groups*perGroup)
	}
	for g := range groups {
		prefix := fmt.Sprintf("fifob_%d_", g)
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf("%s%02d", prefix, i))
		}
		if got := firstCharges(st.ChargeLog, prefix); !slices.Equal(got, want) {
			t.Errorf("group acct-%d charged in the order %v, want %v", g, got, want)
		}
	}
	if dead := e.fifoDLQMessages(); len(dead) > 0 {
		t.Errorf("%d messages dead-lettered, want none", len(dead))
	}
	if stopped := w.logCount("FIFO group stopped"); stopped == 0 {
		t.Error("no group was stopped behind a failure: the test did not return later messages")
	}
}
