package sqsworker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// emfLine is one EMF line as CloudWatch reads it.
type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
	fields map[string]any
}

// parseEMF parses out's lines and checks each against the EMF
// specification's rules: a directive names its namespace, its dimension
// sets name fields of the line holding strings, each metric names a field
// holding a number. It returns each line's metric values by name.
func parseEMF(t *testing.T, out string) []map[string]float64 {
	t.Helper()
	var lines []map[string]float64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l emfLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("EMF line %q: %v", sc.Text(), err)
		}
		if err := json.Unmarshal(sc.Bytes(), &l.fields); err != nil {
			t.Fatal(err)
		}
		if l.AWS.Timestamp <= 0 {
			t.Errorf("EMF line %q: no _aws.Timestamp", sc.Text())
		}
		if len(l.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("EMF line %q: %d directives, want 1", sc.Text(), len(l.AWS.CloudWatchMetrics))
		}
		d := l.AWS.CloudWatchMetrics[0]
		if d.Namespace != EMFNamespace {
			t.Errorf("namespace %q, want %q", d.Namespace, EMFNamespace)
		}
		if len(d.Dimensions) == 0 {
			t.Errorf("EMF line %q: no dimension sets", sc.Text())
		}
		for _, set := range d.Dimensions {
			for _, dim := range set {
				if s, ok := l.fields[dim].(string); !ok || s == "" {
					t.Errorf("dimension %s = %v, want a non-empty string field", dim, l.fields[dim])
				}
			}
		}
		values := map[string]float64{}
		for _, m := range d.Metrics {
			v, ok := l.fields[m.Name].(float64)
			if !ok {
				t.Errorf("metric %s = %v, want a number field", m.Name, l.fields[m.Name])
			}
			if m.Unit != "Count" {
				t.Errorf("metric %s unit %q, want Count", m.Name, m.Unit)
			}
			values[m.Name] = v
		}
		lines = append(lines, values)
	}
	return lines
}

// TestLambdaEMF: each invocation writes one EMF line whose metrics are the
// Prometheus outcome names, every one of them, with that invocation's counts.
func TestLambdaEMF(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	// The clock runs (a lease ends at the context's deadline, in real
	// time), stepping a second a call so the Timestamp is known.
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	metrics := worker.NewMetrics(nil)
	l, err := NewLambda(context.Background(), LambdaConfig{
		EMF: &out,
		Protocol: worker.Protocol{
			Store: memory.New(memory.Config{}), Retention: time.Hour,
			Logger: slog.New(slog.DiscardHandler), Metrics: metrics,
			Now: clock,
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				if m.Body == "fail" {
					return "", errors.New("downstream unavailable")
				}
				return "done", nil
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	batch := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "ok"}, {MessageId: "m2", Body: "fail"}}}
	var stamps []int64
	for range 2 {
		stamps = append(stamps, now.Add(1000))
		if _, err := l.Handle(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}

	lines := parseEMF(t, out.String())
	if len(lines) != 2 {
		t.Fatalf("%d EMF lines, want 2 (one per invocation):\n%s", len(lines), out.String())
	}
	want := []map[worker.Outcome]float64{
		{worker.OutcomeAcquired: 2, worker.OutcomeCompleted: 1, worker.OutcomeReleased: 1},
		{worker.OutcomeAcquired: 1, worker.OutcomeDuplicate: 1, worker.OutcomeReleased: 1},
	}
	for i, got := range lines {
		names := make([]string, 0, len(got))
		for name, v := range got {
			names = append(names, name)
			if v != want[i][worker.Outcome(name)] {
				t.Errorf("invocation %d: %s = %v, want %v", i+1, name, v, want[i][worker.Outcome(name)])
			}
		}
		slices.Sort(names)
		all := make([]string, len(worker.Outcomes()))
		for k, o := range worker.Outcomes() {
			all[k] = string(o)
		}
		if slices.Sort(all); !slices.Equal(names, all) {
			t.Errorf("invocation %d: metrics %v, want every outcome %v", i+1, names, all)
		}
	}
	// The lines add up to the Prometheus counters.
	for _, o := range worker.Outcomes() {
		if sum := lines[0][string(o)] + lines[1][string(o)]; sum != float64(metrics.Count(o)) {
			t.Errorf("%s: lines add up to %v, counter is %d", o, sum, metrics.Count(o))
		}
	}
	for i, raw := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var l emfLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		if l.AWS.Timestamp != stamps[i] {
			t.Errorf("invocation %d: Timestamp %d, want %d (the clock, in ms)", i+1, l.AWS.Timestamp, stamps[i])
		}
	}
}

// TestEMFDimension: with a function name, the line's one dimension set is
// FunctionName, carried as a field; without, the set is empty.
func TestEMFDimension(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{"claimfirst-Function-abc", ""} {
		var out bytes.Buffer
		m := worker.NewMetrics(nil)
		m.Record(slog.New(slog.DiscardHandler), slog.LevelInfo, worker.OutcomeLeaseLost, "lease lost")
		if err := newEMF(&out, m, fn, time.Now).flush(); err != nil {
			t.Fatal(err)
		}
		var l emfLine
		if err := json.Unmarshal(out.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out.Bytes(), &l.fields); err != nil {
			t.Fatal(err)
		}
		want := [][]string{{}}
		if fn != "" {
			want = [][]string{{EMFDimension}}
		}
		if got := l.AWS.CloudWatchMetrics[0].Dimensions; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("function %q: Dimensions %v, want %v", fn, got, want)
		}
		if fn != "" && l.fields[EMFDimension] != fn {
			t.Errorf("function %q: %s field = %v", fn, EMFDimension, l.fields[EMFDimension])
		}
		if got := parseEMF(t, out.String()); len(got) != 1 || got[0][string(worker.OutcomeLeaseLost)] != 1 {
			t.Errorf("function %q: values %v, want lease_lost 1", fn, got)
		}
	}
}
