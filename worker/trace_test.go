package worker

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedFixture is a fixture whose processor records its spans.
func tracedFixture(t *testing.T, h Handler) (*fixture, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(h)
	f.p.tracer = newTracer(tp)
	return f, rec
}

// spansByName returns the ended spans by name, failing on a name seen twice.
func spansByName(t *testing.T, rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, ok := out[s.Name()]; ok {
			t.Errorf("span %s ended twice", s.Name())
		}
		out[s.Name()] = s
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTraceParentFromMessage: a message carrying a producer's traceparent
// is processed in one span whose parent is the producer's span, with the
// acquire, handle and complete spans as its children; the handler runs in
// the handle span's context.
func TestTraceParentFromMessage(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	var inHandler trace.SpanContext
	f, rec := tracedFixture(t, HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
		inHandler = trace.SpanContextFromContext(ctx)
		return "ch_1", nil
	}))
	m := &Message{ID: "m1", Body: "{}", Attempt: 1, Attributes: map[string]string{
		TraceParentAttribute: "00-" + traceID + "-" + spanID + "-01",
		"tracestate":         "vendor=x",
	}}
	if d := f.p.process(context.Background(), m, f.lease()); d.Action != Ack {
		t.Fatalf("action %s, want ack", d.Action)
	}

	spans := spansByName(t, rec)
	msg, ok := spans[SpanMessage]
	if !ok {
		t.Fatalf("no %s span; spans: %v", SpanMessage, spans)
	}
	if got := msg.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("message span trace %s, want the producer's %s", got, traceID)
	}
	if got := msg.Parent(); !got.IsRemote() || got.SpanID().String() != spanID {
		t.Errorf("message span parent %s (remote %v), want the producer's span %s", got.SpanID(), got.IsRemote(), spanID)
	}
	if got := msg.SpanContext().TraceState().Get("vendor"); got != "x" {
		t.Errorf("tracestate vendor = %q, want x", got)
	}
	if msg.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("message span kind %s, want consumer", msg.SpanKind())
	}
	for key, want := range map[attribute.Key]string{attrMessageID: "m1", attrAction: "ack", attrKey: "m1"} {
		if v, ok := spanAttr(msg, key); !ok || v.AsString() != want {
			t.Errorf("message span %s = %v, want %q", key, v.String(), want)
		}
	}
	for _, name := range []string{SpanAcquire, SpanHandle, SpanComplete} {
		s, ok := spans[name]
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		if s.Parent().SpanID() != msg.SpanContext().SpanID() || s.SpanContext().TraceID() != msg.SpanContext().TraceID() {
			t.Errorf("%s span's parent is %s, want the message span %s", name, s.Parent().SpanID(), msg.SpanContext().SpanID())
		}
		if s.Status().Code == codes.Error {
			t.Errorf("%s span status %v", name, s.Status())
		}
	}
	if v, _ := spanAttr(spans[SpanAcquire], attrOutcome); v.AsString() != "acquired" {
		t.Errorf("acquire outcome %q, want acquired", v.AsString())
	}
	if h := spans[SpanHandle]; h != nil && inHandler.SpanID() != h.SpanContext().SpanID() {
		t.Errorf("the handler ran in span %s, want the handle span %s", inHandler.SpanID(), h.SpanContext().SpanID())
	}
}

// TestTraceOutcomes: without a traceparent the message span starts a trace;
// a duplicate has only an acquire child; a permanent failure marks the
// message span as an error with the dead-letter reason.
func TestTraceOutcomes(t *testing.T) {
	t.Parallel()
	f, rec := tracedFixture(t, HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		if m.Body == "bad" {
			return "", Permanentf("no such account")
		}
		return "ok", nil
	}))
	ctx := context.Background()
	f.p.process(ctx, &Message{ID: "a", Body: "{}", Attempt: 1}, f.lease())
	spans := spansByName(t, rec)
	if msg := spans[SpanMessage]; msg == nil || msg.Parent().IsValid() {
		t.Errorf("message span without traceparent has parent %v, want a new trace", msg.Parent())
	}

	rec.Reset()
	f.p.process(ctx, &Message{ID: "a", Body: "{}", Attempt: 2}, f.lease())
	spans = spansByName(t, rec)
	if len(spans) != 2 || spans[SpanAcquire] == nil {
		t.Errorf("duplicate: spans %v, want the message and its acquire", spans)
	}
	if v, _ := spanAttr(spans[SpanAcquire], attrOutcome); v.AsString() != "duplicate" {
		t.Errorf("duplicate: acquire outcome %q", v.AsString())
	}

	rec.Reset()
	f.p.process(ctx, &Message{ID: "b", Body: "bad", Attempt: 1}, f.lease())
	spans = spansByName(t, rec)
	msg := spans[SpanMessage]
	if msg == nil || msg.Status().Code != codes.Error {
		t.Fatalf("permanent failure: message span %v, want status error", msg)
	}
	if v, _ := spanAttr(msg, attrAction); v.AsString() != "dead_letter" {
		t.Errorf("permanent failure: action %q, want dead_letter", v.AsString())
	}
	if v, _ := spanAttr(msg, attrDeadLetter); v.AsString() != "permanent: no such account" {
		t.Errorf("permanent failure: reason %q", v.AsString())
	}
	if h := spans[SpanHandle]; h == nil || h.Status().Code != codes.Error {
		t.Errorf("permanent failure: handle span %v, want status error", h)
	}
}

// TestNoTracerNoSpans: a processor without a TracerProvider makes no spans
// and the handler's context carries none.
func TestNoTracerNoSpans(t *testing.T) {
	t.Parallel()
	var sc trace.SpanContext
	f := newFixture(HandlerFunc(func(ctx context.Context, _ *Message) (string, error) {
		sc = trace.SpanContextFromContext(ctx)
		return "ok", nil
	}))
	f.p.process(context.Background(), &Message{ID: "a", Body: "{}", Attempt: 1,
		Attributes: map[string]string{TraceParentAttribute: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}, f.lease())
	if sc.IsValid() {
		t.Errorf("handler context carries span %v without a tracer", sc)
	}
}
