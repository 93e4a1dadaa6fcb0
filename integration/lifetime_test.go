package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

// TestProviderKeyLifetime: the provider forgets keys 1.2 s after first
// use and the first call of 15% of the payments charges, then hangs past
// the worker's 1 s provider timeout; the worker's retry comes 1.5-2 s
// after the first use, when the key is forgotten.
//
//   - Told the provider's lifetime (PROVIDER_KEY_LIFETIME=1s), the worker
//     looks each late retry up and completes it with the charge found: every
//     payment charged once, nothing dead-lettered.
//   - With the lookup off, each late retry is dead-lettered with the reason
//     to reconcile, never charged again.
//   - Told a lifetime the provider does not have (24h), the late retries
//     charge again: the failure the rule prevents, shown on this setup.
func TestProviderKeyLifetime(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Config{ChargeThenTimeout: 0.15, TimeoutDelay: 3 * time.Second, KeyLifetime: 1200 * time.Millisecond}
	base := []string{"PROVIDER_ATTEMPTS=1", "PROVIDER_TIMEOUT=1s"}
	for _, tc := range []struct {
		name    string
		env     []string
		lookup  bool
		doubles bool
	}{
		{name: "lookup", env: []string{"PROVIDER_KEY_LIFETIME=1s"}, lookup: true},
		{name: "lookup-off", env: []string{"PROVIDER_KEY_LIFETIME=1s", "PROVIDER_LOOKUP=false"}},
		{name: "lifetime-unknown", env: []string{"PROVIDER_KEY_LIFETIME=24h"}, doubles: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{fake: fake})
			ps := payments("life_"+strings.ReplaceAll(tc.name, "-", "_"), 100)
			e.sendPayments(ps)
			w := e.start("w1", workerOptions{extraEnv: append(append([]string{}, base...), tc.env...)})
			e.waitDrained(2 * time.Minute)
			if code := w.stop(t, 30*time.Second); code != 0 {
				t.Errorf("worker exited %d", code)
			}
			st := e.fake.Stats()
			late := w.logCount("retrying in process")
			t.Logf("payments %d, charges %d, charged twice %d, late retries %d, lookups %d", len(ps), st.Charges, len(st.DuplicateCharges()), late, st.Lookups)
			if late == 0 {
				t.Fatal("no retry came: the setup did not exercise the key lifetime")
			}
			// Four days of queue retention outlast a 1 s (or 24 h) key
			// lifetime: one warn line at start says so.
			if n := w.logCount("after the provider has forgotten its key"); n != 1 {
				t.Errorf("%d start-up warnings about the key lifetime, want 1", n)
			}
			if tc.doubles {
				if len(st.DuplicateCharges()) == 0 {
					t.Error("no payment charged twice without the rule: the setup does not show what the rule prevents")
				}
				return
			}
			e.assertChargedOnce(ps)
			dead := e.dlqMessages()
			if tc.lookup {
				if len(dead) != 0 {
					t.Errorf("%d dead-lettered with the lookup on, want 0", len(dead))
				}
				if st.Lookups == 0 {
					t.Error("no lookup was made")
				}
				return
			}
			if len(dead) == 0 {
				t.Error("nothing dead-lettered with the lookup off: the late retries went somewhere")
			}
			for _, m := range dead {
				if r := aws.ToString(m.MessageAttributes[worker.ReasonAttribute].StringValue); !strings.Contains(r, payment.ReasonReconcile) {
					t.Errorf("dead-lettered %s with reason %q, want %q", aws.ToString(m.Body), r, payment.ReasonReconcile)
				}
			}
		})
	}
}
