package integration

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// The template's invariants, checked against the code's own names and rules.
// `cfn-lint template.yaml` (make cfn-lint, a prerequisite of make test)
// checks that it is a valid template; these tests check that it is the
// deployment the claim protocol needs.

// tmplPath is the SAM template, relative to this package's directory.
const tmplPath = "../template.yaml"

// TestTemplateClaimTable: the table the function's CLAIM_TABLE names has the
// claim store's key and TTL attributes, on-demand capacity and PITR.
func TestTemplateClaimTable(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	id, table := d.claimTable(t)
	if got := tmplString(t, table["Type"]); got != "AWS::DynamoDB::Table" {
		t.Errorf("%s: Type = %s, want AWS::DynamoDB::Table (SimpleTable has no TTL)", id, got)
	}
	props := tmplMap(t, table["Properties"])

	keys := tmplList(t, props["KeySchema"])
	if len(keys) != 1 {
		t.Fatalf("%s: KeySchema has %d keys, want 1 (a partition key only): %v", id, len(keys), keys)
	}
	key := tmplMap(t, keys[0])
	if got := tmplString(t, key["AttributeName"]); got != dynamo.DefaultKeyAttribute {
		t.Errorf("%s: key attribute = %q, want dynamo.DefaultKeyAttribute %q", id, got, dynamo.DefaultKeyAttribute)
	}
	if got := tmplString(t, key["KeyType"]); got != "HASH" {
		t.Errorf("%s: KeyType = %s, want HASH", id, got)
	}
	defs := tmplList(t, props["AttributeDefinitions"])
	if len(defs) != 1 {
		t.Fatalf("%s: %d AttributeDefinitions, want 1 (the key): %v", id, len(defs), defs)
	}
	def := tmplMap(t, defs[0])
	if name, typ := tmplString(t, def["AttributeName"]), tmplString(t, def["AttributeType"]); name != dynamo.DefaultKeyAttribute || typ != "S" {
		t.Errorf("%s: AttributeDefinitions = %s %s, want %s S", id, name, typ, dynamo.DefaultKeyAttribute)
	}

	if got := tmplString(t, d.resolve(t, props["BillingMode"], nil)); got != "PAY_PER_REQUEST" {
		t.Errorf("%s: BillingMode = %s, want PAY_PER_REQUEST", id, got)
	}
	ttl := tmplMap(t, props["TimeToLiveSpecification"])
	if got := tmplString(t, ttl["AttributeName"]); got != dynamo.DefaultTTLAttribute {
		t.Errorf("%s: TTL attribute = %q, want dynamo.DefaultTTLAttribute %q", id, got, dynamo.DefaultTTLAttribute)
	}
	if !tmplBool(t, d.resolve(t, ttl["Enabled"], nil)) {
		t.Errorf("%s: TTL is not enabled: expired claims would never be deleted", id)
	}
	pitr := tmplMap(t, props["PointInTimeRecoverySpecification"])
	if !tmplBool(t, d.resolve(t, pitr["PointInTimeRecoveryEnabled"], nil)) {
		t.Errorf("%s: point-in-time recovery is off", id)
	}
	if !tmplBool(t, d.resolve(t, props["DeletionProtectionEnabled"], nil)) {
		t.Errorf("%s: DeletionProtectionEnabled is not true: a deleted table forgets every claim, and every duplicate runs again", id)
	}
	for _, policy := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
		if got, _ := table[policy].(string); got != "Retain" {
			t.Errorf("%s: %s = %q, want Retain: the table is the only record of which payments were charged", id, policy, got)
		}
	}
}

// TestTemplateQueue: the function's queue outlasts a throttled retry, and
// redrives to a dead-letter queue that keeps messages 14 days.
func TestTemplateQueue(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	fn := d.function(t)
	queueID, queue := d.queue(t)
	dlqID, dlq := d.deadLetterQueue(t, queue)
	qprops := tmplMap(t, queue["Properties"])

	// Lambda's guidance: visibility >= 6 x the function timeout. Messages
	// are also in flight while a batch fills, so the batching window counts
	// too. Check every function timeout a deployment can choose.
	fprops := tmplMap(t, fn["Properties"])
	window := d.largest(t, tmplMap(t, d.sqsEvent(t)["Properties"])["MaximumBatchingWindowInSeconds"])
	for _, timeout := range d.choices(t, fprops["Timeout"]) {
		params := map[string]any{}
		if p, ok := tmplRef(fprops["Timeout"]); ok {
			params[p] = timeout
		}
		secs := tmplInt(t, d.resolve(t, fprops["Timeout"], params))
		vis := tmplInt(t, d.resolve(t, qprops["VisibilityTimeout"], params))
		if vis < 6*secs+window {
			t.Errorf("%s: VisibilityTimeout %d s with function Timeout %d s and batching window up to %d s: want >= 6 x %d + %d = %d",
				queueID, vis, secs, window, secs, window, 6*secs+window)
		}
	}

	redrive := tmplMap(t, qprops["RedrivePolicy"])
	if got := tmplInt(t, d.eval(t, redrive["maxReceiveCount"], nil)); got < 5 {
		t.Errorf("%s: maxReceiveCount = %d, want >= 5 (a deferred duplicate spends receives too)", queueID, got)
	}
	if got := tmplInt(t, d.eval(t, redrive["maxReceiveCount"], map[string]any{"FifoQueue": "true"})); got < sqsworker.FIFOMaxReceiveCount {
		t.Errorf("%s: FIFO maxReceiveCount = %d, want >= %d (each failure in a group spends a receive of the messages behind it)",
			queueID, got, sqsworker.FIFOMaxReceiveCount)
	}
	retention := tmplSeconds(t, d.resolve(t, qprops["MessageRetentionPeriod"], nil))
	dlqRetention := tmplSeconds(t, d.resolve(t, tmplMap(t, dlq["Properties"])["MessageRetentionPeriod"], nil))
	if dlqRetention != 14*24*time.Hour {
		t.Errorf("%s: MessageRetentionPeriod = %s, want 14 days (336h)", dlqID, dlqRetention)
	}
	if dlqRetention <= retention {
		t.Errorf("%s: retention %s is not longer than %s's %s: a dead-lettered message keeps its enqueue time and would expire on arrival",
			dlqID, dlqRetention, queueID, retention)
	}
}

// TestTemplateDeadLetterQueueTakesOnlyTheQueue: the dead-letter queue's
// RedriveAllowPolicy names the function's queue alone, so that no other
// queue in the account can dead-letter into it (and have `worker redrive`
// move its messages into the payments queue). The queue's ARN is spelled
// from its name: a !GetAtt would make the two queues depend on each other.
func TestTemplateDeadLetterQueueTakesOnlyTheQueue(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	queueID, queue := d.queue(t)
	dlqID, dlq := d.deadLetterQueue(t, queue)
	for _, fifo := range []string{"false", "true"} {
		params := map[string]any{"FifoQueue": fifo}
		name := d.eval(t, tmplMap(t, queue["Properties"])["QueueName"], params)
		var nameSub string
		if n, ok := name.(map[string]any); ok {
			if r, ok := tmplRef(n); ok {
				nameSub = "${" + r + "}"
			} else {
				nameSub, _ = n["Fn::Sub"].(string)
			}
		}
		if nameSub == "" {
			t.Fatalf("%s with FifoQueue %s: QueueName = %v, want a name the template can spell (!Ref AWS::StackName or !Sub)", queueID, fifo, name)
		}
		allow, ok := tmplMap(t, dlq["Properties"])["RedriveAllowPolicy"]
		if !ok {
			t.Fatalf("%s has no RedriveAllowPolicy: any queue in the account can dead-letter into it", dlqID)
		}
		policy := tmplMap(t, allow)
		if got := policy["redrivePermission"]; got != "byQueue" {
			t.Errorf("%s: redrivePermission = %v, want byQueue", dlqID, got)
		}
		srcs := tmplList(t, d.eval(t, policy["sourceQueueArns"], params))
		want := "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + nameSub
		if len(srcs) != 1 {
			t.Fatalf("%s with FifoQueue %s: sourceQueueArns = %v, want only %s", dlqID, fifo, srcs, want)
		}
		got := d.eval(t, srcs[0], params)
		if m, _ := got.(map[string]any); m == nil || m["Fn::Sub"] != want {
			t.Errorf("%s with FifoQueue %s: sourceQueueArns = [%v], want [!Sub %q]", dlqID, fifo, got, want)
		}
	}
}

// TestTemplateFunction: the Lambda is the arm64 bootstrap the Makefile
// builds, reports partial batch failures, and is configured by the
// environment variables the binary reads.
func TestTemplateFunction(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	fn := d.function(t)
	props := tmplMap(t, fn["Properties"])
	for _, c := range []struct{ prop, want string }{
		{"Runtime", "provided.al2023"},
		{"Handler", "bootstrap"},
		{"CodeUri", "dist/lambda/"},
	} {
		if got := tmplString(t, props[c.prop]); got != c.want {
			t.Errorf("Function %s = %q, want %q", c.prop, got, c.want)
		}
	}
	if got := tmplList(t, props["Architectures"]); len(got) != 1 || got[0] != "arm64" {
		t.Errorf("Function Architectures = %v, want [arm64]", got)
	}

	ev := tmplMap(t, d.sqsEvent(t)["Properties"])
	types := tmplList(t, ev["FunctionResponseTypes"])
	if !slices.Contains(types, any("ReportBatchItemFailures")) {
		t.Errorf("SQS event FunctionResponseTypes = %v: without ReportBatchItemFailures one failed record retries the whole batch", types)
	}
	for _, prop := range []string{"BatchSize", "MaximumBatchingWindowInSeconds"} {
		if _, ok := tmplRef(ev[prop]); !ok {
			t.Errorf("SQS event %s = %v, want a !Ref to a parameter", prop, ev[prop])
		}
	}
	if _, ok := tmplRef(tmplMap(t, ev["ScalingConfig"])["MaximumConcurrency"]); !ok {
		t.Errorf("SQS event ScalingConfig.MaximumConcurrency = %v, want a !Ref to a parameter", ev["ScalingConfig"])
	}

	vars := tmplMap(t, tmplMap(t, props["Environment"])["Variables"])
	for _, name := range []string{"CLAIM_TABLE", "PROVIDER_URL", "CLAIM_RETENTION", "QUEUE_URL", "LOG_LEVEL"} {
		if _, ok := vars[name]; !ok {
			t.Errorf("Function environment has no %s", name)
		}
	}
	queueID, _ := d.queue(t)
	if got, ok := tmplRef(vars["QUEUE_URL"]); !ok || got != queueID {
		t.Errorf("QUEUE_URL = %v, want !Ref %s (the event's queue)", vars["QUEUE_URL"], queueID)
	}
	level := tmplString(t, d.resolve(t, vars["LOG_LEVEL"], nil))
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, level) {
		t.Errorf("LOG_LEVEL = %q, want debug, info, warn or error", level)
	}
}

// TestTemplateProviderKeyIsASecret: the provider's API key is never a
// value in the template (where it would be plaintext in the function's
// configuration and the stack's history): the function reads it from a
// Secrets Manager secret at start.
func TestTemplateProviderKeyIsASecret(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	vars := tmplMap(t, tmplMap(t, tmplMap(t, d.function(t)["Properties"])["Environment"])["Variables"])
	if v, ok := vars["PROVIDER_API_KEY"]; ok {
		t.Errorf("Function environment has PROVIDER_API_KEY = %v: a plaintext secret", v)
	}
	if path := tmplFind(map[string]any(d), "resolve:secretsmanager"); path != "" {
		t.Errorf("template resolves a secret at %s: a dynamic reference in an environment variable is plaintext in the function's configuration", path)
	}
	id, secret := d.providerKeySecret(t)
	if typ := tmplString(t, secret["Type"]); typ != "AWS::SecretsManager::Secret" {
		t.Errorf("PROVIDER_API_KEY_SECRET names %s, a %s; want an AWS::SecretsManager::Secret", id, typ)
	}
}

// TestTemplateClaimRetention: claims are remembered longer than any copy of
// a message can come back, by the worker's own rules.
func TestTemplateClaimRetention(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	vars := tmplMap(t, tmplMap(t, tmplMap(t, d.function(t)["Properties"])["Environment"])["Variables"])
	raw := tmplString(t, d.resolve(t, vars["CLAIM_RETENTION"], nil))
	retention, err := time.ParseDuration(raw)
	if err != nil {
		t.Fatalf("CLAIM_RETENTION %q: %v", raw, err)
	}
	queueID, queue := d.queue(t)
	dlqID, dlq := d.deadLetterQueue(t, queue)
	q := sqsworker.QueueInfo{
		Retention:           tmplSeconds(t, d.resolve(t, tmplMap(t, queue["Properties"])["MessageRetentionPeriod"], nil)),
		DeadLetterRetention: tmplSeconds(t, d.resolve(t, tmplMap(t, dlq["Properties"])["MessageRetentionPeriod"], nil)),
	}
	if retention <= q.Retention {
		t.Errorf("CLAIM_RETENTION %s is not longer than %s's retention %s", retention, queueID, q.Retention)
	}
	if retention < q.DeadLetterRetention {
		t.Errorf("CLAIM_RETENTION %s is shorter than %s's retention %s", retention, dlqID, q.DeadLetterRetention)
	}
	// The worker's largest clock bound (its lease margin's cap) and its
	// default hold, or a FIFO group's wait.
	if least := sqsworker.MinRetention(q, 5*time.Second, sqsworker.MaxVisibility); retention < least {
		t.Errorf("the worker would refuse to start: CLAIM_RETENTION %s is shorter than %s", retention, least)
	}
	// A redrive from the dead-letter queue sends a new message with a new
	// enqueue time, so a copy can arrive up to queue + DLQ retention late.
	if want := sqsworker.DefaultRetention(q); retention < want {
		t.Errorf("CLAIM_RETENTION %s is shorter than the worker's default for these queues, %s (queue %s + dead-letter %s + margin %s)",
			retention, want, q.Retention, q.DeadLetterRetention, sqsworker.RetentionMargin)
	}
}

// TestTemplateIAM: the function's role grants exactly the calls the worker
// makes, each on its own resource: no wildcard, no managed or SAM policy.
func TestTemplateIAM(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	if path := tmplFind(map[string]any(d), "DynamoDBCrudPolicy"); path != "" {
		t.Errorf("template uses DynamoDBCrudPolicy at %s: it grants Scan, DeleteItem, BatchWriteItem ... the worker never calls", path)
	}
	fn := d.function(t)
	props := tmplMap(t, fn["Properties"])
	if p, ok := props["Policies"]; ok {
		t.Errorf("Function has Policies %v: grant through the explicit role only", p)
	}
	// Without an explicit Role, SAM attaches AWS managed policies to the
	// role it generates, and those grant on "*".
	roleID, ok := tmplGetAtt(props["Role"], "Arn")
	if !ok {
		t.Fatalf("Function Role = %v, want !GetAtt <role>.Arn of a role in the template", props["Role"])
	}
	role := d.resource(t, roleID)
	if got := tmplString(t, role["Type"]); got != "AWS::IAM::Role" {
		t.Fatalf("%s: Type = %s, want AWS::IAM::Role", roleID, got)
	}
	rprops := tmplMap(t, role["Properties"])
	if m, ok := rprops["ManagedPolicyArns"]; ok {
		t.Errorf("%s: ManagedPolicyArns %v: managed policies grant on \"*\"", roleID, m)
	}
	for id, r := range d.resources(t) {
		if typ := tmplString(t, r["Type"]); id != roleID && strings.HasPrefix(typ, "AWS::IAM::") {
			t.Errorf("%s: unexpected %s: the function's role is the only grant", id, typ)
		}
	}

	// What each resource is granted, by the worker's use of it.
	tableID, _ := d.claimTable(t)
	queueID, queue := d.queue(t)
	dlqID, _ := d.deadLetterQueue(t, queue)
	logGroup, ok := tmplRef(tmplMap(t, props["LoggingConfig"])["LogGroup"])
	if !ok {
		t.Fatalf("Function LoggingConfig.LogGroup = %v, want !Ref <log group>", props["LoggingConfig"])
	}
	secretID, _ := d.providerKeySecret(t)
	want := map[string][]string{
		secretID: {"secretsmanager:GetSecretValue"},
		tableID:  tmplStoreActions(),
		queueID:  {"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"},
		dlqID:    {"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"},
		logGroup: {"logs:CreateLogStream", "logs:PutLogEvents"},
	}
	got := map[string][]string{}
	for _, p := range tmplList(t, rprops["Policies"]) {
		policy := tmplMap(t, p)
		name := tmplString(t, policy["PolicyName"])
		for i, s := range tmplList(t, tmplMap(t, policy["PolicyDocument"])["Statement"]) {
			where := fmt.Sprintf("%s policy %s statement %d", roleID, name, i)
			st := tmplMap(t, s)
			if effect := tmplString(t, st["Effect"]); effect != "Allow" {
				t.Errorf("%s: Effect %s", where, effect)
			}
			for _, k := range []string{"NotAction", "NotResource"} {
				if _, ok := st[k]; ok {
					t.Errorf("%s: %s grants everything not listed", where, k)
				}
			}
			var resources []string
			for _, r := range tmplOneOrMore(st["Resource"]) {
				if s, ok := r.(string); ok {
					t.Errorf("%s: literal Resource %q, want !GetAtt <resource>.Arn", where, s)
					continue
				}
				id, ok := tmplGetAtt(r, "Arn")
				if ref, isRef := tmplRef(r); !ok && isRef && tmplString(t, d.resource(t, ref)["Type"]) == "AWS::SecretsManager::Secret" {
					id, ok = ref, true // a secret's Ref is its ARN; it has no Arn attribute
				}
				if !ok {
					t.Errorf("%s: Resource %v, want !GetAtt <resource>.Arn", where, r)
					continue
				}
				resources = append(resources, id)
			}
			for _, a := range tmplOneOrMore(st["Action"]) {
				action := tmplString(t, a)
				if strings.Contains(action, "*") {
					t.Errorf("%s: wildcard Action %q", where, action)
				}
				for _, id := range resources {
					got[id] = append(got[id], action)
				}
			}
		}
	}
	for id := range got {
		slices.Sort(got[id])
		got[id] = slices.Compact(got[id])
	}
	for id, actions := range want {
		if !slices.Equal(got[id], actions) {
			t.Errorf("%s is granted %v, want exactly %v", id, got[id], actions)
		}
		delete(got, id)
	}
	for id, actions := range got {
		t.Errorf("%s is granted %v, want nothing", id, actions)
	}
}

// tmplStoreActions returns the IAM actions of the calls the claim store
// makes, sorted: one per method of dynamo.API, the interface it calls
// DynamoDB through, and of dynamo.CheckAPI, which checks the table at start.
func tmplStoreActions() []string {
	var actions []string
	for _, api := range []reflect.Type{reflect.TypeFor[dynamo.API](), reflect.TypeFor[dynamo.CheckAPI]()} {
		for i := range api.NumMethod() {
			actions = append(actions, "dynamodb:"+api.Method(i).Name)
		}
	}
	slices.Sort(actions)
	return actions
}

// tmplDoc is template.yaml as plain Go values (maps, slices, strings,
// numbers, bools), the short intrinsic tags turned into their long forms:
// !Ref X -> {"Ref": "X"}, !GetAtt A.B -> {"Fn::GetAtt": ["A", "B"]},
// !Sub s -> {"Fn::Sub": s}, and so on.
type tmplDoc map[string]any

func tmplLoad(t *testing.T) tmplDoc {
	t.Helper()
	b, err := os.ReadFile(tmplPath)
	if err != nil {
		t.Fatal(err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		t.Fatalf("%s: %v", tmplPath, err)
	}
	v, err := tmplDecode(&n)
	if err != nil {
		t.Fatalf("%s: %v", tmplPath, err)
	}
	d, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: top level is %T, want a mapping", tmplPath, v)
	}
	return d
}

// tmplDecode turns a YAML node into plain values, expanding the short
// intrinsic tags.
func tmplDecode(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: %d documents, want 1", n.Line, len(n.Content))
		}
		return tmplDecode(n.Content[0])
	case yaml.AliasNode:
		return tmplDecode(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			val, err := tmplDecode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := tmplDecode(c)
			if err != nil {
				return nil, err
			}
			l = append(l, val)
		}
		v = l
	case yaml.ScalarNode:
		if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			v = n.Value // an intrinsic's argument is taken as written
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
	}
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	switch name := n.Tag[1:]; name {
	case "Ref", "Condition":
		return map[string]any{name: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			res, attr, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q, want Resource.Attribute", n.Line, s)
			}
			v = []any{res, attr}
		}
		return map[string]any{"Fn::GetAtt": v}, nil
	default:
		return map[string]any{"Fn::" + name: v}, nil
	}
}

// resolve evaluates v as CloudFormation would with the parameters in params
// and every other parameter at its Default: a Ref to a parameter and
// Fn::FindInMap are resolved; other values are returned as they are.
func (d tmplDoc) resolve(t *testing.T, v any, params map[string]any) any {
	t.Helper()
	if name, ok := tmplRef(v); ok {
		if p, ok := params[name]; ok {
			return p
		}
		param, ok := tmplMap(t, d["Parameters"])[name]
		if !ok {
			return v // a resource: its ID or URL is known only when deployed
		}
		def, ok := tmplMap(t, param)["Default"]
		if !ok {
			t.Fatalf("parameter %s has no Default", name)
		}
		return def
	}
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if args, ok := m["Fn::FindInMap"]; ok {
			l := tmplList(t, args)
			if len(l) != 3 {
				t.Fatalf("Fn::FindInMap %v: want 3 arguments", l)
			}
			keys := make([]string, 3)
			for i, a := range l {
				keys[i] = tmplKey(t, d.resolve(t, a, params))
			}
			top, ok := tmplMap(t, tmplMap(t, d["Mappings"])[keys[0]])[keys[1]]
			if !ok {
				t.Fatalf("mapping %s has no key %q", keys[0], keys[1])
			}
			val, ok := tmplMap(t, top)[keys[2]]
			if !ok {
				t.Fatalf("mapping %s.%s has no key %q", keys[0], keys[1], keys[2])
			}
			return val
		}
	}
	return v
}

// choices returns every value v can take: a parameter's AllowedValues, or
// its Default, or v itself.
func (d tmplDoc) choices(t *testing.T, v any) []any {
	t.Helper()
	name, ok := tmplRef(v)
	if !ok {
		return []any{v}
	}
	param := tmplMap(t, tmplMap(t, d["Parameters"])[name])
	if allowed, ok := param["AllowedValues"]; ok {
		return tmplList(t, allowed)
	}
	return []any{d.resolve(t, v, nil)}
}

// largest returns the largest value a numeric v can take: a parameter's
// MaxValue or the largest of its AllowedValues, else its resolved value.
func (d tmplDoc) largest(t *testing.T, v any) int {
	t.Helper()
	if name, ok := tmplRef(v); ok {
		param := tmplMap(t, tmplMap(t, d["Parameters"])[name])
		if m, ok := param["MaxValue"]; ok {
			return tmplInt(t, m)
		}
		if _, ok := param["AllowedValues"]; !ok {
			t.Fatalf("parameter %s has no MaxValue or AllowedValues: its largest value is unbounded", name)
		}
	}
	largest := 0
	for _, c := range d.choices(t, v) {
		largest = max(largest, tmplInt(t, d.resolve(t, c, nil)))
	}
	return largest
}

func (d tmplDoc) resources(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for id, r := range tmplMap(t, d["Resources"]) {
		out[id] = tmplMap(t, r)
	}
	return out
}

func (d tmplDoc) resource(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := d.resources(t)[id]
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	return r
}

// function returns the one AWS::Serverless::Function.
func (d tmplDoc) function(t *testing.T) map[string]any {
	t.Helper()
	var fns []map[string]any
	for _, r := range d.resources(t) {
		if r["Type"] == "AWS::Serverless::Function" {
			fns = append(fns, r)
		}
	}
	if len(fns) != 1 {
		t.Fatalf("%d AWS::Serverless::Function resources, want 1", len(fns))
	}
	return fns[0]
}

// sqsEvent returns the function's one SQS event.
func (d tmplDoc) sqsEvent(t *testing.T) map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, e := range tmplMap(t, tmplMap(t, d.function(t)["Properties"])["Events"]) {
		if ev := tmplMap(t, e); ev["Type"] == "SQS" {
			evs = append(evs, ev)
		}
	}
	if len(evs) != 1 {
		t.Fatalf("function has %d SQS events, want 1", len(evs))
	}
	return evs[0]
}

// queue returns the queue the function's SQS event reads.
func (d tmplDoc) queue(t *testing.T) (string, map[string]any) {
	t.Helper()
	ev := tmplMap(t, d.sqsEvent(t)["Properties"])
	id, ok := tmplGetAtt(ev["Queue"], "Arn")
	if !ok {
		t.Fatalf("SQS event Queue = %v, want !GetAtt <queue>.Arn", ev["Queue"])
	}
	return id, d.resource(t, id)
}

// deadLetterQueue returns the target of queue's RedrivePolicy.
func (d tmplDoc) deadLetterQueue(t *testing.T, queue map[string]any) (string, map[string]any) {
	t.Helper()
	redrive, ok := tmplMap(t, queue["Properties"])["RedrivePolicy"]
	if !ok {
		t.Fatal("the function's queue has no RedrivePolicy: failing messages would be retried until they expire")
	}
	target := tmplMap(t, redrive)["deadLetterTargetArn"]
	id, ok := tmplGetAtt(target, "Arn")
	if !ok {
		t.Fatalf("deadLetterTargetArn = %v, want !GetAtt <queue>.Arn", target)
	}
	return id, d.resource(t, id)
}

// providerKeySecret returns the secret the function's
// PROVIDER_API_KEY_SECRET names.
func (d tmplDoc) providerKeySecret(t *testing.T) (string, map[string]any) {
	t.Helper()
	vars := tmplMap(t, tmplMap(t, tmplMap(t, d.function(t)["Properties"])["Environment"])["Variables"])
	id, ok := tmplRef(vars["PROVIDER_API_KEY_SECRET"])
	if !ok {
		t.Fatalf("PROVIDER_API_KEY_SECRET = %v, want !Ref <secret>", vars["PROVIDER_API_KEY_SECRET"])
	}
	return id, d.resource(t, id)
}

// claimTable returns the table the function's CLAIM_TABLE names.
func (d tmplDoc) claimTable(t *testing.T) (string, map[string]any) {
	t.Helper()
	vars := tmplMap(t, tmplMap(t, tmplMap(t, d.function(t)["Properties"])["Environment"])["Variables"])
	id, ok := tmplRef(vars["CLAIM_TABLE"])
	if !ok {
		t.Fatalf("CLAIM_TABLE = %v, want !Ref <table>", vars["CLAIM_TABLE"])
	}
	return id, d.resource(t, id)
}

// tmplRef returns the name in {"Ref": name}.
func tmplRef(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	s, ok := m["Ref"].(string)
	return s, ok
}

// tmplGetAtt returns the resource in {"Fn::GetAtt": [resource, attr]}.
func tmplGetAtt(v any, attr string) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	l, ok := m["Fn::GetAtt"].([]any)
	if !ok || len(l) != 2 || l[1] != attr {
		return "", false
	}
	s, ok := l[0].(string)
	return s, ok
}

// tmplFind returns the path of the first key or string in v that contains
// s, or "".
func tmplFind(v any, s string) string {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			if strings.Contains(k, s) {
				return k
			}
			if p := tmplFind(c, s); p != "" {
				return k + "." + p
			}
		}
	case []any:
		for i, c := range v {
			if p := tmplFind(c, s); p != "" {
				return strconv.Itoa(i) + "." + p
			}
		}
	case string:
		if strings.Contains(v, s) {
			return "(" + v + ")"
		}
	}
	return ""
}

// tmplOneOrMore returns v as a list: IAM's Action and Resource are a value
// or a list of values.
func tmplOneOrMore(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func tmplMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("got %T %v, want a mapping", v, v)
	}
	return m
}

func tmplList(t *testing.T, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("got %T %v, want a list", v, v)
	}
	return l
}

func tmplString(t *testing.T, v any) string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("got %T %v, want a string", v, v)
	}
	return s
}

func tmplBool(t *testing.T, v any) bool {
	t.Helper()
	switch v := v.(type) {
	case bool:
		return v
	case string: // CloudFormation accepts "true"
		b, err := strconv.ParseBool(v)
		if err != nil {
			t.Fatalf("got %q, want a boolean", v)
		}
		return b
	}
	t.Fatalf("got %T %v, want a boolean", v, v)
	return false
}

// tmplInt returns a whole number written as a YAML number or a string.
func tmplInt(t *testing.T, v any) int {
	t.Helper()
	switch v := v.(type) {
	case int:
		return v
	case string:
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("got %q, want a whole number", v)
		}
		return n
	}
	t.Fatalf("got %T %v, want a whole number", v, v)
	return 0
}

// tmplSeconds returns a number of seconds as a duration.
func tmplSeconds(t *testing.T, v any) time.Duration {
	t.Helper()
	return time.Duration(tmplInt(t, v)) * time.Second
}

// tmplKey returns a mapping key: a string, or a number written as one.
func tmplKey(t *testing.T, v any) string {
	t.Helper()
	if s, ok := v.(string); ok {
		return s
	}
	return strconv.Itoa(tmplInt(t, v))
}
