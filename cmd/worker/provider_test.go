package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

func TestProviderCommandServesUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stdoutW := io.Pipe()
	var stderr syncbuf.Buffer
	env := map[string]string{"PROVIDER_LATENCY": "1ms"}
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"provider", "-addr", "127.0.0.1:0", "-charge-then-timeout", "1", "-timeout-delay", "1h"},
			func(k string) string { return env[k] }, stdoutW, &stderr)
		_ = stdoutW.Close()
		exit <- code
	}()

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the first line: %v (stderr: %s)", err, stderr.String())
	}
	m := regexp.MustCompile(`^provider: listening on (http://127\.0\.0\.1:[0-9]+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line = %q, want provider: listening on http://127.0.0.1:PORT", line)
	}
	baseURL := m[1]
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	// Every first attempt charges and is held back for an hour: the client
	// times out, retries with the key and gets the charge replayed.
	c, err := provider.NewClient(provider.Config{BaseURL: baseURL, Timeout: 300 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ch, err := c.Charge(ctx, "pay_cmd", provider.Payment{PaymentID: "pay_cmd", Amount: 100, Currency: "EUR"})
	if err != nil || !ch.Replayed {
		t.Fatalf("Charge = %+v, %v; want a replayed charge", ch, err)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st fakeprovider.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	_ = resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if err != nil || st.Charges != 1 || st.Replays != 1 || st.Faults != 1 {
		t.Errorf("GET /stats = %+v, %v; want 1 charge, 1 replay, 1 fault", st, err)
	}

	// The held-back answer is still in flight: shutdown must not wait an hour.
	begin := time.Now()
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit status %d, want 0 (stderr: %s)", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker provider did not stop after its context was cancelled")
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	if !strings.Contains(stderr.String(), "provider: stopped: calls=2 charges=1 replays=1") {
		t.Errorf("stderr = %q, want the final counters", stderr.String())
	}
}

func TestProviderCommandRejectsBadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"fraction above 1", []string{"-fail-before-charge", "1.5"}, nil, "PROVIDER_FAIL_BEFORE_CHARGE (-fail-before-charge) must be a fraction between 0 and 1"},
		{"negative fraction from env", nil, map[string]string{"PROVIDER_CHARGE_THEN_TIMEOUT": "-0.1"}, "PROVIDER_CHARGE_THEN_TIMEOUT (-charge-then-timeout)"},
		{"NaN", []string{"-charge-then-timeout", "NaN"}, nil, "PROVIDER_CHARGE_THEN_TIMEOUT"},
		{"latency not a duration", nil, map[string]string{"PROVIDER_LATENCY": "fast"}, `PROVIDER_LATENCY (-latency) "fast": not a Go duration`},
		{"negative latency", []string{"-latency", "-1s"}, nil, "PROVIDER_LATENCY (-latency) must be >= 0"},
		{"zero timeout delay", []string{"-timeout-delay", "0s"}, nil, "PROVIDER_TIMEOUT_DELAY (-timeout-delay) must be > 0"},
		{"ignore-keys not a boolean", nil, map[string]string{"PROVIDER_IGNORE_KEYS": "sometimes"}, "PROVIDER_IGNORE_KEYS"},
		{"negative key lifetime", []string{"-key-lifetime", "-1s"}, nil, "PROVIDER_FAKE_KEY_LIFETIME (-key-lifetime) must be >= 0"},
		{"disable-lookup not a boolean", nil, map[string]string{"PROVIDER_FAKE_DISABLE_LOOKUP": "maybe"}, "PROVIDER_FAKE_DISABLE_LOOKUP"},
		{"address without port", []string{"-addr", "localhost"}, nil, "PROVIDER_ADDR (-addr)"},
		{"unexpected argument", []string{"extra"}, nil, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"provider"}, tt.args...), func(k string) string { return tt.env[k] }, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tt.name, code, stderr.String(), tt.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n != 0 {
			t.Errorf("%s: stderr has %d lines, want one: %q", tt.name, n+1, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("%s: stdout = %q, want nothing", tt.name, stdout.String())
		}
	}
}

// startProviderCommand runs `worker provider` with args and env until the
// test ends, and returns its base URL.
func startProviderCommand(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stdout, stdoutW := io.Pipe()
	var stderr syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"provider", "-addr", "127.0.0.1:0"}, args...), func(k string) string { return env[k] }, stdoutW, &stderr)
		_ = stdoutW.Close()
		exit <- code
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("exit status %d, want 0 (stderr: %s)", code, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the first line: %v (stderr: %s)", err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.TrimSpace(strings.TrimPrefix(line, "provider: listening on "))
}

func TestProviderCommandKeyLifetimeAndLookup(t *testing.T) {
	t.Parallel()
	get := func(url string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// A key forgotten after 300ms is charged again; the lookup lists both.
	base := startProviderCommand(t, []string{"-key-lifetime", "300ms"}, nil)
	c, err := provider.NewClient(provider.Config{BaseURL: base, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	p := provider.Payment{PaymentID: "pay_life", Amount: 100, Currency: "EUR"}
	first, err := c.Charge(t.Context(), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	second, err := c.Charge(t.Context(), "k", p)
	if err != nil || second.Replayed || second.ID == first.ID {
		t.Fatalf("after the key lifetime: %+v, %v; want a new charge", second, err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/charges?payment_id=pay_life", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list provider.ChargeList
	err = json.NewDecoder(resp.Body).Decode(&list)
	_ = resp.Body.Close()
	if err != nil || len(list.Data) != 2 {
		t.Errorf("lookup = %+v, %v; want both charges", list, err)
	}

	off := startProviderCommand(t, nil, map[string]string{"PROVIDER_FAKE_DISABLE_LOOKUP": "true"})
	if status := get(off + "/v1/charges?payment_id=pay_life"); status != http.StatusNotFound {
		t.Errorf("lookup with PROVIDER_FAKE_DISABLE_LOOKUP=true = %d, want 404", status)
	}
	http.DefaultClient.CloseIdleConnections()
}
