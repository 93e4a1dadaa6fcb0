package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
		{[]string{"-store", "dynamodb"}, nil, "CLAIM_TABLE (-table) is required"},
		{[]string{"-payments", "10"}, nil, "-payments"},
		{[]string{"-payments", "2000000"}, nil, "-payments"},
		{[]string{"-experiment", "5"}, nil, "-experiment"},
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
