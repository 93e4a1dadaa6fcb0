package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// The LocalStack init script is plain `awslocal` calls, so the same script
// runs against the emulator with an `awslocal` that points the AWS CLI at
// AWS_ENDPOINT_URL. These tests run it that way and check what it created
// with the SDK, and against template.yaml.

// deployInitScript is localstack's ready.d script, relative to this package.
const deployInitScript = "../localstack/init/ready.d/10-claimfirst.sh"

// deployAWSLocal is the `awslocal` the tests put first on PATH.
const deployAWSLocal = "#!/bin/sh\nexec aws --endpoint-url \"$AWS_ENDPOINT_URL\" \"$@\"\n"

// deployResources is what the init script created, as it printed it: the
// settings a worker runs with.
type deployResources struct {
	QueueURL   string // QUEUE_URL
	DLQURL     string // DLQ_URL
	ClaimTable string // CLAIM_TABLE
}

// deployNames are the names the init script is given (QUEUE_NAME, DLQ_NAME,
// CLAIM_TABLE).
type deployNames struct {
	queue, dlq, table string
}

func deployNewNames() deployNames {
	return deployNames{queue: awstest.Name("payments"), dlq: awstest.Name("payments-dlq"), table: awstest.Name("claims")}
}

// names returns the names r was created with (a queue's name ends its URL).
func (r deployResources) names() deployNames {
	return deployNames{queue: path.Base(r.QueueURL), dlq: path.Base(r.DLQURL), table: r.ClaimTable}
}

// deployLocalStackResources runs the LocalStack init script against the
// emulator with fresh names and returns what it created: a queue with a
// dead-letter queue and a claim table, ready for a worker to run on with
// QUEUE_URL=r.QueueURL and CLAIM_TABLE=r.ClaimTable.
func deployLocalStackResources(t *testing.T) deployResources {
	t.Helper()
	awstest.Config(t)
	r, _, err := deployRunInitScript(t, deployNewNames())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLocalStackInitScript: the script creates the queue, DLQ and table the
// worker and template.yaml expect, and a second run changes nothing but
// what drifted.
func TestLocalStackInitScript(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	first := deployLocalStackResources(t)
	deployCheckResources(t, cfg, first)
	names := first.names()

	// Drift a setting, then run again: same resources, setting restored.
	sq := sqs.NewFromConfig(cfg)
	if _, err := sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl: aws.String(first.QueueURL), Attributes: map[string]string{"VisibilityTimeout": "99"},
	}); err != nil {
		t.Fatal(err)
	}
	second, stderr, err := deployRunInitScript(t, names)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if second != first {
		t.Errorf("second run printed %+v, first %+v", second, first)
	}
	if !strings.Contains(stderr, "exists") {
		t.Errorf("second run did not find the existing resources:\n%s", stderr)
	}
	deployCheckResources(t, cfg, second)

	t.Run("worker", func(t *testing.T) { deployRunWorker(t, cfg, second) })
}

// deployRunWorker runs `worker run` on what the init script created, as
// localstack/README.md tells a user to (QUEUE_URL and CLAIM_TABLE as the
// script printed them), and checks it drains the queue, charging each
// payment once. The provider ignores keys and a few payments are sent
// twice, so only the script's claim table stands between a producer's
// retry and a second charge.
func deployRunWorker(t *testing.T, cfg aws.Config, r deployResources) {
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{IgnoreKeys: true, Latency: 5 * time.Millisecond})
	e := &env{
		t: t, sqs: sqs.NewFromConfig(cfg), ddb: dynamodb.NewFromConfig(cfg),
		queueURL: r.QueueURL, dlqURL: r.DLQURL, table: r.ClaimTable, fake: fake, provURL: srv.URL,
	}
	ps := payments("deploy", 20)
	e.sendPayments(append(ps, ps[:5]...))
	start := time.Now()
	w := e.start("worker", workerOptions{})
	e.waitDrained(2 * time.Minute)
	st := e.assertChargedOnce(ps)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0", code)
	}
	t.Logf("payments %d, messages %d, charges %d, duplicates acked %d, drained in %s",
		len(ps), len(ps)+5, st.Charges, w.outcomeCount("duplicate"), time.Since(start).Round(time.Millisecond))
	e.assertNoDeadLetters()
}

// TestLocalStackInitScriptForeignTable: an existing table with another key
// schema is refused, not used.
func TestLocalStackInitScriptForeignTable(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t)
	names := deployNewNames()
	ddb := dynamodb.NewFromConfig(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(names.table),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := deployRunInitScript(t, names)
	if err == nil {
		t.Fatal("the script accepted a table keyed on id")
	}
	if !strings.Contains(stderr, "key schema") {
		t.Errorf("the script failed without naming the key schema: %v\n%s", err, stderr)
	}
}

// deployRunInitScript runs the init script with names against the emulator
// and returns the resources it printed and its stderr.
func deployRunInitScript(t *testing.T, names deployNames) (deployResources, string, error) {
	t.Helper()
	awsCLI, err := exec.LookPath("aws")
	if err != nil {
		if os.Getenv(awstest.RequiredEnv) != "" {
			t.Fatal("the LocalStack init script test needs the AWS CLI: apt-get install awscli, or pip install awscli")
		}
		t.Skip("needs the AWS CLI (aws) on PATH")
	}
	shims := t.TempDir()
	if err := os.WriteFile(filepath.Join(shims, "awslocal"), []byte(deployAWSLocal), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(deployInitScript)
	if err != nil {
		t.Fatal(err)
	}

	// The script's own settings come from the test, never the caller's shell.
	own := []string{"PATH", "QUEUE_NAME", "DLQ_NAME", "CLAIM_TABLE", "QUEUE_VISIBILITY_SECONDS",
		"QUEUE_RETENTION_SECONDS", "DLQ_RETENTION_SECONDS", "MAX_RECEIVE_COUNT", "CREATE_FIFO", "FIFO_QUEUE_NAME", "FIFO_DLQ_NAME"}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(own, k) {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PATH="+shims+string(os.PathListSeparator)+filepath.Dir(awsCLI)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"QUEUE_NAME="+names.queue, "DLQ_NAME="+names.dlq, "CLAIM_TABLE="+names.table)
	if os.Getenv("AWS_DEFAULT_REGION") == "" { // the AWS CLI v1 reads only this one
		env = append(env, "AWS_DEFAULT_REGION="+awstest.Config(t).Region)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script) // run as LocalStack does: executable, by its shebang
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("%s: %s\n%s", filepath.Base(script), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		return deployResources{}, stderr.String(), err
	}

	printed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("the script printed %q on stdout, want only NAME=value lines", line)
		}
		printed[k] = v
	}
	r := deployResources{QueueURL: printed["QUEUE_URL"], DLQURL: printed["DLQ_URL"], ClaimTable: printed["CLAIM_TABLE"]}
	if r.QueueURL == "" || r.DLQURL == "" || r.ClaimTable == "" {
		t.Fatalf("the script printed %q, want QUEUE_URL, DLQ_URL and CLAIM_TABLE", stdout.String())
	}
	if got := r.names(); got != names {
		t.Fatalf("the script created %+v, want the names it was given, %+v", got, names)
	}
	return r, stderr.String(), nil
}

// deployCheckResources checks r over the wire: the queue as the worker reads
// it, with template.yaml's retention and redrive, and the claim table with
// the claim store's key and TTL attributes.
func deployCheckResources(t *testing.T, cfg aws.Config, r deployResources) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := tmplLoad(t)
	_, tq := d.queue(t)
	_, tdlq := d.deadLetterQueue(t, tq)
	tprops := tmplMap(t, tq["Properties"])
	wantRetention := tmplSeconds(t, d.resolve(t, tprops["MessageRetentionPeriod"], nil))
	wantDLQRetention := tmplSeconds(t, d.resolve(t, tmplMap(t, tdlq["Properties"])["MessageRetentionPeriod"], nil))
	wantMaxReceives := tmplInt(t, d.eval(t, tmplMap(t, tprops["RedrivePolicy"])["maxReceiveCount"], nil))

	sq := sqs.NewFromConfig(cfg)
	q, err := queue.Read(ctx, sq, r.QueueURL)
	if err != nil {
		t.Fatalf("the worker cannot read the queue: %v", err)
	}
	if q.VisibilityTimeout != 30*time.Second {
		t.Errorf("queue VisibilityTimeout = %s, want 30s (the script's default)", q.VisibilityTimeout)
	}
	if q.Retention != wantRetention {
		t.Errorf("queue retention = %s, want %s as in template.yaml", q.Retention, wantRetention)
	}
	if q.DeadLetterURL != r.DLQURL {
		t.Errorf("queue redrives to %q, want the DLQ %q", q.DeadLetterURL, r.DLQURL)
	}
	if q.MaxReceiveCount != wantMaxReceives {
		t.Errorf("maxReceiveCount = %d, want %d as in template.yaml", q.MaxReceiveCount, wantMaxReceives)
	}
	if q.DeadLetterRetention != wantDLQRetention {
		t.Errorf("DLQ retention = %s, want %s as in template.yaml", q.DeadLetterRetention, wantDLQRetention)
	}

	// The redrive policy as written, not only as the worker reads it.
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		t.Fatal(err)
	}
	dlqAttrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.DLQURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	var redrive struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"` // "5" or 5
	}
	if err := json.Unmarshal([]byte(attrs.Attributes["RedrivePolicy"]), &redrive); err != nil {
		t.Fatalf("RedrivePolicy %q: %v", attrs.Attributes["RedrivePolicy"], err)
	}
	if want := dlqAttrs.Attributes["QueueArn"]; redrive.DeadLetterTargetArn != want {
		t.Errorf("RedrivePolicy deadLetterTargetArn = %s, want %s", redrive.DeadLetterTargetArn, want)
	}
	if n, err := strconv.Atoi(strings.Trim(string(redrive.MaxReceiveCount), `"`)); err != nil || n != wantMaxReceives {
		t.Errorf("RedrivePolicy maxReceiveCount = %s, want %d", redrive.MaxReceiveCount, wantMaxReceives)
	}
	// The dead-letter queue takes the queue's messages only, as in template.yaml.
	allow, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.DLQURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedriveAllowPolicy},
	})
	if err != nil {
		t.Fatal(err)
	}
	qAttrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		RedrivePermission string   `json:"redrivePermission"`
		SourceQueueArns   []string `json:"sourceQueueArns"`
	}
	raw := allow.Attributes[string(types.QueueAttributeNameRedriveAllowPolicy)]
	if err := json.Unmarshal([]byte(raw), &policy); err != nil || policy.RedrivePermission != "byQueue" ||
		!slices.Equal(policy.SourceQueueArns, []string{qAttrs.Attributes["QueueArn"]}) {
		t.Errorf("DLQ RedriveAllowPolicy = %q, want byQueue naming only %s", raw, qAttrs.Attributes["QueueArn"])
	}

	ddb := dynamodb.NewFromConfig(cfg)
	desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.ClaimTable)})
	if err != nil {
		t.Fatal(err)
	}
	table := desc.Table
	var keys []string
	for _, k := range table.KeySchema {
		keys = append(keys, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	if want := dynamo.DefaultKeyAttribute + " HASH"; !slices.Equal(keys, []string{want}) {
		t.Errorf("table key schema = %q, want [%s] only", keys, want)
	}
	for _, a := range table.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == dynamo.DefaultKeyAttribute && a.AttributeType != ddbtypes.ScalarAttributeTypeS {
			t.Errorf("key %s has type %s, want S", dynamo.DefaultKeyAttribute, a.AttributeType)
		}
	}
	if s := table.BillingModeSummary; s == nil || s.BillingMode != ddbtypes.BillingModePayPerRequest {
		t.Errorf("table billing mode summary = %+v, want PAY_PER_REQUEST", s)
	}
	ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(r.ClaimTable)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil {
		t.Errorf("no TTL description, want TTL ENABLED on %s", dynamo.DefaultTTLAttribute)
	} else if d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != dynamo.DefaultTTLAttribute {
		t.Errorf("TTL %s on %q, want ENABLED on %s", d.TimeToLiveStatus, aws.ToString(d.AttributeName), dynamo.DefaultTTLAttribute)
	}
}
