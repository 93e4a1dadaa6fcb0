package main

import (
	"bytes"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestWorkerSettingsReachTheLibrary: each row of the table, by environment
// variable and by flag, sets the sqsworker.Config field it names.
func TestWorkerSettingsReachTheLibrary(t *testing.T) {
	t.Parallel()
	for _, r := range workerSettings {
		field := reflect.ValueOf(sqsworker.Config{}).FieldByName(r.field)
		if !field.IsValid() {
			t.Errorf("%s: sqsworker.Config has no field %s", r.env, r.field)
			continue
		}
		var text string
		var want any
		switch field.Interface().(type) {
		case int:
			text, want = "7", 7
		case time.Duration:
			text, want = "7s", 7*time.Second
		case string:
			text, want = "x7", "x7"
		default:
			t.Fatalf("%s: field type %T not covered", r.field, field.Interface())
		}
		for _, how := range []string{"env", "flag"} {
			env := map[string]string{}
			var args []string
			if how == "env" {
				env[r.env] = text
			} else {
				args = []string{"-" + r.flag, text}
			}
			var out, errOut bytes.Buffer
			s := newSettings("run", stdio{getenv: func(k string) string { return env[k] }, stdout: &out, stderr: &errOut})
			set := defineWorkerSettings(s)
			if err := s.Parse(args); err != nil {
				t.Fatalf("%s by %s: %v", r.env, how, err)
			}
			var cfg sqsworker.Config
			set(&cfg)
			if got := reflect.ValueOf(cfg).FieldByName(r.field).Interface(); got != want {
				t.Errorf("%s by %s: %s = %v, want %v", r.env, how, r.field, got, want)
			}
		}
	}
}

// TestLibraryErrorsNameTheSetting: a value the library refuses is one line
// naming the environment variable and the flag, exit 2, before anything is
// built (no AWS, no claim table: LOG_LEVEL, checked later, is never reached).
func TestLibraryErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, value, want string }{
		{"WORKER_CONCURRENCY", "-5", "WORKER_CONCURRENCY (-concurrency) -5: must be 1 to 1000"},
		{"VISIBILITY_TIMEOUT", "1500ms", "VISIBILITY_TIMEOUT (-visibility-timeout) 1.5s: SQS counts whole seconds"},
		{"HOLD_FOR", "-1s", "HOLD_FOR (-hold-for) -1s: must not be negative"},
		{"BREAKER_THRESHOLD", "-1", "BREAKER_THRESHOLD (-breaker-threshold) -1: must be at least 1"},
	} {
		env := map[string]string{"QUEUE_URL": "http://127.0.0.1:1/000000000000/q", "CLAIM_TABLE": "claims", "LOG_LEVEL": "loud", tc.env: tc.value}
		code, _, stderr := runWorker(t, env, "run")
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s=%s: exit %d, stderr %q; want exit 2 and one line with %q", tc.env, tc.value, code, stderr, tc.want)
		}
	}
	code, _, stderr := runWorker(t, map[string]string{"CLAIM_TABLE": "claims"}, "run")
	if code != 2 || !strings.Contains(stderr, "exactly one of QUEUE_URL (-queue-url), KAFKA_BROKERS (-kafka-brokers) or AMQP_URL (-amqp-url)") {
		t.Errorf("no QUEUE_URL: exit %d, stderr %q", code, stderr)
	}
}

// TestREADMESettingsTable: the README's table of settings lists every row
// of workerSettings with its flag, and where the library names a default,
// the README's is the library's (a default changed in the library and not
// in the README fails here).
func TestREADMESettingsTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/reference-worker.md") // the settings table
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // env -> cells
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 6 {
			continue
		}
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		rows[cells[1]] = cells[1:]
	}
	defaults := map[string]any{
		"Concurrency": sqsworker.DefaultConcurrency, "ShutdownTimeout": sqsworker.DefaultShutdownTimeout,
		"OutageCover": worker.DefaultOutageCover, "HoldFor": sqsworker.DefaultHoldFor,
		"BreakerThreshold": sqsworker.DefaultBreakerThreshold, "ProbeInterval": sqsworker.DefaultProbeInterval,
	}
	// The Kafka and RabbitMQ settings, by variable: their fields' names
	// overlap (Lease, Retention), their defaults do not.
	brokerDefaults := map[string]any{
		"KAFKA_SESSION_TIMEOUT": kafkaworker.DefaultSessionTimeout, "KAFKA_REBALANCE_TIMEOUT": kafkaworker.DefaultRebalanceTimeout,
		"AMQP_DELIVERY_LIMIT": rabbitworker.DefaultDeliveryLimit, "AMQP_CONSUMER_TIMEOUT": rabbitworker.DefaultConsumerTimeout,
		"AMQP_MAX_RETURN_DELAY": rabbitworker.DefaultMaxReturnDelay,
	}
	type row struct{ field, flag, env string }
	var all []row
	for _, r := range workerSettings {
		all = append(all, row{r.field, r.flag, r.env})
	}
	for _, n := range append(append(append([]namedSetting{}, kafkaSettings...), kafkaSecuritySettings...), rabbitSettings...) {
		all = append(all, row{"", n.flag, n.env})
	}
	for _, r := range all {
		cells, ok := rows[r.env]
		if !ok {
			t.Errorf("README: no row for %s", r.env)
			continue
		}
		if cells[1] != "-"+r.flag {
			t.Errorf("README: %s's flag is %q, want -%s", r.env, cells[1], r.flag)
		}
		want, ok := defaults[r.field]
		if r.field == "" {
			want, ok = brokerDefaults[r.env]
		}
		if !ok {
			continue
		}
		first := strings.Fields(cells[3])
		if len(first) == 0 {
			t.Errorf("README: %s has no default, the library's is %v", r.env, want)
			continue
		}
		var got any
		switch want.(type) {
		case time.Duration:
			got, err = time.ParseDuration(first[0])
		default:
			got, err = strconv.Atoi(first[0])
		}
		if err != nil || got != want {
			t.Errorf("README: %s's default is %q, the library's is %v", r.env, cells[3], want)
		}
	}
}

// TestRunHelpNamesEveryBroker: `worker run -h` says how the broker is
// chosen and lists every Kafka and RabbitMQ setting by variable.
func TestRunHelpNamesEveryBroker(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runWorker(t, nil, "run", "-h")
	if code != 0 || !strings.Contains(stdout, "exactly one") {
		t.Fatalf("run -h: exit %d, stdout %q", code, stdout)
	}
	for _, n := range append(append(append([]namedSetting{sqsChoice}, kafkaSettings...), kafkaSecuritySettings...), rabbitSettings...) {
		listed := strings.Contains(stdout, "  -"+n.flag+" ") || strings.Contains(stdout, "  -"+n.flag+"\n")
		if !listed || !strings.Contains(stdout, "(env "+n.env+")") {
			t.Errorf("run -h lacks -%s (env %s)", n.flag, n.env)
		}
	}
}
