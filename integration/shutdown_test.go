package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestShutdownBounded measures SIGTERM to exit for the binary against the
// emulator: an idle worker (its pollers in a 20 s long poll) exits within
// about two seconds, and a worker whose handler outlasts SHUTDOWN_TIMEOUT
// exits within SHUTDOWN_TIMEOUT of the signal, its message released and
// finished by the next worker with one charge. "stopping" is logged when
// the signal arrives, not when the pollers return.
func TestShutdownBounded(t *testing.T) {
	t.Parallel()
	const slack = 2 * time.Second // signal delivery and exit on a loaded machine
	// The race detector sleeps a second at exit by default: not the worker's time.
	noExitSleep := "GORACE=atexit_sleep_ms=0"

	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{})
		w := e.start("idle", workerOptions{extraEnv: []string{noExitSleep}})
		waitFor(t, 30*time.Second, "worker started", func() bool { return w.logCount("worker started") == 1 })
		time.Sleep(time.Second) // the pollers are inside their long polls
		took, stopping := sigterm(t, w, 30*time.Second)
		// The documented defaults are not risky: nothing to warn about.
		if n := strings.Count(w.log.String(), `"level":"WARN"`); n != 0 {
			t.Errorf("%d WARN lines on the documented defaults:\n%s", n, w.log.String())
		}
		t.Logf("idle worker: SIGTERM to exit %s, to the stopping line %s", took.Round(time.Millisecond), stopping.Round(time.Millisecond))
		if took > 2*time.Second+slack {
			t.Errorf("idle worker took %s to exit after SIGTERM, want about 2s", took.Round(time.Millisecond))
		}
		if stopping > time.Second {
			t.Errorf("stopping logged %s after SIGTERM, want at once", stopping.Round(time.Millisecond))
		}
	})

	t.Run("handler longer than the timeout", func(t *testing.T) {
		t.Parallel()
		const timeout = 4 * time.Second
		e := newEnv(t, envOptions{visibility: 30 * time.Second, fake: fakeprovider.Config{
			TimeoutFirst: func(string, provider.Payment) bool { return true }, TimeoutDelay: time.Minute,
		}})
		ps := payments("longhandler", 1)
		e.sendPayments(ps)
		opts := workerOptions{extraEnv: []string{"SHUTDOWN_TIMEOUT=" + timeout.String(), "PROVIDER_TIMEOUT=1m", noExitSleep}}
		w := e.start("long", opts)
		waitFor(t, 30*time.Second, "the charge in flight", func() bool { return e.fake.Stats().Charges == 1 })
		took, stopping := sigterm(t, w, time.Minute)
		t.Logf("worker with a handler longer than SHUTDOWN_TIMEOUT=%s: SIGTERM to exit %s, to the stopping line %s",
			timeout, took.Round(time.Millisecond), stopping.Round(time.Millisecond))
		if took > timeout+slack {
			t.Errorf("took %s to exit after SIGTERM, want within SHUTDOWN_TIMEOUT %s", took.Round(time.Millisecond), timeout)
		}
		if stopping > time.Second {
			t.Errorf("stopping logged %s after SIGTERM, want at once", stopping.Round(time.Millisecond))
		}
		// The cut-short handler released its claim and its message: the
		// next worker replays the charge with the same key.
		w2 := e.start("next", workerOptions{})
		e.waitDrained(time.Minute)
		e.assertChargedOnce(ps)
		if code := w2.stop(t, 30*time.Second); code != 0 {
			t.Errorf("next worker exited %d", code)
		}
	})
}

// sigterm signals p and returns how long it took to exit and to log its
// "stopping" line (by the line's own timestamp).
func sigterm(t *testing.T, p *proc, limit time.Duration) (took, stopping time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t, limit)
	took = time.Since(start)
	at, err := time.Parse(time.RFC3339Nano, p.logField("stopping", "time"))
	if err != nil {
		t.Fatalf("no stopping line: %v\n%s", err, tail(p.log.String(), 20))
	}
	return took, at.Sub(start)
}
