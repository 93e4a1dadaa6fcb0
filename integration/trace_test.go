package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/claimfirst/claimfirst/worker"
)

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it keeps every
// span it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.NotFound(w, req)
			return
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var in coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &in); err != nil {
			t.Errorf("OTLP request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// TestTracing: with an OTLP endpoint set, `worker run` exports a span per
// message whose parent is the producer's span from the message's
// traceparent attribute, with acquire, handle and complete as its children
// and the AWS SDK's calls traced inside them; without OTEL_* settings it
// exports nothing.
func TestTracing(t *testing.T) {
	t.Parallel()
	const (
		traceID = "5b8efff798038103d269b633813fc60c"
		spanID  = "eee19b7ec3c1b174"
	)
	rec := newOTLPReceiver(t)
	e := newEnv(t, envOptions{})
	body, _ := json.Marshal(payments("traced", 1)[0])
	_, err := e.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(e.queueURL), MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			worker.TraceParentAttribute: {DataType: aws.String("String"), StringValue: aws.String("00-" + traceID + "-" + spanID + "-01")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := e.start("traced", workerOptions{extraEnv: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100", // ms
		"OTEL_SERVICE_NAME=claimfirst-test",
	}})
	e.waitDrained(time.Minute)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}

	byID := map[string]*tracepb.Span{}
	var msg *tracepb.Span
	for _, s := range rec.received() {
		byID[hex.EncodeToString(s.SpanId)] = s
		if s.Name == worker.SpanMessage {
			if msg != nil {
				t.Errorf("two %s spans for one message", worker.SpanMessage)
			}
			msg = s
		}
	}
	if msg == nil {
		t.Fatalf("no %s span among %d exported", worker.SpanMessage, len(byID))
	}
	if got := hex.EncodeToString(msg.TraceId); got != traceID {
		t.Errorf("message span trace %s, want the producer's %s", got, traceID)
	}
	if got := hex.EncodeToString(msg.ParentSpanId); got != spanID {
		t.Errorf("message span parent %s, want the producer's span %s", got, spanID)
	}
	// Each step is a child of the message span, and every AWS call made
	// for the message is inside the message span's tree.
	msgID := hex.EncodeToString(msg.SpanId)
	children := map[string]bool{}
	awsCalls := 0
	for id, s := range byID {
		if hex.EncodeToString(s.TraceId) != traceID || id == msgID {
			continue
		}
		if hex.EncodeToString(s.ParentSpanId) == msgID {
			children[s.Name] = true
		}
		for _, kv := range s.Attributes {
			if (kv.Key == "rpc.system.name" || kv.Key == "rpc.system") && kv.Value.GetStringValue() == "aws-api" {
				awsCalls++
				if !under(byID, s, msgID) {
					t.Errorf("AWS call span %s is not inside the message span", s.Name)
				}
			}
		}
	}
	for _, name := range []string{worker.SpanAcquire, worker.SpanHandle, worker.SpanComplete} {
		if !children[name] {
			t.Errorf("no %s child of the message span (children: %v)", name, children)
		}
	}
	if awsCalls < 2 {
		t.Errorf("%d AWS SDK call spans in the message's trace, want at least the claim's two writes", awsCalls)
	}
}

// under reports whether s descends from the span ancestor.
func under(byID map[string]*tracepb.Span, s *tracepb.Span, ancestor string) bool {
	for range 10 {
		p := hex.EncodeToString(s.ParentSpanId)
		if p == ancestor {
			return true
		}
		if s = byID[p]; s == nil {
			return false
		}
	}
	return false
}

// TestLambdaTracing: the Lambda bootstrap exports each invocation's spans
// before it answers (the process is frozen between invocations, so a timer
// would not run): when the response arrives the record's span is there,
// parented on the record's traceparent attribute.
func TestLambdaTracing(t *testing.T) {
	t.Parallel()
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	rie := lambdaRIEBinary(t)
	rec := newOTLPReceiver(t)
	e := newEnv(t, envOptions{visibility: 6 * lambdaFunctionTimeout * time.Second})
	fn := lambdaStart(t, rie, lambdaBuildBootstrap(t), []string{
		"QUEUE_URL=" + e.queueURL,
		"CLAIM_TABLE=" + e.table,
		"PROVIDER_URL=" + e.provURL,
		"LOG_LEVEL=info",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.srv.URL,
	})
	ev := e.lambdaEvent([]string{lambdaBody(t, payments("lambdatrace", 1)[0])})
	ev.Records[0].MessageAttributes = map[string]events.SQSMessageAttribute{
		worker.TraceParentAttribute: {DataType: "String", StringValue: aws.String("00-" + traceID + "-" + spanID + "-01")},
	}
	resp, raw := fn.invoke(t, ev)
	if failed := lambdaFailures(t, resp); len(failed) != 0 {
		t.Fatalf("response %s: failures %q", raw, failed)
	}
	var msg *tracepb.Span
	names := map[string]bool{}
	for _, s := range rec.received() { // no waiting: the spans came before the response
		names[s.Name] = true
		if s.Name == worker.SpanMessage {
			msg = s
		}
	}
	if msg == nil {
		t.Fatalf("no %s span exported by the time the invocation answered (spans: %v)", worker.SpanMessage, names)
	}
	if got, parent := hex.EncodeToString(msg.TraceId), hex.EncodeToString(msg.ParentSpanId); got != traceID || parent != spanID {
		t.Errorf("message span trace %s parent %s, want %s %s", got, parent, traceID, spanID)
	}
	for _, name := range []string{worker.SpanAcquire, worker.SpanHandle, worker.SpanComplete} {
		if !names[name] {
			t.Errorf("no %s span (spans: %v)", name, names)
		}
	}
	fn.checkLog(t)
}
