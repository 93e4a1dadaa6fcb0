package kafkaworker_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

func TestCheckSettings(t *testing.T) {
	t.Parallel()
	ok := kafkaworker.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "payments", Group: "g"}
	for _, tc := range []struct {
		name   string
		edit   func(*kafkaworker.Config)
		fields []string
	}{
		{"defaults", func(*kafkaworker.Config) {}, nil},
		{"missing", func(c *kafkaworker.Config) { *c = kafkaworker.Config{} }, []string{"Brokers", "Topic", "Group"}},
		{"lease not below the session", func(c *kafkaworker.Config) { c.SessionTimeout, c.Lease = 6*time.Second, 6*time.Second }, []string{"Lease"}},
		{"grace not below the rebalance", func(c *kafkaworker.Config) { c.RevokeGrace = time.Minute }, []string{"RevokeGrace"}},
		{"dead letters to the topic", func(c *kafkaworker.Config) { c.DeadLetterTopic = "payments" }, []string{"DeadLetterTopic"}},
		{"concurrency", func(c *kafkaworker.Config) { c.Concurrency = -1 }, []string{"Concurrency"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.edit(&c)
			err := c.CheckSettings()
			var got []string
			for _, fe := range setting.Errors(err) {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tc.fields) {
				t.Fatalf("fields %v, want %v (%v)", got, tc.fields, err)
			}
			if err != nil && !errors.Is(err, worker.ErrConfig) {
				t.Errorf("%v does not wrap ErrConfig", err)
			}
		})
	}
}

func TestMinRetention(t *testing.T) {
	t.Parallel()
	c := kafkaworker.Config{HoldFor: time.Minute, Lease: 10 * time.Second, RetentionMargin: time.Hour}
	if got, want := c.MinRetention(7*24*time.Hour), 7*24*time.Hour+time.Hour+time.Minute+10*time.Second; got != want {
		t.Errorf("MinRetention %s, want %s", got, want)
	}
}
