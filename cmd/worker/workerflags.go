package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// workerSetting is one sqsworker.Config setting as the binary takes it: the
// field, its flag and environment variable, its help, and how the value
// reaches the field. The flags, their help and the wording of the library's
// validation errors all come from workerSettings, and no default is written
// here: a flag's own default is the zero value, which the library fills in
// (the help shows the library's exported default).
type workerSetting struct {
	field, flag, env, help string
	// define defines the flag in s and returns what sets its value.
	define func(s *settings, r workerSetting) func(*sqsworker.Config)
}

func intSetting(set func(*sqsworker.Config, int)) func(*settings, workerSetting) func(*sqsworker.Config) {
	return func(s *settings, r workerSetting) func(*sqsworker.Config) {
		p := s.Int(r.flag, r.env, 0, r.help)
		return func(c *sqsworker.Config) { set(c, *p) }
	}
}

func durationSetting(set func(*sqsworker.Config, time.Duration)) func(*settings, workerSetting) func(*sqsworker.Config) {
	return func(s *settings, r workerSetting) func(*sqsworker.Config) {
		p := s.Duration(r.flag, r.env, 0, r.help)
		return func(c *sqsworker.Config) { set(c, *p) }
	}
}

func stringSetting(set func(*sqsworker.Config, string)) func(*settings, workerSetting) func(*sqsworker.Config) {
	return func(s *settings, r workerSetting) func(*sqsworker.Config) {
		p := s.String(r.flag, r.env, "", r.help)
		return func(c *sqsworker.Config) { set(c, *p) }
	}
}

// workerSettings are the sqsworker.Config settings `worker run` takes.
var workerSettings = []workerSetting{
	{"QueueURL", "queue-url", "QUEUE_URL", "source SQS queue URL (required)",
		stringSetting(func(c *sqsworker.Config, v string) { c.QueueURL = v })},
	{"Concurrency", "concurrency", "WORKER_CONCURRENCY",
		fmt.Sprintf("messages processed at once, at most %d (default %d)", worker.MaxConcurrency, sqsworker.DefaultConcurrency),
		intSetting(func(c *sqsworker.Config, v int) { c.Concurrency = v })},
	{"VisibilityTimeout", "visibility-timeout", "VISIBILITY_TIMEOUT",
		"lease length and visibility timeout per receive, whole seconds (default: the queue's)",
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.VisibilityTimeout = v })},
	{"ShutdownTimeout", "shutdown-timeout", "SHUTDOWN_TIMEOUT",
		fmt.Sprintf("longest time from SIGTERM to exit; in-flight handlers are cancelled before its last quarter, at most 5s (default %s)", sqsworker.DefaultShutdownTimeout),
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.ShutdownTimeout = v })},
	{"Owner", "owner", "WORKER_OWNER", "name of this instance in claims (default: host/pid/random)",
		stringSetting(func(c *sqsworker.Config, v string) { c.Owner = v })},
	{"OutageCover", "outage-cover", "OUTAGE_COVER",
		fmt.Sprintf("dependency outage a message's receives must outlast before SQS may dead-letter it (default %s)", worker.DefaultOutageCover),
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.OutageCover = v })},
	{"HoldFor", "hold-for", "HOLD_FOR",
		fmt.Sprintf("how long a message is held, heartbeating, and retried in process before its receive is spent (default %s)", sqsworker.DefaultHoldFor),
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.HoldFor = v })},
	{"BreakerThreshold", "breaker-threshold", "BREAKER_THRESHOLD",
		fmt.Sprintf("dependency failures in a row that stop receiving (default %d)", sqsworker.DefaultBreakerThreshold),
		intSetting(func(c *sqsworker.Config, v int) { c.BreakerThreshold = v })},
	{"ProbeInterval", "probe-interval", "BREAKER_PROBE_INTERVAL",
		fmt.Sprintf("pause between probe receives while the breaker is open (default %s)", sqsworker.DefaultProbeInterval),
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.ProbeInterval = v })},
	{"ClockSkewMax", "clock-skew-max", "CLOCK_SKEW_MAX",
		"largest offset from AWS's clock at which messages are claimed; negative: no check (default: half the lease margin)",
		durationSetting(func(c *sqsworker.Config, v time.Duration) { c.ClockSkewMax = v })},
}

// defineWorkerSettings defines the flags of workerSettings in s; the
// returned function sets a config's fields from them once s is parsed.
func defineWorkerSettings(s *settings) func(*sqsworker.Config) {
	sets := make([]func(*sqsworker.Config), len(workerSettings))
	for i, r := range workerSettings {
		sets[i] = r.define(s, r)
	}
	return func(c *sqsworker.Config) {
		for _, set := range sets {
			set(c)
		}
	}
}

// reword names the settings of the library's validation errors in err as
// the binary's user knows them, by environment variable and flag (others,
// set by the binary itself, keep the field's name), as one usage error;
// err is the library's ErrConfig. names are the transport's own settings,
// beside the shared ones of workerSettings.
func reword(err error, names ...namedSetting) error {
	fes := setting.Errors(err)
	if len(fes) == 0 {
		return usagef("%v", err)
	}
	lines := make([]string, len(fes))
	for i, fe := range fes {
		name := fe.Field
		for _, r := range workerSettings {
			if r.field == fe.Field {
				name = fmt.Sprintf("%s (-%s)", r.env, r.flag)
			}
		}
		for _, n := range names {
			if n.field == fe.Field {
				name = n.String()
			}
		}
		renamed := *fe
		renamed.Field = name
		lines[i] = renamed.Error()
	}
	return usagef("%s", strings.Join(lines, "; "))
}
