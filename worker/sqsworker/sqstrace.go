package sqsworker

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/worker"
)

// withTraceHeader returns ctx carrying the X-Ray trace header h (SQS's
// AWSTraceHeader system attribute) as the remote parent of the message's
// span, when e traces and h is one: the engine takes the parent from the
// context it is given; a traceparent message attribute still comes first
// (see worker.SpanMessage).
func withTraceHeader(e *worker.Engine, ctx context.Context, h string) context.Context {
	if !e.Traces() || h == "" {
		return ctx
	}
	if sc, ok := xrayParent(h); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
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
