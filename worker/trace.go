package worker

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Tracing. With Config.TracerProvider (or LambdaConfig.TracerProvider) set,
// each message is one span, SpanMessage, from the start of its processing
// to its disposition (ack, retry, defer, dead-letter, leave), with a child
// span for each step: SpanAcquire, SpanHandle (the handler's context
// carries it, so the handler's own spans are its children) and
// SpanComplete. A message whose attributes carry a W3C trace context
// (TraceParentAttribute, and "tracestate") continues that trace: the
// producer's span is the message span's parent. Without one, an X-Ray trace
// header in SQS's AWSTraceHeader system attribute is the parent. Without a TracerProvider no
// span is made.
const (
	SpanMessage  = "claimfirst.message"
	SpanAcquire  = "claimfirst.acquire"
	SpanHandle   = "claimfirst.handle"
	SpanComplete = "claimfirst.complete"

	// TraceParentAttribute is the message attribute a producer sets to the
	// W3C traceparent of the span that sent the message.
	TraceParentAttribute = "traceparent"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/claimfirst/claimfirst/worker"

// The attributes of the worker's spans.
const (
	attrMessageID  = attribute.Key("messaging.message.id")
	attrSystem     = attribute.Key("messaging.system")
	attrReceive    = attribute.Key("messaging.sqs.receive_count")
	attrKey        = attribute.Key("claimfirst.idempotency_key")
	attrToken      = attribute.Key("claimfirst.token")
	attrAction     = attribute.Key("claimfirst.action")
	attrOutcome    = attribute.Key("claimfirst.acquire.outcome")
	attrDeadLetter = attribute.Key("claimfirst.dead_letter_reason")
	attrLeaseLost  = attribute.Key("claimfirst.lease_lost")
	attrDependency = attribute.Key("claimfirst.dependency")
)

// tracePropagator reads a message's W3C trace context.
var tracePropagator = propagation.TraceContext{}

// newTracer returns tp's tracer for the worker, or nil (no spans) for a nil tp.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// noSpan is the span of a processor without a tracer: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// span starts a child span of ctx's, or none without a tracer.
func (p *processor) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if p.tracer == nil {
		return ctx, noSpan
	}
	return p.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// startMessage starts m's span, a child of the trace context m's attributes
// carry, if any.
func (p *processor) startMessage(ctx context.Context, m *Message) (context.Context, trace.Span) {
	if p.tracer == nil {
		return ctx, noSpan
	}
	if len(m.Attributes) > 0 {
		ctx = tracePropagator.Extract(ctx, propagation.MapCarrier(m.Attributes))
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && m.AWSTraceHeader != "" {
		if sc, ok := xrayParent(m.AWSTraceHeader); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return p.tracer.Start(ctx, SpanMessage, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attrSystem.String("aws_sqs"), attrMessageID.String(m.ID), attrReceive.Int(m.ReceiveCount),
	))
}

// xrayParent reads an X-Ray trace header (SQS's AWSTraceHeader system
// attribute): "Root=1-{8 hex}-{24 hex};Parent={16 hex};Sampled=1". The
// trace id is the root's 32 hex digits, the parent span id the Parent's.
func xrayParent(h string) (trace.SpanContext, bool) {
	var root, parent, sampled string
	for _, part := range strings.Split(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Root":
			root = v
		case "Parent":
			parent = v
		case "Sampled":
			sampled = v
		}
	}
	fields := strings.Split(root, "-")
	if len(fields) != 3 || fields[0] != "1" || len(fields[1]) != 8 || len(fields[2]) != 24 {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(fields[1] + fields[2])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(parent)
	if err != nil {
		return trace.SpanContext{}, false
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}
	if sampled == "1" {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return trace.NewSpanContext(cfg), true
}

// endMessage ends m's span with its disposition.
func endMessage(span trace.Span, m *Message, d disposition) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrAction.String(d.action.String()))
	if m.Key != "" {
		span.SetAttributes(attrKey.String(m.Key))
	}
	if m.Token > 0 {
		span.SetAttributes(attrToken.Int64(m.Token))
	}
	if d.action == actDeadLetter {
		span.SetAttributes(attrDeadLetter.String(d.reason))
		span.SetStatus(codes.Error, "dead-lettered: "+d.reason)
	}
	span.End()
}

// endAcquire ends an acquire span with its outcome.
func endAcquire(span trace.Span, outcome claimstore.Outcome, token int64, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attrOutcome.String(outcome.String()), attrToken.Int64(token))
		}
	}
	span.End()
}

// endStep ends a handle or complete span; lost says the lease was lost.
func endStep(span trace.Span, err error, lost bool) {
	if span.IsRecording() {
		if lost {
			span.SetAttributes(attrLeaseLost.Bool(true))
			span.SetStatus(codes.Error, "lease lost")
		}
		if err != nil {
			if dep := dependencyOf(err); dep != "" {
				span.SetAttributes(attrDependency.String(dep))
			}
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
