package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// TestNewEngineRefuses: an engine without a store, a handler or a
// retention is a configuration error, named by field.
func TestNewEngineRefuses(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) (string, error) { return "", nil })
	cases := []struct {
		name  string
		p     Protocol
		field string
	}{
		{"no store", Protocol{Handler: h, Retention: time.Hour}, "Store"},
		{"no handler", Protocol{Store: memory.New(memory.Config{}), Retention: time.Hour}, "Handler"},
		{"no retention", Protocol{Store: memory.New(memory.Config{}), Handler: h}, "Retention"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewEngine(tc.p, EngineOptions{})
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v, want ErrConfig", err)
			}
			if fe := FieldErrors(err); len(fe) != 1 || fe[0].Field != tc.field {
				t.Fatalf("field errors %v, want one for %s", fe, tc.field)
			}
		})
	}
}

// TestEngineRetryDelays: the delay of a failed delivery's Retry comes from
// the schedule the transport sized (MaxAttempts) and stays within the
// broker's MaxDelay; a broker without a limit gets the schedule's delay.
func TestEngineRetryDelays(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		maxDelay       time.Duration
		attempt        int
		wantLo, wantHi time.Duration
	}{
		{"first attempt", 0, 1, time.Second, time.Second + time.Second/4},
		{"within the broker's limit", 5 * time.Second, 10, 5 * time.Second, 5 * time.Second},
		{"no limit", 0, 10, time.Minute, time.Minute + time.Minute/4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := claimstoretest.NewClock()
			e, err := NewEngine(Protocol{
				Store: memory.New(memory.Config{Now: clock.Now}), Retention: time.Hour, Now: clock.Now,
				Handler: HandlerFunc(func(context.Context, *Message) (string, error) {
					return "", errors.New("provider unavailable")
				}),
				MinRetryBackoff: time.Second, MaxRetryBackoff: time.Minute, OutageCover: time.Hour,
				Logger: slog.New(slog.DiscardHandler),
			}, EngineOptions{MaxAttempts: 0, MaxDelay: tc.maxDelay})
			if err != nil {
				t.Fatal(err)
			}
			d := e.Process(context.Background(), &Message{ID: "m", Body: "{}", Attempt: tc.attempt},
				Hold{Until: clock.Now().Add(30 * time.Second)})
			if d.Action != Retry || d.Delay < tc.wantLo || d.Delay > tc.wantHi {
				t.Fatalf("%v after %s, want retry after %s to %s", d.Action, d.Delay, tc.wantLo, tc.wantHi)
			}
		})
	}
}
