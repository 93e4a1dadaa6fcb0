package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/ledger"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// cmdSetup creates the queue, its dead-letter queue and the claim table,
// idempotently, wherever the SDK's configuration points (AWS_ENDPOINT_URL
// for an emulator). With -fifo both queues are FIFO queues (".fifo" is
// added to names that lack it) without content-based deduplication:
// producers give each message a deduplication id. With KAFKA_BROKERS set
// it creates the Kafka topic and its dead-letter topic instead of the
// queues, and with AMQP_URL set it declares the RabbitMQ topology
// (rabbitworker.Setup); the claim table is created either way.
func cmdSetup(ctx context.Context, args []string, io stdio) error {
	s := newSettings("setup", io)
	queue := s.String("queue-name", "QUEUE_NAME", "payments", "source queue name")
	dlq := s.String("dlq-name", "DLQ_NAME", "", "dead-letter queue name (default: <queue-name>-dlq)")
	table := s.String("claim-table", "CLAIM_TABLE", "claims", "claim table name")
	visibility := s.Duration("visibility-timeout", "VISIBILITY_TIMEOUT", 30*time.Second, "the queue's visibility timeout")
	retention := s.Duration("queue-retention", "QUEUE_RETENTION", 96*time.Hour, "the queue's message retention")
	maxReceives := s.Int("max-receive-count", "MAX_RECEIVE_COUNT", 0, fmt.Sprintf("receives before SQS moves a message to the dead-letter queue (default %d, %d with -fifo)", standardMaxReceiveCount, sqsworker.FIFOMaxReceiveCount))
	ledgerTable := s.String("ledger-table", "LEDGER_TABLE", "", "also create this ledger table, for HANDLER=ledger (default: none)")
	export := s.fs.Bool("export", false, `print "export NAME=value" lines, for eval "$(worker setup -export)"`)
	fifo := s.Bool("fifo", "QUEUE_FIFO", false, "create FIFO queues (<queue-name>.fifo, <queue-name>-dlq.fifo), without content-based deduplication")
	pg := s.fs.Bool("postgres", false, "create the claim table (and the ledger's tables) in PostgreSQL on DATABASE_URL instead of DynamoDB, for STORE=postgres")
	k := defineKafkaSetup(s)
	r := defineRabbitSetup(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	var out [][2]string
	var cfg *aws.Config // loaded for SQS, or for the DynamoDB tables
	switch {
	case *k.brokers != "" && *r.url != "":
		return usagef("%s and %s are both set: set one, to set up Kafka or RabbitMQ (neither: SQS)", kafkaChoice, amqpChoice)
	case *k.brokers == "" && secSet(k.sec):
		n, _ := k.sec.set()
		return usagef("%s is set, but it applies to Kafka (%s) only, and KAFKA_BROKERS is not set", n, kafkaChoice.env)
	case (*k.brokers != "" || *r.url != "") && *fifo:
		return usagef("-fifo (QUEUE_FIFO) is SQS's: not with KAFKA_BROKERS or AMQP_URL")
	case *k.brokers != "":
		kout, err := k.setup(ctx, io.stderr)
		if err != nil {
			return err
		}
		out = kout
	case *r.url != "":
		rout, err := r.setup(ctx, io.stderr)
		if err != nil {
			return err
		}
		out = rout
	default:
		sout, scfg, err := setupSQS(ctx, sqsSetup{queue: *queue, dlq: *dlq, visibility: *visibility, retention: *retention,
			maxReceives: *maxReceives, fifo: *fifo}, io.stderr)
		if err != nil {
			return err
		}
		out, cfg = sout, &scfg
	}
	if err := setupTables(ctx, s, cfg, *pg, *table, *ledgerTable, io.stderr); err != nil {
		return err
	}
	out = append(out, [2]string{"CLAIM_TABLE", *table})
	if *ledgerTable != "" {
		out = append(out, [2]string{"LEDGER_TABLE", *ledgerTable})
	}
	if *pg {
		out = append(out, [2]string{"STORE", storePostgres})
	}
	for _, kv := range out {
		if *export {
			fmt.Fprintf(io.stdout, "export %s=%s\n", kv[0], shellQuote(kv[1]))
		} else {
			fmt.Fprintf(io.stdout, "%s=%s\n", kv[0], kv[1])
		}
	}
	return nil
}

// sqsSetup are the settings of SQS's setup.
type sqsSetup struct {
	queue, dlq            string
	visibility, retention time.Duration
	maxReceives           int
	fifo                  bool
}

// setupSQS creates the queue and its dead-letter queue, and returns their
// URLs to print and the AWS configuration it loaded.
func setupSQS(ctx context.Context, o sqsSetup, report io.Writer) ([][2]string, aws.Config, error) {
	o.fifo = o.fifo || strings.HasSuffix(o.queue, fifoSuffix) // SQS would refuse a standard queue so named
	base := strings.TrimSuffix(o.queue, fifoSuffix)
	if o.dlq == "" {
		o.dlq = base + "-dlq"
	}
	fifoAttrs := map[string]string{}
	if o.fifo {
		o.queue, o.dlq = base+fifoSuffix, strings.TrimSuffix(o.dlq, fifoSuffix)+fifoSuffix
		fifoAttrs[string(types.QueueAttributeNameFifoQueue)] = "true"
		fifoAttrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "false"
	}
	if o.visibility < 0 || o.visibility > sqsworker.MaxVisibility || o.visibility%time.Second != 0 {
		return nil, aws.Config{}, usagef("VISIBILITY_TIMEOUT (-visibility-timeout) %s: must be whole seconds up to %s", o.visibility, sqsworker.MaxVisibility)
	}
	if o.retention < time.Minute || o.retention > 14*24*time.Hour || o.retention%time.Second != 0 {
		return nil, aws.Config{}, usagef("QUEUE_RETENTION (-queue-retention) %s: must be whole seconds from 1m to 336h", o.retention)
	}
	if o.maxReceives == 0 {
		o.maxReceives = standardMaxReceiveCount
		if o.fifo {
			o.maxReceives = sqsworker.FIFOMaxReceiveCount
		}
	}
	if o.maxReceives < 1 || o.maxReceives > 1000 {
		return nil, aws.Config{}, usagef("MAX_RECEIVE_COUNT (-max-receive-count) %d: must be 1 to 1000", o.maxReceives)
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, aws.Config{}, err
	}
	sq := sqs.NewFromConfig(cfg)
	dlqURL, err := createQueue(ctx, sq, o.dlq, withAttrs(fifoAttrs, map[string]string{
		string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(14 * 24 * 3600),
	}), report)
	if err != nil {
		return nil, aws.Config{}, err
	}
	arn, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(dlqURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return nil, aws.Config{}, fmt.Errorf("setup: dead-letter queue ARN: %w", err)
	}
	dlqARN := arn.Attributes[string(types.QueueAttributeNameQueueArn)]
	if err := allowOnlySource(ctx, sq, dlqURL, o.dlq, dlqARN, o.queue, report); err != nil {
		return nil, aws.Config{}, err
	}
	policy, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": dlqARN,
		"maxReceiveCount":     strconv.Itoa(o.maxReceives),
	})
	queueURL, err := createQueue(ctx, sq, o.queue, withAttrs(fifoAttrs, map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(int(o.visibility.Seconds())),
		string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(o.retention.Seconds())),
		string(types.QueueAttributeNameRedrivePolicy):          string(policy),
	}), report)
	if err != nil {
		return nil, aws.Config{}, err
	}
	return [][2]string{{"QUEUE_URL", queueURL}, {"DLQ_URL", dlqURL}}, cfg, nil
}

// setupTables creates the claim table (and the ledger's, if named): in
// PostgreSQL with pg, else in DynamoDB with cfg (loaded here if nil).
func setupTables(ctx context.Context, s *settings, cfg *aws.Config, pg bool, table, ledgerTable string, report io.Writer) error {
	if pg {
		return setupPostgres(ctx, s, table, ledgerTable, report)
	}
	if cfg == nil {
		c, err := loadAWS(ctx)
		if err != nil {
			return err
		}
		cfg = &c
	}
	ddb := dynamodb.NewFromConfig(*cfg)
	if err := createTable(ctx, ddb, "claim table", table, report, func() error {
		return dynamo.CreateTable(ctx, ddb, dynamo.TableSpec{Name: table})
	}); err != nil {
		return err
	}
	if ledgerTable != "" {
		return createTable(ctx, ddb, "ledger table", ledgerTable, report, func() error {
			return ledger.CreateTable(ctx, ddb, ledgerTable)
		})
	}
	return nil
}

// allowOnlySource gives the dead-letter queue a RedriveAllowPolicy that
// names the source queue alone (in the dead-letter queue's account and
// region): no other queue can then dead-letter into it, and have `worker
// redrive` move its messages into the source queue.
func allowOnlySource(ctx context.Context, api *sqs.Client, dlqURL, dlqName, dlqARN, source string, report io.Writer) error {
	i := strings.LastIndex(dlqARN, ":")
	if i < 0 {
		return fmt.Errorf("setup: dead-letter queue ARN %q: not an ARN", dlqARN)
	}
	srcARN := dlqARN[:i+1] + source
	want, _ := json.Marshal(map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []string{srcARN}})
	name := string(types.QueueAttributeNameRedriveAllowPolicy)
	cur, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(dlqURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedriveAllowPolicy},
	})
	if err != nil {
		return fmt.Errorf("setup: attributes of %s: %w", dlqName, err)
	}
	if sameJSON(cur.Attributes[name], string(want)) {
		return nil
	}
	if _, err := api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl: aws.String(dlqURL), Attributes: map[string]string{name: string(want)},
	}); err != nil {
		return fmt.Errorf("setup: set %s of %s: %w", name, dlqName, err)
	}
	fmt.Fprintf(report, "setup: dead-letter queue %s takes only %s's messages (%s)\n", dlqName, source, name)
	return nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// shellQuote returns s as one POSIX shell word: as is when it is made of
// safe characters only, else in single quotes.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./:=@%+,", r) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// createQueue creates a queue or, if it exists, sets its attributes to
// attrs, and says on report which it did and what it changed.
func createQueue(ctx context.Context, api *sqs.Client, name string, attrs map[string]string, report io.Writer) (string, error) {
	got, gerr := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if gerr != nil {
		out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return "", fmt.Errorf("setup: create queue %s: %w", name, err)
		}
		fmt.Fprintf(report, "setup: created queue %s\n", name)
		return aws.ToString(out.QueueUrl), nil
	}
	url := aws.ToString(got.QueueUrl)
	// A queue's type is fixed at creation: FifoQueue cannot be set again.
	attrs = maps.Clone(attrs)
	delete(attrs, string(types.QueueAttributeNameFifoQueue))
	names := slices.Sorted(maps.Keys(attrs))
	qnames := make([]types.QueueAttributeName, len(names))
	for i, n := range names {
		qnames[i] = types.QueueAttributeName(n)
	}
	cur, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: qnames})
	if err != nil {
		return "", fmt.Errorf("setup: attributes of %s: %w", name, err)
	}
	var changes []string
	for _, n := range names {
		if was := cur.Attributes[n]; !sameAttribute(n, was, attrs[n]) {
			changes = append(changes, fmt.Sprintf("%s from %s to %s", n, cmp.Or(was, "(none)"), attrs[n]))
		}
	}
	if len(changes) == 0 {
		fmt.Fprintf(report, "setup: queue %s exists, unchanged\n", name)
		return url, nil
	}
	if _, err := api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs}); err != nil {
		return "", fmt.Errorf("setup: set attributes of %s: %w", name, err)
	}
	fmt.Fprintf(report, "setup: queue %s exists; changed %s\n", name, strings.Join(changes, ", "))
	return url, nil
}

// standardMaxReceiveCount is the maxReceiveCount setup gives a standard
// queue: a deferred duplicate spends receives too.
const standardMaxReceiveCount = 5

// sameAttribute reports whether a queue attribute's value a is b; a
// RedrivePolicy's maxReceiveCount may be a number or a string.
func sameAttribute(name, a, b string) bool {
	if a == b || name != string(types.QueueAttributeNameRedrivePolicy) {
		return a == b
	}
	norm := func(s string) string {
		var rp map[string]any
		if json.Unmarshal([]byte(s), &rp) != nil {
			return s
		}
		for k, v := range rp {
			rp[k] = strings.Trim(fmt.Sprint(v), `"`)
		}
		out, _ := json.Marshal(rp)
		return string(out)
	}
	return norm(a) == norm(b)
}

// createTable creates a table with create unless it exists, and says on
// report which.
func createTable(ctx context.Context, api *dynamodb.Client, kind, name string, report io.Writer, create func() error) error {
	_, derr := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err := create(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if derr == nil {
		fmt.Fprintf(report, "setup: %s %s exists\n", kind, name)
	} else {
		fmt.Fprintf(report, "setup: created %s %s\n", kind, name)
	}
	return nil
}

// fifoSuffix ends every FIFO queue's name.
const fifoSuffix = ".fifo"

// withAttrs returns attrs with extra added.
func withAttrs(extra, attrs map[string]string) map[string]string {
	maps.Copy(attrs, extra)
	return attrs
}
