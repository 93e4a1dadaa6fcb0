package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// benchFloor is the floor: the stock SDK issuing the protocol's two writes
// per message, written out by hand (no claimstore code), from
// benchConcurrency goroutines, with no SQS and no worker.
func benchFloor(b *testing.B) benchResult {
	cfg, counter := benchConfig(b)
	ctx := context.Background()
	ddb := dynamodb.NewFromConfig(cfg)
	table := benchTable(b, ddb)
	prefix := fmt.Sprintf("floor_%d_", time.Now().UnixNano())
	return benchFanOut(b, counter, b.N, func(i int) error {
		return floorWrites(ctx, ddb, table, prefix+strconv.Itoa(i), "acq"+strconv.Itoa(i))
	})
}

// floorWrites is the protocol's two writes for one message, written out by
// hand with the stock SDK: a PutItem of the claim row guarded by
// attribute_not_exists, then the conditional UpdateItem that completes it.
func floorWrites(ctx context.Context, ddb *dynamodb.Client, table, key, acq string) error {
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	str := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	now := time.Now()
	if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			"pk": str(key), "status": str("IN_PROGRESS"), "token": n(1), "acq": str(acq),
			"lease_until": n(now.Add(30 * time.Second).UnixMilli()), "expires_at": n(now.Add(24 * time.Hour).Unix()),
			"first_at": n(now.UnixMilli()), "owner": str("floor"), "attempts": n(1),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": "pk"},
	}); err != nil {
		return err
	}
	_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(table),
		Key:                      map[string]types.AttributeValue{"pk": str(key)},
		UpdateExpression:         aws.String("SET #status = :done, #result = :r, #exp = :exp"),
		ConditionExpression:      aws.String("#acq = :acq AND #status = :ip"),
		ExpressionAttributeNames: map[string]string{"#status": "status", "#result": "result", "#exp": "expires_at", "#acq": "acq"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":done": str("COMPLETED"), ":r": str("ok"), ":exp": n(now.Add(24 * time.Hour).Unix()),
			":acq": str(acq), ":ip": str("IN_PROGRESS"),
		},
	})
	return err
}

var (
	benchBinOnce sync.Once
	benchBin     string
	benchBinErr  error
)

// benchWorkerBinary builds `worker` as users run it: without the race
// detector.
func benchWorkerBinary(b *testing.B) string {
	benchBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "claimfirst-bench")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBin = filepath.Join(dir, "worker")
		if out, err := exec.Command("go", "build", "-o", benchBin, "../cmd/worker").CombinedOutput(); err != nil {
			benchBinErr = fmt.Errorf("build worker: %w\n%s", err, out)
		}
	})
	if benchBinErr != nil {
		b.Fatal(benchBinErr)
	}
	return benchBin
}

// countingProxy forwards every request to the emulator and counts AWS
// requests by the operation their X-Amz-Target names.
func countingProxy(b *testing.B, endpoint string, counter *awsreq.Counter) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get("X-Amz-Target")
		switch {
		case strings.HasPrefix(target, "DynamoDB_20120810."):
			counter.Add("DynamoDB." + strings.TrimPrefix(target, "DynamoDB_20120810."))
		case strings.HasPrefix(target, "AmazonSQS."):
			counter.Add("SQS." + strings.TrimPrefix(target, "AmazonSQS."))
		default:
			counter.Add("other." + r.Method)
		}
		rp.ServeHTTP(w, r)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchWorkerProcess runs a real `worker run` process, with the payment
// handler and an in-process fake provider, over a backlog of b.N payments;
// its AWS requests are counted by a proxy in front of the emulator and its
// CPU is the child's rusage (start-up included).
func benchWorkerProcess(b *testing.B) benchResult {
	bin := benchWorkerBinary(b)
	cfg := awstest.Config(b)
	sq := sqs.NewFromConfig(cfg)
	ddb := dynamodb.NewFromConfig(cfg)
	q, table := benchResources(b, sq, ddb)
	fake := fakeprovider.New(fakeprovider.Config{})
	prov := httptest.NewServer(fake)
	b.Cleanup(func() { prov.Close(); fake.Close() })

	bodies := make([]string, b.N)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"payment_id":"run_%d_%d","amount":100,"currency":"EUR"}`, time.Now().UnixNano(), i)
	}
	benchSend(b, sq, q, bodies)

	counter := awsreq.NewCounter()
	endpoint := countingProxy(b, aws.ToString(cfg.BaseEndpoint), counter)
	metricsAddr := lambdaFreePorts(b, 1)[0]
	cmd := exec.Command(bin, "run")
	cmd.Env = append(withoutBrokers(os.Environ()), "AWS_ENDPOINT_URL="+endpoint, "QUEUE_URL="+q, "CLAIM_TABLE="+table,
		"PROVIDER_URL="+prov.URL, "WORKER_CONCURRENCY="+strconv.Itoa(benchConcurrency), "LOG_LEVEL=warn",
		"METRICS_ADDR="+metricsAddr)
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	// The clock, the CPU and the requests count from the moment the worker
	// is ready (it has read its queue and polls): start-up is not drain.
	deadline := time.Now().Add(10 * time.Minute)
	for !benchReady(metricsAddr) {
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			b.Fatalf("the worker process did not get ready; log:\n%s", tail(log.String(), 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	counter.Reset()
	emu0, cpu0 := emulatorCPU(), processCPU(cmd.Process.Pid)
	start := time.Now()
	for fake.Stats().Charges < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("the worker process did not drain %d payments in 10 minutes (charged %d); log:\n%s", b.N, fake.Stats().Charges, tail(log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for benchDepth(b, sq, q) > 0 { // the last acks
		time.Sleep(250 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	emu, cpu := emulatorCPU()-emu0, processCPU(cmd.Process.Pid)-cpu0
	r := report(b, elapsed, cpu, cpu, counter)
	r.emuPerMsg = reportEmulator(b, emu)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("worker process: %v; log:\n%s", err, tail(log.String(), 20))
	}
	if st := fake.Stats(); st.Charges != int64(b.N) {
		b.Fatalf("charged %d of %d", st.Charges, b.N)
	}
	b.Logf("worker run process: %d messages in %v, requests %v", b.N, elapsed.Round(time.Millisecond), counter.Snapshot())
	return r
}

// benchReady reports whether the worker at metricsAddr answers /readyz.
func benchReady(metricsAddr string) bool {
	resp, err := http.Get("http://" + metricsAddr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// processCPU is a process's user+system CPU time, from /proc.
func processCPU(pid int) time.Duration {
	return procCPU(strconv.Itoa(pid))
}

// benchDepth is the queue's visible plus in-flight messages.
func benchDepth(b *testing.B, sq *sqs.Client, q string) int {
	out, err := sq.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n
}
