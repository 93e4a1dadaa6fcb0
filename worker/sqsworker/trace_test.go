package sqsworker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestTraceParentFromAWSTraceHeader: without a traceparent attribute, the
// X-Ray header SQS carries in AWSTraceHeader, put in the context by the SQS
// transports, is the message span's parent;
// a traceparent wins over it; a malformed header starts a new trace.
func TestTraceParentFromAWSTraceHeader(t *testing.T) {
	t.Parallel()
	const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	cases := []struct {
		name, header, traceparent, wantTrace, wantParent string
	}{
		{name: "x-ray", header: header, wantTrace: "5759e988bd862e3fe1be46a994272793", wantParent: "53995c3f42cd8ad8"},
		{name: "traceparent wins", header: header, traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			wantTrace: "4bf92f3577b34da6a3ce929d0e0e4736", wantParent: "00f067aa0ba902b7"},
		{name: "malformed", header: "Root=1-xyz;Parent=53995c3f42cd8ad8"},
	}
	for _, tc := range cases {
		rec := tracetest.NewSpanRecorder()
		e, err := worker.NewEngine(worker.Protocol{
			Store: memory.New(memory.Config{}), Retention: time.Hour, Logger: slog.New(slog.DiscardHandler),
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
			Handler:        worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "ok", nil }),
		}, worker.EngineOptions{System: sqsSystem})
		if err != nil {
			t.Fatal(err)
		}
		m := &worker.Message{ID: "m-" + tc.name, Body: "{}", Attempt: 1}
		if tc.traceparent != "" {
			m.Attributes = map[string]string{worker.TraceParentAttribute: tc.traceparent}
		}
		e.Process(withTraceHeader(e, context.Background(), tc.header), m, worker.Hold{Until: time.Now().Add(time.Minute)})
		var msg sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == worker.SpanMessage {
				msg = s
			}
		}
		if msg == nil {
			t.Fatalf("%s: no message span", tc.name)
		}
		if tc.wantTrace == "" {
			if msg.Parent().IsValid() {
				t.Errorf("%s: parent %v, want a new trace", tc.name, msg.Parent())
			}
			continue
		}
		if got := msg.SpanContext().TraceID().String(); got != tc.wantTrace {
			t.Errorf("%s: trace %s, want %s", tc.name, got, tc.wantTrace)
		}
		if got := msg.Parent(); !got.IsRemote() || got.SpanID().String() != tc.wantParent || !got.IsSampled() {
			t.Errorf("%s: parent %s (remote %v, sampled %v), want %s", tc.name, got.SpanID(), got.IsRemote(), got.IsSampled(), tc.wantParent)
		}
	}
}
