package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestLedgerBadSettings: an unknown handler, or the ledger without its
// table, exits 2 with one line naming the setting; the ledger does not
// need PROVIDER_URL.
func TestLedgerBadSettings(t *testing.T) {
	t.Parallel()
	base := map[string]string{"QUEUE_URL": "http://127.0.0.1:1/q", "CLAIM_TABLE": "claims"}
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HANDLER": "sms"}, `HANDLER (-handler) "sms"`},
		{map[string]string{"HANDLER": "ledger"}, "LEDGER_TABLE"},
		{map[string]string{"HANDLER": "ledger", "LEDGER_TABLE": "book", "LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{}, "PROVIDER_URL"},
	}
	for _, tc := range tests {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tc.env {
			env[k] = v
		}
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"run"}, func(k string) string { return env[k] }, &out, &errOut)
		got := strings.TrimSpace(errOut.String())
		if code != 2 || strings.Contains(got, "\n") || !strings.Contains(got, tc.want) {
			t.Errorf("run with %v: exit %d, stderr %q; want exit 2 and one line naming %s", tc.env, code, got, tc.want)
		}
	}
}
