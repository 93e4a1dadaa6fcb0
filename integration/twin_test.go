package integration

import (
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestDuplicateWaitsForItsTwin: a payment sent twice at once to one worker
// (a producer's retry) while its charge takes 2 s: the copy waits for its
// twin in the process rather than for the twin's lease (about the
// visibility timeout), and is acked as a duplicate within a second of the
// twin's completion, with one charge.
func TestDuplicateWaitsForItsTwin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 30 * time.Second, fake: fakeprovider.Config{Latency: 2 * time.Second}})
	p := provider.Payment{PaymentID: "twin_0001", Amount: 100, Currency: "EUR"}
	e.send(paymentBody(p), paymentBody(p))
	w := e.start("w1", workerOptions{})
	e.waitDrained(time.Minute)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	e.assertChargedOnce([]provider.Payment{p})
	if st := e.fake.Stats(); st.Charges != 1 {
		t.Errorf("%d charges, want 1", st.Charges)
	}
	completed, dup := w.logLines("completed"), w.logLines("duplicate: key already completed")
	if len(completed) != 1 || len(dup) != 1 {
		t.Fatalf("%d completed, %d duplicate lines; want 1 and 1", len(completed), len(dup))
	}
	at := func(l map[string]any) time.Time {
		ts, _ := time.Parse(time.RFC3339Nano, l["time"].(string))
		return ts
	}
	after := at(dup[0]).Sub(at(completed[0]))
	t.Logf("duplicate acked %s after its twin completed", after)
	if after > time.Second {
		t.Errorf("duplicate acked %s after its twin completed, want within a second", after)
	}
	if len(w.logLines("duplicate: key held by a delivery in this process; waiting for it")) == 0 {
		t.Error("the copy did not wait for its twin in process (the two were not received together?)")
	}
}
