package integration

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestTemplateAlarms: the four alarms docs/runbook.md explains watch the
// template's own queue pair and function, and notify the AlarmTopicArn
// parameter when it is set and nothing when it is empty.
func TestTemplateAlarms(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	queueID, queue := d.queue(t)
	dlqID, _ := d.deadLetterQueue(t, queue)
	fnID := d.functionID(t)
	params := tmplMap(t, d["Parameters"])

	topic := tmplMap(t, params["AlarmTopicArn"])
	if def, ok := topic["Default"]; !ok || def != "" {
		t.Errorf("AlarmTopicArn Default = %v, want \"\" (alarms without actions unless a topic is given)", topic["Default"])
	}

	type want struct {
		namespace, metric, dimension string
		target                       any // the dimension's value
		statistic                    string
		threshold                    func(any) error
	}
	atLeastOne := func(v any) error {
		if n := tmplNumber(t, v); n != 1 {
			return fmt.Errorf("Threshold %v, want 1 (any at all)", n)
		}
		return nil
	}
	wants := map[string]want{
		"dead-letter queue depth": {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName",
			map[string]any{"Fn::GetAtt": []any{dlqID, "QueueName"}}, "Maximum", atLeastOne},
		"queue's oldest message": {"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName",
			map[string]any{"Fn::GetAtt": []any{queueID, "QueueName"}}, "Maximum", func(v any) error {
				name, ok := tmplRef(v)
				if !ok {
					return fmt.Errorf("Threshold %v, want a !Ref to a parameter", v)
				}
				p, ok := params[name]
				if !ok {
					return fmt.Errorf("Threshold !Ref %s is not a parameter", name)
				}
				if typ := tmplMap(t, p)["Type"]; typ != "Number" {
					return fmt.Errorf("parameter %s has Type %v, want Number", name, typ)
				}
				return nil
			}},
		"function errors": {"AWS/Lambda", "Errors", "FunctionName",
			map[string]any{"Ref": fnID}, "Sum", atLeastOne},
		"function throttles": {"AWS/Lambda", "Throttles", "FunctionName",
			map[string]any{"Ref": fnID}, "Sum", atLeastOne},
	}

	found := map[string]string{}
	for id, r := range d.resources(t) {
		if r["Type"] != "AWS::CloudWatch::Alarm" {
			continue
		}
		props := tmplMap(t, r["Properties"])
		var what string
		for w, a := range wants {
			if props["Namespace"] == a.namespace && props["MetricName"] == a.metric {
				what = w
			}
		}
		if what == "" {
			t.Errorf("%s: alarm on %v %v, which the runbook does not explain", id, props["Namespace"], props["MetricName"])
			continue
		}
		if prev, ok := found[what]; ok {
			t.Errorf("%s and %s both alarm on the %s", prev, id, what)
		}
		found[what] = id
		w := wants[what]

		dims := tmplList(t, props["Dimensions"])
		if len(dims) != 1 {
			t.Errorf("%s: %d dimensions, want 1 (%s)", id, len(dims), w.dimension)
		} else if dim := tmplMap(t, dims[0]); dim["Name"] != w.dimension || !reflect.DeepEqual(dim["Value"], w.target) {
			t.Errorf("%s: dimension %v = %v, want %s = %v", id, dim["Name"], dim["Value"], w.dimension, w.target)
		}
		if got := props["Statistic"]; got != w.statistic {
			t.Errorf("%s: Statistic %v, want %s", id, got, w.statistic)
		}
		if got := props["ComparisonOperator"]; got != "GreaterThanOrEqualToThreshold" {
			t.Errorf("%s: ComparisonOperator %v, want GreaterThanOrEqualToThreshold", id, got)
		}
		if err := w.threshold(props["Threshold"]); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		// No data means no messages, no invocations: nothing is wrong.
		if got := props["TreatMissingData"]; got != "notBreaching" {
			t.Errorf("%s: TreatMissingData %v, want notBreaching", id, got)
		}
		for _, prop := range []string{"AlarmActions", "OKActions"} {
			for _, arn := range []string{"", "arn:aws:sns:eu-west-1:123456789012:oncall"} {
				got := d.eval(t, props[prop], map[string]any{"AlarmTopicArn": arn})
				var want any = tmplNoValue
				if arn != "" {
					want = []any{arn}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s with AlarmTopicArn %q = %v, want %v", id, prop, arn, got, want)
				}
			}
		}
	}
	for what := range wants {
		if _, ok := found[what]; !ok {
			t.Errorf("no alarm on the %s", what)
		}
	}
}

// TestTemplateFifoQueue: FifoQueue "false" (the default) deploys standard
// queues; "true" makes both queues FIFO, named with the .fifo suffix SQS
// requires, with content-based deduplication off (two payments may have the
// same body).
func TestTemplateFifoQueue(t *testing.T) {
	t.Parallel()
	d := tmplLoad(t)
	param := tmplMap(t, tmplMap(t, d["Parameters"])["FifoQueue"])
	if param["Default"] != "false" {
		t.Errorf("FifoQueue Default = %v, want \"false\"", param["Default"])
	}
	if allowed := tmplList(t, param["AllowedValues"]); !slices.Equal(allowed, []any{"true", "false"}) {
		t.Errorf("FifoQueue AllowedValues = %v, want [true false]", allowed)
	}
	queueID, queue := d.queue(t)
	dlqID, dlq := d.deadLetterQueue(t, queue)
	for _, fifo := range []string{"false", "true"} {
		params := map[string]any{"FifoQueue": fifo}
		for id, q := range map[string]map[string]any{queueID: queue, dlqID: dlq} {
			props := tmplMap(t, q["Properties"])
			get := func(prop string) any { return d.eval(t, props[prop], params) }
			if fifo == "false" {
				props := []string{"FifoQueue", "ContentBasedDeduplication"}
				if id == dlqID { // the payments queue is named: its dead-letter queue's RedriveAllowPolicy spells it
					props = append(props, "QueueName")
				}
				for _, prop := range props {
					if v := get(prop); v != tmplNoValue {
						t.Errorf("%s with FifoQueue false: %s = %v, want it absent (a standard queue)", id, prop, v)
					}
				}
				continue
			}
			if v := get("FifoQueue"); v != true {
				t.Errorf("%s with FifoQueue true: FifoQueue = %v, want true", id, v)
			}
			if v := get("ContentBasedDeduplication"); v != false {
				t.Errorf("%s with FifoQueue true: ContentBasedDeduplication = %v, want false", id, v)
			}
			name, _ := get("QueueName").(map[string]any)
			sub, _ := name["Fn::Sub"].(string)
			if !strings.HasSuffix(sub, ".fifo") {
				t.Errorf("%s with FifoQueue true: QueueName = %v, want !Sub \"...fifo\"", id, get("QueueName"))
			}
		}
	}
	// A FIFO event source takes at most 10 records and no batching window:
	// a rule refuses other settings before anything is created.
	rule := tmplMap(t, tmplMap(t, d["Rules"])["FifoEventSource"])
	if cond := rule["RuleCondition"]; !reflect.DeepEqual(cond, map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "FifoQueue"}, "true"}}) {
		t.Errorf("rule FifoEventSource: RuleCondition %v, want !Equals [!Ref FifoQueue, \"true\"]", cond)
	}
	refs := map[string]bool{}
	for _, a := range tmplList(t, rule["Assertions"]) {
		for _, p := range []string{"BatchSize", "MaximumBatchingWindowInSeconds"} {
			if tmplFind(tmplMap(t, a)["Assert"], p) != "" {
				refs[p] = true
			}
		}
	}
	for _, p := range []string{"BatchSize", "MaximumBatchingWindowInSeconds"} {
		if !refs[p] {
			t.Errorf("rule FifoEventSource does not check %s", p)
		}
	}
}

// tmplNoValue is what d.eval returns for !Ref AWS::NoValue: the property is
// left out.
const tmplNoValue = "AWS::NoValue"

// eval resolves v as d.resolve does and also evaluates Fn::If on the
// template's conditions (Fn::Equals, Fn::Not, Fn::And, Fn::Or over
// resolved values), recursively through lists and mappings.
func (d tmplDoc) eval(t *testing.T, v any, params map[string]any) any {
	t.Helper()
	if name, ok := tmplRef(v); ok && name == tmplNoValue {
		return tmplNoValue
	}
	v = d.resolve(t, v, params)
	switch v := v.(type) {
	case map[string]any:
		if args, ok := v["Fn::If"]; ok && len(v) == 1 {
			l := tmplList(t, args)
			if len(l) != 3 {
				t.Fatalf("Fn::If %v: want 3 arguments", l)
			}
			if d.condition(t, tmplString(t, l[0]), params) {
				return d.eval(t, l[1], params)
			}
			return d.eval(t, l[2], params)
		}
		out := make(map[string]any, len(v))
		for k, c := range v {
			out[k] = d.eval(t, c, params)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, c := range v {
			out[i] = d.eval(t, c, params)
		}
		return out
	}
	return v
}

// condition evaluates the template's condition name with params.
func (d tmplDoc) condition(t *testing.T, name string, params map[string]any) bool {
	t.Helper()
	c, ok := tmplMap(t, d["Conditions"])[name]
	if !ok {
		t.Fatalf("no condition %s", name)
	}
	return d.truth(t, c, params)
}

func (d tmplDoc) truth(t *testing.T, v any, params map[string]any) bool {
	t.Helper()
	m := tmplMap(t, v)
	if len(m) != 1 {
		t.Fatalf("condition %v: want one function", m)
	}
	for fn, args := range m {
		switch fn {
		case "Condition":
			return d.condition(t, tmplString(t, args), params)
		case "Fn::Equals":
			l := tmplList(t, args)
			if len(l) != 2 {
				t.Fatalf("Fn::Equals %v: want 2 arguments", l)
			}
			return fmt.Sprint(d.eval(t, l[0], params)) == fmt.Sprint(d.eval(t, l[1], params))
		case "Fn::Not":
			l := tmplList(t, args)
			if len(l) != 1 {
				t.Fatalf("Fn::Not %v: want 1 argument", l)
			}
			return !d.truth(t, l[0], params)
		case "Fn::And", "Fn::Or":
			and := fn == "Fn::And"
			for _, c := range tmplList(t, args) {
				if d.truth(t, c, params) != and {
					return !and
				}
			}
			return and
		}
		t.Fatalf("condition function %s is not supported here", fn)
	}
	return false
}

// functionID returns the resource ID of the one AWS::Serverless::Function.
func (d tmplDoc) functionID(t *testing.T) string {
	t.Helper()
	d.function(t) // exactly one
	for id, r := range d.resources(t) {
		if r["Type"] == "AWS::Serverless::Function" {
			return id
		}
	}
	return ""
}

// tmplNumber returns a number written as a YAML number or a string.
func tmplNumber(t *testing.T, v any) float64 {
	t.Helper()
	switch v := v.(type) {
	case int:
		return float64(v)
	case float64:
		return v
	case string:
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil {
			t.Fatalf("got %q, want a number", v)
		}
		return f
	}
	t.Fatalf("got %T %v, want a number", v, v)
	return 0
}
