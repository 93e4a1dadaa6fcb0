package integration

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestRedriveHelpFiltersMatchReasons: the worker dead-letters one message
// of each kind an operator must tell apart (poison, a key reused with
// another payment, a payment to reconcile), and every filter `worker
// redrive -h` documents matches its kind and only it: a dry run with
// -reason counts one message for each, and the runbook's exclusions move
// only the poison.
func TestRedriveHelpFiltersMatchReasons(t *testing.T) {
	t.Parallel()
	recon := provider.Payment{PaymentID: "codes_recon", Amount: 100, Currency: "EUR"}
	e := newEnv(t, envOptions{fake: fakeprovider.Config{
		FailFirst: func(_ string, p provider.Payment) bool { return p.PaymentID == recon.PaymentID },
	}})
	reused := provider.Payment{PaymentID: "codes_reused", Amount: 100, Currency: "EUR"}
	e.send(`{"payment_id": "codes_poison", "amount": 1`, paymentBody(reused), paymentBody(recon))
	w := e.start("w1", workerOptions{extraEnv: []string{"PROVIDER_KEY_LIFETIME=200ms", "PROVIDER_LOOKUP=false", "PROVIDER_ATTEMPTS=1"}})
	waitFor(t, 30*time.Second, "the reused payment charged", func() bool { return e.fake.Stats().Charges >= 1 })
	reused.Amount = 200
	e.send(paymentBody(reused))
	waitFor(t, time.Minute, "three dead letters", func() bool { return e.queueDepth(e.dlqURL) == 3 })
	e.waitDrained(30 * time.Second)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}

	_, stdout, stderr := e.command(nil, "redrive", "-h")
	help := stdout + stderr
	var words []string
	for _, m := range regexp.MustCompile(`-(?:exclude-)?reason ([a-z_]+)\b`).FindAllStringSubmatch(help, -1) {
		if m[1] != "value" && !slices.Contains(words, m[1]) { // "value": the flag's placeholder
			words = append(words, m[1])
		}
	}
	for _, want := range []string{"poison", "key_reused", "reconcile"} {
		if !slices.Contains(words, want) {
			t.Errorf("worker redrive -h documents the filters %q, want one for %s:\n%s", words, want, help)
		}
	}
	for _, w := range words {
		out := e.mustCommand(nil, "redrive", "-dry-run", "-reason", w)
		if !strings.Contains(out, "would move 1 ") {
			t.Errorf("redrive -dry-run -reason %s:\n%s\nwant it to count one message (would move 1)", w, out)
		}
	}
	out := e.mustCommand(nil, "redrive", "-exclude-reason", "key_reused", "-exclude-reason", "reconcile")
	if !strings.Contains(out, "moved 1 messages") || !strings.Contains(out, "left 2") {
		t.Errorf("redrive -exclude-reason key_reused -exclude-reason reconcile:\n%s\nwant the poison moved, 2 left", out)
	}
}
