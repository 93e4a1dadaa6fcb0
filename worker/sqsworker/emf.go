package sqsworker

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/claimfirst/claimfirst/worker"
)

// EMFNamespace is the CloudWatch namespace of the metrics a Lambda writes
// in CloudWatch Embedded Metric Format.
const EMFNamespace = "claimfirst"

// EMFDimension is the dimension of those metrics: the function's name.
const EMFDimension = "FunctionName"

// emf writes the outcome counters as CloudWatch Embedded Metric Format
// (EMF): one JSON object per line, which CloudWatch Logs turns into metrics
// in namespace EMFNamespace, one per outcome, named as the Prometheus
// outcome label (acquired, completed, dead_lettered, lease_lost, ...). Each
// line carries the counts since the line before, so that the lines add up
// to the counters however invocations overlap; Lambda runs one invocation
// at a time per process, so there each line is one invocation's counts.
// Every outcome is written, zeros too, so alarms see data, not gaps.
type emf struct {
	out      io.Writer
	metrics  *worker.Metrics
	function string // the dimension's value; "" writes no dimension
	now      func() time.Time

	mu   sync.Mutex
	last map[worker.Outcome]int64 // counts at the previous line
}

func newEMF(out io.Writer, m *worker.Metrics, function string, now func() time.Time) *emf {
	return &emf{out: out, metrics: m, function: function, now: now, last: map[worker.Outcome]int64{}}
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMeta struct {
	Timestamp         int64          `json:"Timestamp"` // ms since the epoch
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// flush writes one line with the counts since the previous flush. A write
// error is returned; the counts are then not written again.
func (e *emf) flush() error {
	if e == nil || e.out == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	outcomes := worker.Outcomes()
	line := make(map[string]any, len(outcomes)+2)
	dir := emfDirective{Namespace: EMFNamespace, Dimensions: [][]string{{}}, Metrics: make([]emfMetric, 0, len(outcomes))}
	if e.function != "" {
		dir.Dimensions = [][]string{{EMFDimension}}
		line[EMFDimension] = e.function
	}
	for _, o := range outcomes {
		n := e.metrics.Count(o)
		line[string(o)] = n - e.last[o]
		e.last[o] = n
		dir.Metrics = append(dir.Metrics, emfMetric{Name: string(o), Unit: "Count"})
	}
	line["_aws"] = emfMeta{Timestamp: e.now().UnixMilli(), CloudWatchMetrics: []emfDirective{dir}}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = e.out.Write(append(b, '\n')) // one write: lines never interleave
	return err
}

// newLambdaEMF returns the EMF writer for a Lambda: to out (os.Stdout when
// nil, none when io.Discard), with the function's name as the dimension.
func newLambdaEMF(out io.Writer, m *worker.Metrics, now func() time.Time) *emf {
	if out == io.Discard {
		return nil
	}
	if out == nil {
		out = os.Stdout
	}
	return newEMF(out, m, lambdacontext.FunctionName, now)
}

// writeMetrics writes the counts since the last invocation's as an EMF line.
func (l *Lambda) writeMetrics() {
	if err := l.emf.flush(); err != nil {
		l.log.Warn("writing the invocation's metrics failed", slog.Any("error", err))
	}
}
