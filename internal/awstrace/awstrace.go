// Package awstrace connects the AWS SDK's own tracing (smithy-go's tracing
// interfaces, set once as aws.Config.TracerProvider) to an OpenTelemetry
// TracerProvider: one client span per AWS call, named "Service.Operation"
// (e.g. "DynamoDB.PutItem") with the SDK's rpc.* and aws.* attributes, a
// child of the span in the call's context. The SDK's internal steps
// (serializing, signing, resolving the endpoint, the retry loop) are not
// exported as spans, so a call's trace looks as it did under the
// deprecated otelaws middleware.
//
// It does what smithy-go's smithyoteltracing adapter does for those spans;
// that module is not a dependency of this one.
package awstrace

import (
	"context"
	"fmt"

	smithytrace "github.com/aws/smithy-go/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Adapt returns the SDK's TracerProvider backed by tp.
func Adapt(tp trace.TracerProvider) smithytrace.TracerProvider { return provider{tp: tp} }

type provider struct{ tp trace.TracerProvider }

// Tracer implements smithytrace.TracerProvider.
func (p provider) Tracer(scope string, _ ...smithytrace.TracerOption) smithytrace.Tracer {
	return tracer{t: p.tp.Tracer(scope)}
}

type tracer struct{ t trace.Tracer }

// StartSpan implements smithytrace.Tracer: a client span (an AWS call) is
// exported; any other is a step inside one, and is not.
func (t tracer) StartSpan(ctx context.Context, name string, opts ...smithytrace.SpanOption) (context.Context, smithytrace.Span) {
	var o smithytrace.SpanOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.Kind != smithytrace.SpanKindClient {
		return ctx, step{name: name, parent: trace.SpanFromContext(ctx)}
	}
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs(o.Properties.Values())...))
	return ctx, span{name: name, s: s}
}

type span struct {
	name string
	s    trace.Span
}

func (s span) Name() string                     { return s.name }
func (s span) Context() smithytrace.SpanContext { return spanContext(s.s) }
func (s span) SetProperty(k, v any)             { s.s.SetAttributes(attr(k, v)) }
func (s span) End()                             { s.s.End() }

func (s span) AddEvent(name string, opts ...smithytrace.EventOption) {
	var o smithytrace.EventOptions
	for _, opt := range opts {
		opt(&o)
	}
	s.s.AddEvent(name, trace.WithAttributes(attrs(o.Properties.Values())...))
}

func (s span) SetStatus(st smithytrace.SpanStatus) {
	switch st {
	case smithytrace.SpanStatusOK:
		s.s.SetStatus(codes.Ok, "")
	case smithytrace.SpanStatusError:
		s.s.SetStatus(codes.Error, "")
	}
}

// step is an SDK step inside a call: not exported, it reports the call's
// span as its context.
type step struct {
	name   string
	parent trace.Span
}

func (s step) Name() string                              { return s.name }
func (s step) Context() smithytrace.SpanContext          { return spanContext(s.parent) }
func (step) AddEvent(string, ...smithytrace.EventOption) {}
func (step) SetStatus(smithytrace.SpanStatus)            {}
func (step) SetProperty(any, any)                        {}
func (step) End()                                        {}

func spanContext(s trace.Span) smithytrace.SpanContext {
	sc := s.SpanContext()
	if !sc.IsValid() {
		return smithytrace.SpanContext{}
	}
	return smithytrace.SpanContext{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), IsRemote: sc.IsRemote()}
}

func attrs(m map[any]any) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(m))
	for k, v := range m {
		out = append(out, attr(k, v))
	}
	return out
}

func attr(k, v any) attribute.KeyValue {
	key := fmt.Sprint(k)
	switch t := v.(type) {
	case string:
		return attribute.String(key, t)
	case bool:
		return attribute.Bool(key, t)
	case int:
		return attribute.Int(key, t)
	case int64:
		return attribute.Int64(key, t)
	case int32:
		return attribute.Int64(key, int64(t))
	case float64:
		return attribute.Float64(key, t)
	case []string:
		return attribute.StringSlice(key, t)
	default:
		return attribute.String(key, fmt.Sprint(t))
	}
}
