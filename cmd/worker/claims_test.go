package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

func runWorker(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelpExitsZero: -h on any command prints its flags on stdout and exits 0.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-h"}, {"run", "-h"}, {"demo", "-h"}, {"provider", "-h"}, {"setup", "-h"}, {"redrive", "-h"},
		{"claims", "-h"}, {"claims", "get", "-h"}, {"claims", "release", "-h"}, {"claims", "complete", "--help"}, {"claims", "forget", "-h"},
	} {
		code, stdout, stderr := runWorker(t, nil, args...)
		if code != 0 || stdout == "" {
			t.Errorf("worker %v: exit %d, stdout %q, stderr %q; want 0 and help on stdout", args, code, stdout, stderr)
		}
	}
}

func TestClaimsUsage(t *testing.T) {
	t.Parallel()
	table := map[string]string{"CLAIM_TABLE": "claims"}
	tests := []struct {
		args []string
		env  map[string]string
		want string // in the one line on stderr
	}{
		{[]string{"claims"}, table, "a command is required"},
		{[]string{"claims", "inspect", "k"}, table, `unknown command "inspect"`},
		{[]string{"claims", "get"}, table, "KEY is required"},
		{[]string{"claims", "get", "a", "b"}, table, "one KEY, got 2"},
		{[]string{"claims", "get", "k"}, nil, "CLAIM_TABLE (-claim-table) is required"},
		{[]string{"claims", "release", "k"}, table, "refusing without -yes"},
		{[]string{"claims", "forget", "k"}, table, "refusing without -yes"},
		{[]string{"claims", "complete", "k", "-result", "ch_1"}, table, "refusing without -yes"},
		{[]string{"claims", "complete", "k", "-yes"}, table, "-result is required"},
		{[]string{"claims", "get", "k", "-yes"}, table, "-yes"},
	}
	for _, tc := range tests {
		code, _, stderr := runWorker(t, tc.env, tc.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || !strings.Contains(stderr, tc.want) || (len(lines) != 1 && !strings.Contains(tc.want, "-yes")) {
			t.Errorf("worker %v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestClaimJSON(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1764806400123)
	c := claimstore.Claim{Key: "pay_1", Status: claimstore.StatusInProgress, Token: 3, Acq: "a1",
		LeaseUntil: now.Add(25 * time.Second), ExpiresAt: time.Unix(1764900000, 0), Owner: "w1", Attempts: 3}
	b, _ := json.Marshal(toJSON(c, "svc#", now))
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	want := map[string]any{
		"key": "pay_1", "stored_key": "svc#\x1fpay_1", "status": "IN_PROGRESS", "token": 3.0,
		"lease_until": "2025-12-04T00:00:25.123Z", "lease_until_ms": 1764806425123.0, "lease_left": "25s",
		"expires_at": "2025-12-05T02:00:00.000Z", "expires_at_s": 1764900000.0, "first_at": nil, "first_at_ms": nil,
		"takeovers": 2.0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %s)", k, got[k], v, b)
		}
	}
}

func TestReadableDurations(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: readableDurations}))
	log.Info("x", slog.Duration("visible_in", 30*time.Second), slog.Any("retry_in", 1500*time.Millisecond),
		slog.Group("g", slog.Duration("d", time.Minute)))
	for _, want := range []string{`"visible_in":"30s"`, `"retry_in":"1.5s"`, `"d":"1m0s"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log %s: want %s", buf.String(), want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:4566/000000000000/payments": "http://127.0.0.1:4566/000000000000/payments",
		"claims":    "claims",
		"a b":       "'a b'",
		"it's":      `'it'\''s'`,
		"":          "''",
		"$(rm -rf)": "'$(rm -rf)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestHelpNotGarbled: the claims usage line names every command, sweep
// too, and no flag's usage carries backquotes, which the flag package
// takes for the placeholder of its value ("-claim-sweep-interval worker
// claims sweep").
func TestHelpNotGarbled(t *testing.T) {
	t.Parallel()
	_, stdout, _ := runWorker(t, nil, "claims", "-h")
	if usage, _, _ := strings.Cut(stdout, "\n\n"); !strings.Contains(usage, "worker claims sweep") {
		t.Errorf("claims usage %q does not list sweep", usage)
	}
	for _, args := range [][]string{{"run", "-h"}, {"claims", "sweep", "-h"}, {"claims", "get", "-h"}} {
		_, stdout, stderr := runWorker(t, nil, args...)
		if out := stdout + stderr; strings.Contains(out, "-claim-sweep-interval worker") {
			t.Errorf("worker %v: garbled flag placeholder in:\n%s", args, out)
		}
	}
}
