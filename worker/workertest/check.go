package workertest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// T is what the scenarios need of a test: *testing.T has it, and so does
// the recorder Check runs a scenario with.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(f func())
	Context() context.Context
}

var _ T = (*testing.T)(nil)

// Result is what Check saw a scenario do.
type Result struct {
	// Failures are the scenario's Errorf and Fatalf messages.
	Failures []string
	// Skipped is the Skipf message, if the scenario skipped.
	Skipped string
}

// Failed reports whether the scenario failed.
func (r Result) Failed() bool { return len(r.Failures) > 0 }

// String is the failures, one a line.
func (r Result) String() string { return strings.Join(r.Failures, "\n") }

// Check runs scenario with newHarness against a recorder instead of t, and
// returns what it recorded: a transport's tests use it to show that a
// scenario fails against a planted fault. Logs go to t.
func Check(t *testing.T, name string, newHarness NewHarness, o Options, scenario func(T, Harness)) Result {
	t.Helper()
	r := &recorder{t: t, name: t.Name() + "/" + name}
	r.ctx, r.cancel = context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.runCleanups()
		scenario(r, newHarness(r, o))
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return Result{Failures: append([]string(nil), r.failures...), Skipped: r.skipped}
}

// recorder is a T that records failures; Fatalf and Skipf end the
// scenario's goroutine as testing.T's do.
type recorder struct {
	t      *testing.T
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	failures []string
	skipped  string
	cleanups []func()
}

func (r *recorder) Helper()                         {}
func (r *recorder) Name() string                    { return r.name }
func (r *recorder) Context() context.Context        { return r.ctx }
func (r *recorder) Logf(format string, args ...any) { r.t.Logf("[checked] "+format, args...) }

func (r *recorder) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.t.Logf("[checked] failure: %s", msg)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

// runCleanups runs the cleanups last added first, as testing does, after
// the context ends.
func (r *recorder) runCleanups() {
	r.cancel()
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		f()
	}
}
