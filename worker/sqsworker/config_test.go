package sqsworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/worker"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), Config{Concurrency: -1, Protocol: worker.Protocol{MaxRetryBackoff: time.Millisecond, MinRetryBackoff: time.Second}})
	if !errors.Is(err, worker.ErrConfig) {
		t.Fatalf("err = %v, want worker.ErrConfig", err)
	}
	for _, want := range []string{"QueueURL is required", "SQS is required", "Store is required", "Handler is required", "Concurrency -1", "MaxRetryBackoff"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	c := Config{VisibilityTimeout: 1500 * time.Millisecond}
	c.setDefaults()
	c.setQueueDefaults(QueueInfo{})
	if err := c.validateLease(); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Errorf("validateLease = %v, want a whole-seconds error", err)
	}
}

func TestRetentionCheck(t *testing.T) {
	t.Parallel()
	q := QueueInfo{Retention: 96 * time.Hour, DeadLetterRetention: 336 * time.Hour}
	if got, want := DefaultRetention(q), 456*time.Hour; got != want {
		t.Errorf("DefaultRetention = %s, want %s", got, want)
	}
	const skew, hold = 2 * time.Second, 15*time.Minute + 30*time.Second
	low := 96*time.Hour + 4*time.Second + hold
	cases := []struct {
		retention time.Duration
		ok        bool
	}{
		{time.Hour, false},
		// A copy received at the queue retention's end is claimed later,
		// and the row's expiry was written on another clock.
		{96 * time.Hour, false},
		{low - time.Second, false},
		{low, true},
		{DefaultRetention(q), true},
	}
	for _, tc := range cases {
		err := checkRetention(tc.retention, q, skew, hold)
		if tc.ok {
			if err != nil {
				t.Errorf("checkRetention(%s) = %v, want nil", tc.retention, err)
			}
			continue
		}
		var re *queue.RetentionError
		if !errors.Is(err, worker.ErrConfig) || !errors.As(err, &re) || re.Min != low {
			t.Fatalf("checkRetention(%s) = %v, want a RetentionError with minimum %s", tc.retention, err, low)
		}
		for _, want := range []string{tc.retention.String(), low.String(), "96h0m0s", "345600", "2s", hold.String()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not name %s", err, want)
			}
		}
	}
}
