package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/canned"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// cannedEnv makes the test binary, run again with it set, serve the canned
// endpoint (see TestCannedEndpointProcess).
const cannedEnv = "CLAIMFIRST_CANNED_MESSAGES"

// TestCannedEndpointProcess is not a test: run as a child with cannedEnv
// set, it serves a canned endpoint on a free loopback port, prints the
// port, and serves until killed. Without cannedEnv it returns at once.
func TestCannedEndpointProcess(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(cannedEnv))
	if err != nil {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("canned-port", ln.Addr().(*net.TCPAddr).Port)
	_ = http.Serve(ln, canned.New(n))
}

// startCanned runs the canned endpoint in a child process, so its CPU is
// not the benchmark's, and returns its URL.
func startCanned(b *testing.B, messages int) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCannedEndpointProcess$")
	cmd.Env = append(os.Environ(), cannedEnv+"="+strconv.Itoa(messages))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if port, ok := strings.CutPrefix(sc.Text(), "canned-port "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return "http://127.0.0.1:" + port
		}
	}
	b.Fatal("the canned endpoint did not start")
	return ""
}

// cannedConfig is an SDK configuration for the canned endpoint, on the
// worker's HTTP client, with every request counted.
func cannedConfig(endpoint string) (aws.Config, *awsreq.Counter) {
	counter := awsreq.NewCounter()
	cfg := aws.Config{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("canned", "canned", ""),
		HTTPClient:  sqsworker.HTTPClient(benchConcurrency), RetryMaxAttempts: 1,
	}
	cfg.APIOptions = append(cfg.APIOptions, counter.APIOption())
	return cfg, counter
}

// cannedQueue is the queue URL the canned endpoint serves (any will do).
const cannedQueue = "http://127.0.0.1/123456789012/canned"

// BenchmarkCost measures the client-side CPU per message without the
// emulator: against an in-process endpoint (in a child process) that
// answers every request at once from a canned script. It is a cost
// benchmark, never a test of correctness. Rows:
//
//   - sdk: the stock SDK issuing the worker's request mix per message (a
//     PutItem and an UpdateItem, a tenth of a ReceiveMessage of ten and of a
//     DeleteMessageBatch of ten: 2.2 requests) from benchConcurrency
//     goroutines.
//   - worker: one in-process worker at benchConcurrency over the DynamoDB
//     claim store, a handler that does nothing.
//
// The last line is the worker's CPU per message as a ratio to the SDK's.
func BenchmarkCost(b *testing.B) {
	results := map[string]benchResult{}
	b.Run("sdk", func(b *testing.B) { results["sdk"] = benchCostSDK(b) })
	b.Run("worker", func(b *testing.B) { results["worker"] = benchCostWorker(b) })
	if sdk, w := results["sdk"], results["worker"]; sdk.cpuPerMsg > 0 && w.cpuPerMsg > 0 {
		fmt.Printf("\ncost (canned endpoint): sdk %.0f cpu-µs/msg (%.2f req/msg), worker %.0f cpu-µs/msg (%.2f req/msg): worker x%.2f the SDK's\n",
			sdk.cpuPerMsg, sdk.ddbPerMsg+sdk.sqsPerMsg, w.cpuPerMsg, w.ddbPerMsg+w.sqsPerMsg, w.cpuPerMsg/sdk.cpuPerMsg)
	}
}

func benchCostSDK(b *testing.B) benchResult {
	cfg, counter := cannedConfig(startCanned(b, b.N))
	ddb, sq := dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	ctx := context.Background()
	q := cannedQueue
	// One job per ten messages: a receive of ten, their writes, one delete.
	return benchFanOut(b, counter, (b.N+9)/10, func(job int) error {
		size := min(10, b.N-10*job)
		out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: int32(size), WaitTimeSeconds: 20})
		if err != nil {
			return err
		}
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for i, msg := range out.Messages {
			if err := floorWrites(ctx, ddb, "canned", aws.ToString(msg.MessageId), "acq"); err != nil {
				return err
			}
			del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
		}
		_, err = sq.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q), Entries: del})
		return err
	})
}

func benchCostWorker(b *testing.B) benchResult {
	endpoint := startCanned(b, b.N)
	cfg, counter := cannedConfig(endpoint)
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: "canned"})
	if err != nil {
		b.Fatal(err)
	}
	return benchDrain(b, sqsworker.Config{QueueURL: cannedQueue, SQS: sqs.NewFromConfig(cfg), Concurrency: benchConcurrency, Protocol: worker.Protocol{Store: store}},
		b.N, counter, func() bool { return true }, nil)
}

// BenchmarkRSS drains a 10,000-message backlog from the canned endpoint
// with one worker at concurrency 256 and reports the process's resident
// memory after the first 1,000 messages and at the end: flat means the
// worker holds no more than its in-flight messages. Run with -benchtime 1x.
func BenchmarkRSS(b *testing.B) {
	total, early := 10000, 1000
	if raceEnabled { // `make test` runs it once to show it runs: a tenth of the backlog is enough
		total, early = 1000, 100
	}
	cfg, _ := cannedConfig(startCanned(b, total))
	cfg.HTTPClient = sqsworker.HTTPClient(256)
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: "canned"})
	if err != nil {
		b.Fatal(err)
	}
	var rssEarly, rssEnd int64
	benchDrain(b, sqsworker.Config{QueueURL: cannedQueue, SQS: sqs.NewFromConfig(cfg), Concurrency: 256, Protocol: worker.Protocol{Store: store}},
		total, nil, func() bool { rssEnd = rssBytes(b); return true }, func(i int) {
			if i+1 == early {
				rssEarly = rssBytes(b)
			}
		})
	b.ReportMetric(float64(rssEarly)/(1<<20), fmt.Sprintf("rss-MiB@%d", early))
	b.ReportMetric(float64(rssEnd)/(1<<20), fmt.Sprintf("rss-MiB@%d", total))
	b.ReportMetric(float64(rssEnd)/float64(rssEarly), "rss-ratio")
	fmt.Printf("\nRSS draining %d messages at concurrency 256: %.1f MiB after %d, %.1f MiB at the end (x%.2f)\n",
		total, float64(rssEarly)/(1<<20), early, float64(rssEnd)/(1<<20), float64(rssEnd)/float64(rssEarly))
}

// rssBytes is this process's resident set size.
func rssBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
