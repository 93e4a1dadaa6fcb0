package main

import (
	"strings"
	"testing"
)

// TestBadSettingsAreRefused: settings that would send a secret in clear or
// exhaust the process get exit 2 and one line that names the setting.
func TestBadSettingsAreRefused(t *testing.T) {
	t.Parallel()
	base := func(kv ...string) map[string]string {
		env := map[string]string{
			"CLAIM_TABLE": "claims", "QUEUE_URL": "http://127.0.0.1:1/000000000000/q",
			"PROVIDER_URL": "https://provider.example", "PROVIDER_API_KEY": "sk_test_1",
			// Checked after the settings under test: a run not refused for
			// them stops here, before it reaches AWS.
			"LOG_LEVEL": "loud",
		}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		refused string // "" means not refused for this reason
	}{
		{"http to a remote host with a key", base("PROVIDER_URL", "http://provider.example"), "PROVIDER_URL"},
		{"http to a remote address with a key", base("PROVIDER_URL", "http://10.0.0.7:8080"), "PROVIDER_URL"},
		{"http to loopback", base("PROVIDER_URL", "http://127.0.0.1:8080"), ""},
		{"http to localhost", base("PROVIDER_URL", "http://localhost:8080"), ""},
		{"http to ::1", base("PROVIDER_URL", "http://[::1]:8080"), ""},
		{"http without a key", base("PROVIDER_URL", "http://provider.example", "PROVIDER_API_KEY", ""), ""},
		{"http allowed explicitly", base("PROVIDER_URL", "http://provider.example", "PROVIDER_ALLOW_HTTP", "true"), ""},
		{"concurrency over the cap", base("WORKER_CONCURRENCY", "1000000000"), "WORKER_CONCURRENCY"},
		{"concurrency at the cap", base("WORKER_CONCURRENCY", "1000"), ""},
		{"provider URL with a username", base("PROVIDER_URL", "https://usersecret:@provider.example"), "PROVIDER_URL"},
		{"provider URL with a query", base("PROVIDER_URL", "https://provider.example/?api_key=qsecret"), "PROVIDER_URL"},
	} {
		code, _, stderr := runWorker(t, tc.env, "run")
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		refused := code == 2 && len(lines) == 1 && strings.Contains(stderr, tc.refused)
		if tc.refused != "" && !refused {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line naming %s", tc.name, code, stderr, tc.refused)
		}
		if strings.Contains(stderr, "usersecret") || strings.Contains(stderr, "qsecret") {
			t.Errorf("%s: stderr %q shows a secret part of PROVIDER_URL", tc.name, stderr)
		}
		if tc.refused == "" && !strings.Contains(stderr, "LOG_LEVEL") {
			t.Errorf("%s: exit %d, stderr %q; want it to pass on to LOG_LEVEL", tc.name, code, stderr)
		}
	}
}
