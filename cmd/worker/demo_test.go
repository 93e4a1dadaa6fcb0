package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/demo"
)

// runDemo runs `worker demo args...` with env as its whole environment.
func runDemo(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code = run(context.Background(), append([]string{"demo"}, args...), getenv, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDemoBadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		env  map[string]string
		want string // in the first line of stderr
	}{
		{[]string{"-store", "redis"}, nil, "-store"},
		{[]string{"-store", "dynamodb"}, nil, "-table is required"},
		// The walkthrough's environment exported: the demo must not write
		// into the worker's claim table.
		{[]string{"-store", "dynamodb"}, map[string]string{"CLAIM_TABLE": "claims", "AWS_REGION": "eu-west-1"}, "-table is required"},
		{[]string{"-payments", "10"}, nil, "-payments"},
		{[]string{"-payments", "2000000"}, nil, "-payments"},
		{[]string{"-experiment", "10"}, nil, "-experiment"},
		{[]string{"-experiment", "-1"}, nil, "-experiment"},
		{[]string{"-seed", "x"}, nil, "-seed"},
		{[]string{"extra"}, nil, `"extra"`},
	}
	for _, tc := range tests {
		code, stdout, stderr := runDemo(t, tc.env, tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 2 || !strings.Contains(first, tc.want) || stdout != "" {
			t.Errorf("demo %v: exit %d, stderr %q, stdout %q; want exit 2 and a first line naming %s",
				tc.args, code, stderr, stdout, tc.want)
		}
	}
}

func TestDemoRuns(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runDemo(t, map[string]string{"CLAIM_TABLE": "unused-with-memory"},
		"-experiment", "2", "-payments", "100", "-seed", "3")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"Experiment 2", "claim, then charge", "claim, charge, release on failure", "first attempts failed 2"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "Experiment 1") {
		t.Errorf("-experiment 2 ran experiment 1 too:\n%s", stdout)
	}
	if !strings.Contains(stderr, "done in") {
		t.Errorf("stderr lacks the timing line:\n%s", stderr)
	}
}

// TestDemoAll runs `worker demo` whole, as a user does, at a small size:
// nine experiments, each row marked, the rows that must be right marked ok
// and each of the others marked with its experiment's fault count; no
// progress line on a stderr that is not a terminal.
func TestDemoAll(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runDemo(t, nil, "-payments", "100")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for i := 1; i <= demo.Experiments; i++ {
		if !strings.Contains(stdout, fmt.Sprintf("\nExperiment %d: ", i)) && !strings.HasPrefix(stdout, fmt.Sprintf("Experiment %d: ", i)) {
			t.Errorf("stdout lacks experiment %d:\n%s", i, stdout)
		}
	}
	// label -> mark; experiment 1's check-then-act row depends on the race,
	// and experiment 4's first row charges again for any attempt that
	// outlasts the client's 200 ms, which a loaded machine adds to the
	// injected ones: only its direction is certain.
	want := map[string]string{
		"no deduplication":                  "double 5",
		"claim first, atomically":           "ok",
		"claim, then charge":                "lost 2",
		"claim, charge, release on failure": "ok",
		"claim without lease":               "lost 2",
		"claim with lease":                  "ok",
		"retry without key":                 "double ",
		"retry with idempotency key":        "ok",
		"increment on each delivery":        "double 5",
		"set the new state":                 "ok",
		"conditional state transition":      "ok",
		"claims kept 1 hour":                "double 5",
		"claims kept past queue retention":  "ok",
		"write, then complete":              "double 2",
		"one transaction":                   "ok",
		"retry with the forgotten key":      "double 2",
		"look up before charging":           "ok",
		// At least the producer's 5 retries; a rebalance and the dead
		// member's uncommitted records add more.
		"charge, then commit":       "double ",
		"claim first (kafkaworker)": "ok",
	}
	seen := 0
	for line := range strings.SplitSeq(stdout, "\n") {
		for label, mark := range want {
			if !strings.HasPrefix(line, label+"  ") {
				continue
			}
			seen++
			cell := line[strings.LastIndex(line, "   ")+3:]
			ok := cell == mark
			if strings.HasSuffix(mark, " ") { // a direction only
				ok = strings.HasPrefix(cell, mark)
			}
			if !ok {
				t.Errorf("row %q does not end with the mark %q", line, mark)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d rows:\n%s", seen, len(want), stdout)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "done in") {
		t.Errorf("stderr is not just the closing line (progress goes to a terminal only):\n%s", stderr)
	}
}
