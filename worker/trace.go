package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Tracing. With Protocol.TracerProvider set,
// each message is one span, SpanMessage, from the start of its processing
// to its disposition (ack, retry, defer, dead-letter, leave), with a child
// span for each step: SpanAcquire, SpanHandle (the handler's context
// carries it, so the handler's own spans are its children) and
// SpanComplete. A message whose attributes carry a W3C trace context
// (TraceParentAttribute, and "tracestate") continues that trace: the
// producer's span is the message span's parent. Without one, the remote
// span context the transport put in Process's context is the parent (the
// SQS transports: the X-Ray trace header in SQS's AWSTraceHeader system
// attribute). Without a TracerProvider no span is made.
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
	attrAttempt    = attribute.Key("claimfirst.attempt")
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
	return p.tracer.Start(ctx, SpanMessage, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attrSystem.String(p.system), attrMessageID.String(m.ID), attrAttempt.Int(m.Attempt),
	))
}

// endMessage ends m's span with its disposition.
func endMessage(span trace.Span, m *Message, d Disposition) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrAction.String(d.Action.String()))
	if m.Key != "" {
		span.SetAttributes(attrKey.String(m.Key))
	}
	if m.Token > 0 {
		span.SetAttributes(attrToken.Int64(m.Token))
	}
	if d.Action == DeadLetter {
		span.SetAttributes(attrDeadLetter.String(d.Reason))
		span.SetStatus(codes.Error, "dead-lettered: "+d.Reason)
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
