package rabbitworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
)

func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	ok := func() Config {
		return Config{
			Protocol: worker.Protocol{
				Store:     memory.New(memory.Config{}),
				Handler:   worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "", nil }),
				Retention: time.Hour,
			},
			URL: "amqp://guest:guest@127.0.0.1:1/", Queue: "q",
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no URL", func(c *Config) { c.URL = "" }, "URL"},
		{"not amqp", func(c *Config) { c.URL = "http://x/" }, "URL"},
		{"no queue", func(c *Config) { c.Queue = "" }, "Queue"},
		{"hold near consumer_timeout", func(c *Config) { c.HoldFor = 25 * time.Minute }, "HoldFor"},
		{"heartbeat past lease", func(c *Config) { c.HeartbeatInterval = time.Minute }, "HeartbeatInterval"},
		{"no retention", func(c *Config) { c.Retention = 0 }, "Retention"},
		{"dlq is the queue", func(c *Config) { c.DeadLetterQueue = "q" }, "DeadLetterQueue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok()
			tc.edit(&c)
			_, err := New(t.Context(), c)
			if !errors.Is(err, worker.ErrConfig) {
				t.Fatalf("New: %v, want ErrConfig", err)
			}
			var names []string
			for _, fe := range setting.Errors(err) {
				names = append(names, fe.Field)
			}
			if !strings.Contains(strings.Join(names, ","), tc.field) {
				t.Errorf("fields %v, want %s: %v", names, tc.field, err)
			}
		})
	}
}
