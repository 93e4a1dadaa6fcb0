package awstrace_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/awstrace"
)

// One span per AWS call, named and attributed as otelaws named it, a child
// of the caller's span; none for the SDK's internal steps.
func TestOneClientSpanPerCall(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	client := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.TracerProvider = awstrace.Adapt(tp) })

	ctx, parent := tp.Tracer("test").Start(context.Background(), "message")
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	parent.End()

	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() != "message" {
			calls = append(calls, s)
		}
	}
	if len(calls) != 1 {
		names := []string{}
		for _, s := range calls {
			names = append(names, s.Name())
		}
		t.Fatalf("spans besides the caller's: %v; want one, the call's", names)
	}
	s := calls[0]
	if s.Name() != "DynamoDB.ListTables" || s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q with parent %s; want DynamoDB.ListTables under the caller's span %s", s.Name(), s.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["rpc.system"] != "aws-api" || attrs["rpc.service"] == "" || attrs["rpc.method"] != "ListTables" {
		t.Errorf("attributes %v; want rpc.system aws-api, rpc.service and rpc.method ListTables", attrs)
	}
}
