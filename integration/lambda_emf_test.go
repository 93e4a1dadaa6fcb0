package integration

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// lambdaEMF returns the CloudWatch Embedded Metric Format lines in a
// function's log: how many, and each metric's total over them. A line is
// one whose JSON object has _aws.CloudWatchMetrics in sqsworker.EMFNamespace.
func lambdaEMF(t *testing.T, log string) (int, map[string]float64) {
	t.Helper()
	n, totals := 0, map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"_aws"`) {
			continue
		}
		var v struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace string
					Metrics   []struct{ Name string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Errorf("EMF line %q: %v", line, err)
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(line, &fields); err != nil {
			t.Fatal(err)
		}
		for _, d := range v.AWS.CloudWatchMetrics {
			if d.Namespace != sqsworker.EMFNamespace {
				continue
			}
			n++
			for _, m := range d.Metrics {
				f, ok := fields[m.Name].(float64)
				if !ok {
					t.Errorf("EMF metric %s = %v, want a number", m.Name, fields[m.Name])
				}
				totals[m.Name] += f
			}
		}
	}
	return n, totals
}

// checkEMF checks that the function wrote one EMF line per invocation and
// that the lines add up to want (outcomes not in want are not checked).
func (f *lambdaFunction) checkEMF(t *testing.T, invocations int, want map[string]float64) {
	t.Helper()
	n, totals := lambdaEMF(t, f.log.String())
	if n != invocations {
		t.Errorf("%d EMF lines in the function's log, want %d (one per invocation)", n, invocations)
	}
	for name, w := range want {
		if totals[name] != w {
			t.Errorf("EMF %s adds up to %v, want %v (all: %v)", name, totals[name], w, totals)
		}
	}
}
