package provider_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/claimfirst/claimfirst/provider"
)

// The tests in this file pin the client's waits exactly: they run in a
// synctest bubble, whose clock moves only when every goroutine waits, and
// serve the provider in process (a bubble cannot wait on a real socket).

// inProcess is an http.RoundTripper that calls a handler directly.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	if err := r.Context().Err(); err != nil { // the caller gave up waiting
		return nil, err
	}
	return rec.Result(), nil
}

// timedClient returns a client of h that records when each request came.
func timedClient(t *testing.T, cfg provider.Config, h func(n int, w http.ResponseWriter)) (*provider.Client, *[]time.Duration) {
	t.Helper()
	start := time.Now()
	var at []time.Duration
	cfg.BaseURL = "http://provider.test"
	cfg.HTTPClient = &http.Client{Transport: inProcess{http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		at = append(at, time.Since(start))
		h(len(at), w)
	})}}
	return newClient(t, cfg), &at
}

func charged(w http.ResponseWriter) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"id":"ch_0123456789abcdef","status":"succeeded"}`))
}

func TestRetryAfterWaitsExactly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		retryAfter func(now time.Time) string
		maxBackoff time.Duration
		want       time.Duration
	}{
		{"seconds", func(time.Time) string { return "7" }, 10 * time.Second, 7 * time.Second},
		{"HTTP date", func(now time.Time) string { return now.Add(5 * time.Second).UTC().Format(http.TimeFormat) }, 10 * time.Second, 5 * time.Second},
		{"capped by MaxBackoff", func(time.Time) string { return "3600" }, 2 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c, at := timedClient(t, provider.Config{MinBackoff: time.Millisecond, MaxBackoff: tt.maxBackoff},
					func(n int, w http.ResponseWriter) {
						if n == 1 {
							w.Header().Set("Retry-After", tt.retryAfter(time.Now()))
							w.WriteHeader(http.StatusServiceUnavailable)
							return
						}
						charged(w)
					})
				if _, err := c.Charge(t.Context(), "k", pay("p")); err != nil {
					t.Fatalf("Charge: %v", err)
				}
				if len(*at) != 2 || (*at)[1] != tt.want {
					t.Errorf("requests at %v, want at 0s and %v", *at, tt.want)
				}
			})
		})
	}
}

func TestBackoffStaysUnderItsDoublingCeiling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := provider.Config{MaxAttempts: 7, MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}
		ceilings := []time.Duration{100, 200, 400, 400, 400, 400} // ms, before attempts 2..7
		var sum time.Duration
		for range 50 {
			c, at := timedClient(t, cfg, func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) })
			_, err := c.Charge(t.Context(), "k", pay("p"))
			if pe := asError(t, err); pe.Attempts != 7 || len(*at) != 7 {
				t.Fatalf("attempts = %d, requests = %d, want 7", pe.Attempts, len(*at))
			}
			for i, ceil := range ceilings {
				gap := (*at)[i+1] - (*at)[i]
				if gap < 0 || gap >= ceil*time.Millisecond {
					t.Errorf("wait before attempt %d = %v, want in [0, %v)", i+2, gap, ceil*time.Millisecond)
				}
				sum += gap
			}
		}
		// Full jitter: the waits average half their ceilings (1.9s per run).
		if avg := sum / 50; avg < 700*time.Millisecond || avg > 1200*time.Millisecond {
			t.Errorf("average total wait = %v, want about 950ms", avg)
		}
	})
}

func TestCancelDuringBackoffReturnsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c, at := timedClient(t, provider.Config{MinBackoff: time.Hour, MaxBackoff: time.Hour},
			func(_ int, w http.ResponseWriter) {
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(http.StatusTooManyRequests)
			})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		_, err := c.Charge(ctx, "k", pay("p"))
		if !errors.Is(err, context.Canceled) || len(*at) != 1 {
			t.Errorf("error = %v after %d requests, want context canceled after 1", err, len(*at))
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("Charge returned after %v, want exactly when cancelled (1m)", d)
		}
		pe := asError(t, err)
		if pe.StatusCode != http.StatusTooManyRequests || pe.Kind != provider.KindUnknown {
			t.Errorf("error = %+v, want the last answer (429, unknown)", pe)
		}
	})
}

func TestDeadlineBeforeNextAttemptReturnsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c, at := timedClient(t, provider.Config{MinBackoff: time.Millisecond, MaxBackoff: time.Minute},
			func(_ int, w http.ResponseWriter) {
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(http.StatusServiceUnavailable)
			})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Charge(ctx, "k", pay("p"))
		if !errors.Is(err, context.DeadlineExceeded) || len(*at) != 1 {
			t.Errorf("error = %v after %d requests, want deadline exceeded after 1", err, len(*at))
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Charge returned after %v, want at once: the retry could not start before the deadline", d)
		}
	})
}

func TestPerAttemptTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := provider.Config{Timeout: 200 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
		start := time.Now()
		var at []time.Duration
		cfg.BaseURL = "http://provider.test"
		cfg.HTTPClient = &http.Client{Transport: inProcess{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			at = append(at, time.Since(start))
			if len(at) == 1 {
				<-r.Context().Done() // no answer until the client gives up
				return
			}
			charged(w)
		})}}
		ch, err := newClient(t, cfg).Charge(t.Context(), "k", pay("p"))
		if err != nil {
			t.Fatalf("Charge: %v", err)
		}
		if ch.Attempts != 2 || len(at) != 2 || at[1] < 200*time.Millisecond || at[1] > 201*time.Millisecond {
			t.Errorf("charge %+v, requests at %v: want the second attempt right after the first timed out at 200ms", ch, at)
		}
	})
}
