package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The binary's choice of broker: `worker run` consumes SQS (QUEUE_URL),
// Kafka (KAFKA_BROKERS) or RabbitMQ (AMQP_URL), exactly one of them.

// brokerVars are the variables that choose the broker.
var brokerVars = []string{"QUEUE_URL", "KAFKA_BROKERS", "AMQP_URL"}

// withoutBrokers is env without the variables that choose the broker:
// under `make test` the launchers export KAFKA_BROKERS and AMQP_URL for
// every test, and a worker started for one broker must not see the others.
func withoutBrokers(env []string) []string {
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(brokerVars, k) {
			out = append(out, kv)
		}
	}
	return out
}

// runBinary runs the worker binary to completion with env alone (and
// PATH and HOME), returning its exit code and output.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("worker %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestRunChoosesOneBroker: `worker run` with none of QUEUE_URL,
// KAFKA_BROKERS and AMQP_URL, or with more than one, exits 2 at once with
// one line naming them; a Kafka or RabbitMQ setting missing or out of
// range is named the same way, before anything is dialled (the brokers
// here listen nowhere, and no AWS region is set).
func TestRunChoosesOneBroker(t *testing.T) {
	t.Parallel()
	const (
		queue  = "QUEUE_URL=http://127.0.0.1:1/000000000000/q"
		kafka  = "KAFKA_BROKERS=127.0.0.1:1"
		amqp   = "AMQP_URL=amqp://guest:guest@127.0.0.1:1/"
		base   = "CLAIM_TABLE=claims"
		topic  = "KAFKA_TOPIC=payments"
		group  = "KAFKA_GROUP=payers"
		rqueue = "AMQP_QUEUE=payments"
		keep   = "CLAIM_RETENTION=96h"
	)
	for _, tc := range []struct {
		name string
		env  []string
		want []string // in the one line on stderr
	}{
		{"none", []string{base}, []string{"QUEUE_URL (-queue-url)", "KAFKA_BROKERS (-kafka-brokers)", "AMQP_URL (-amqp-url)", "exactly one"}},
		{"sqs and kafka", []string{base, queue, kafka, topic, group}, []string{"QUEUE_URL", "KAFKA_BROKERS", "exactly one"}},
		{"kafka and rabbitmq", []string{base, kafka, topic, group, amqp, rqueue, keep}, []string{"KAFKA_BROKERS", "AMQP_URL", "exactly one"}},
		{"all three", []string{base, queue, kafka, amqp}, []string{"QUEUE_URL", "KAFKA_BROKERS", "AMQP_URL", "exactly one"}},
		{"kafka without a topic", []string{base, kafka, group}, []string{"KAFKA_TOPIC (-kafka-topic) is required"}},
		{"kafka without a group", []string{base, kafka, topic}, []string{"KAFKA_GROUP (-kafka-group) is required"}},
		{"kafka dead letters to itself", []string{base, kafka, topic, group, "KAFKA_DEAD_LETTER_TOPIC=payments"}, []string{"KAFKA_DEAD_LETTER_TOPIC (-kafka-dead-letter-topic)", "must not be Topic"}},
		{"kafka lease past the session", []string{base, kafka, topic, group, "CLAIM_LEASE=50s"}, []string{"CLAIM_LEASE (-lease) 50s", "SessionTimeout"}},
		{"kafka with a visibility timeout", []string{base, kafka, topic, group, "VISIBILITY_TIMEOUT=30s"}, []string{"VISIBILITY_TIMEOUT (-visibility-timeout)", "SQS"}},
		{"rabbitmq without a queue", []string{base, amqp, keep}, []string{"AMQP_QUEUE (-amqp-queue) is required"}},
		{"rabbitmq without a retention", []string{base, amqp, rqueue}, []string{"CLAIM_RETENTION (-claim-retention) is required"}},
		{"rabbitmq hold past consumer_timeout", []string{base, amqp, rqueue, keep, "HOLD_FOR=40m"}, []string{"HOLD_FOR (-hold-for) 40m0s", "consumer_timeout"}},
		{"sqs with a kafka setting", []string{base, queue, topic}, []string{"KAFKA_TOPIC (-kafka-topic)", "KAFKA_BROKERS"}},
		{"rabbitmq with a probe interval", []string{base, amqp, rqueue, keep, "BREAKER_PROBE_INTERVAL=1s"}, []string{"BREAKER_PROBE_INTERVAL (-probe-interval)", "SQS and Kafka"}},
		{"sqs with a lease", []string{base, queue, "CLAIM_LEASE=10s"}, []string{"CLAIM_LEASE (-lease)", "VISIBILITY_TIMEOUT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runBinary(t, tc.env, "run")
			line := strings.TrimSpace(stderr)
			ok := code == 2 && !strings.Contains(line, "\n")
			for _, w := range tc.want {
				ok = ok && strings.Contains(line, w)
			}
			if !ok {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and one line with %q", code, stderr, stdout, tc.want)
			}
			if strings.Contains(line, "guest:guest") {
				t.Errorf("stderr shows AMQP_URL's password: %q", line)
			}
		})
	}
}

// TestSetupChoosesOneBroker: `worker setup` sets up Kafka or RabbitMQ, not
// both at once, and refuses SQS's -fifo for them, before dialling anything.
func TestSetupChoosesOneBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"KAFKA_BROKERS=127.0.0.1:1", "AMQP_URL=amqp://127.0.0.1:1/"}, nil, "KAFKA_BROKERS (-kafka-brokers) and AMQP_URL (-amqp-url) are both set"},
		{[]string{"KAFKA_BROKERS=127.0.0.1:1"}, []string{"-fifo"}, "-fifo (QUEUE_FIFO) is SQS's"},
		{[]string{"KAFKA_BROKERS=127.0.0.1:1", "KAFKA_PARTITIONS=0"}, nil, "KAFKA_PARTITIONS (-kafka-partitions) 0: must be at least 1"},
		{[]string{"AMQP_URL=amqp://127.0.0.1:1/", "AMQP_DEAD_LETTER_QUEUE=payments"}, nil, "AMQP_DEAD_LETTER_QUEUE (-amqp-dead-letter-queue) \"payments\": must not be the queue"},
	} {
		code, stdout, stderr := runBinary(t, tc.env, append([]string{"setup"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("setup %v with %v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, tc.env, code, stdout, stderr, tc.want)
		}
	}
}
