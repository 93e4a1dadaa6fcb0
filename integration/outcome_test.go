package integration

import (
	"strings"
	"testing"
)

// TestOutcomeCount: counting a structured outcome counts each delivery once
// by what happened to it, where counting a word in messages counts every
// line that happens to contain it. The log is the worker's JSON, as one
// delivery of each kind writes it.
func TestOutcomeCount(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		`{"level":"INFO","msg":"worker started"}`,
		`{"level":"INFO","msg":"completed","outcome":"completed","token":1}`,
		`{"level":"INFO","msg":"duplicate: key already completed","outcome":"duplicate","token":1}`,
		`{"level":"WARN","msg":"completed without its result: too large to store","outcome":"completed","token":1}`,
		`{"level":"WARN","msg":"renew failed: lease lost; cancelling the handler","token":1}`,
		`{"level":"WARN","msg":"lease lost while handling: not completing, not acking","outcome":"lease_lost","token":1}`,
		`{"level":"INFO","msg":"deferred: key held elsewhere","outcome":"deferred","token":2}`,
		`not a JSON line: completed`,
	}, "\n")
	tests := []struct {
		outcome, word string
		want          int // deliveries with the outcome
		wordCount     int // lines containing the word, as logCount counted
	}{
		{"completed", "completed", 2, 3},   // the duplicate's line says "already completed"
		{"duplicate", "duplicate", 1, 1},   // the word happens to be right
		{"lease_lost", "lease lost", 1, 2}, // the renew's warning and the final line
		{"deferred", "deferred", 1, 1},
		{"released", "released", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			t.Parallel()
			if got := countOutcome(log, tt.outcome, func(logLine) bool { return true }); got != tt.want {
				t.Errorf("countOutcome(%q) = %d, want %d", tt.outcome, got, tt.want)
			}
			words := countLines(log, func(l logLine) bool { return strings.Contains(l.Msg, tt.word) })
			if words != tt.wordCount {
				t.Errorf("lines containing %q = %d, want %d (the old count)", tt.word, words, tt.wordCount)
			}
		})
	}
	if got := countOutcome(log, "completed", func(l logLine) bool { return l.Msg == "completed" }); got != 1 {
		t.Errorf("completed with its result = %d, want 1", got)
	}
}
