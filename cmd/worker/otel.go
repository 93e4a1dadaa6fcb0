package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimfirst/claimfirst/internal/awstrace"
)

// defaultServiceName names the worker's traces unless OTEL_SERVICE_NAME does.
const defaultServiceName = "claimfirst-worker"

// tracing is the OpenTelemetry tracing the standard OTEL_* settings ask
// for. It is off unless they turn it on: OTEL_TRACES_EXPORTER=otlp, or an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with OTEL_TRACES_EXPORTER unset; and
// OTEL_SDK_DISABLED=true turns it off whatever else is set. Spans go over
// OTLP/HTTP (http/protobuf); the exporter, the sampler (OTEL_TRACES_SAMPLER)
// and the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read their
// own OTEL_* settings as the SDK defines them.
type tracing struct {
	provider *sdktrace.TracerProvider // nil: off
}

// newTracing reads the OTEL_* settings. A setting it cannot honour is a
// usage error naming it. OpenTelemetry's own reports go to log, without
// the values they carry (installOTelLogging).
func newTracing(ctx context.Context, getenv func(string) string, lambda bool, log *slog.Logger) (*tracing, error) {
	installOTelLogging(log)
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return &tracing{}, nil
	}
	switch exp := getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return &tracing{}, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return &tracing{}, nil
		}
	case "otlp":
	default:
		return nil, usagef("OTEL_TRACES_EXPORTER %q: want otlp or none", exp)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, usagef("OTEL_EXPORTER_OTLP_PROTOCOL %q: only http/protobuf is supported", protocol)
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, usagef("OTEL_EXPORTER_OTLP_*: %v", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", defaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, usagef("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	// In Lambda the process is frozen between invocations: spans are
	// exported when each invocation ends (flush), not on a timer.
	batch := []sdktrace.BatchSpanProcessorOption{}
	if lambda {
		batch = append(batch, sdktrace.WithBatchTimeout(time.Hour))
	}
	return &tracing{provider: sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, batch...),
		sdktrace.WithResource(res),
	)}, nil
}

// installOTelLogging routes OpenTelemetry's reports, made through its
// process-wide logger and error handler, to log. Its logger's key-value
// pairs are never shown, only their keys: it reports a malformed
// OTEL_EXPORTER_OTLP_HEADERS with the header it could not parse, secret and
// all, on stderr by default.
func installOTelLogging(log *slog.Logger) {
	otel.SetLogger(logr.New(otelSink{log: log}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", slog.String("error", err.Error()))
	}))
}

// otelSink is a logr.LogSink onto slog that drops values: see installOTelLogging.
type otelSink struct {
	log  *slog.Logger
	name string
}

func (s otelSink) Init(logr.RuntimeInfo) {}

// Enabled keeps OpenTelemetry's errors and its warnings (level 1); its
// info (4) and debug (8) are off, as with its own default logger.
func (s otelSink) Enabled(level int) bool { return level < 4 }

func (s otelSink) Info(_ int, msg string, kv ...any) { s.report(slog.LevelInfo, nil, msg, kv) }

func (s otelSink) Error(err error, msg string, kv ...any) { s.report(slog.LevelWarn, err, msg, kv) }

func (s otelSink) report(level slog.Level, err error, msg string, kv []any) {
	var keys []string
	for i := 0; i < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			keys = append(keys, k)
		}
	}
	attrs := []slog.Attr{slog.String("otel_message", msg), slog.Any("keys", keys)}
	if strings.Contains(msg, "header") {
		// Its error can quote part of a header value (an escape).
		msg = "OTEL_EXPORTER_OTLP_HEADERS is malformed: a header was left out (its value is not shown)"
	} else if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if s.name != "" {
		attrs = append(attrs, slog.String("otel_logger", s.name))
	}
	s.log.LogAttrs(context.Background(), level, "opentelemetry: "+msg, attrs...)
}

// WithValues drops the values, as report does.
func (s otelSink) WithValues(...any) logr.LogSink { return s }

func (s otelSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return otelSink{log: s.log, name: name}
}

// TracerProvider returns the provider for worker.Protocol, nil when off.
func (t *tracing) TracerProvider() trace.TracerProvider {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider
}

// dynamoDB turns the AWS SDK's own tracing on for a DynamoDB client, into
// the OpenTelemetry provider (pass it to dynamodb.NewFromConfig): a span per
// call, a child of the message's. Nothing when tracing is off.
func (t *tracing) dynamoDB(o *dynamodb.Options) {
	if t != nil && t.provider != nil {
		o.TracerProvider = awstrace.Adapt(t.provider)
	}
}

// sqs is dynamoDB for an SQS client.
func (t *tracing) sqs(o *sqs.Options) {
	if t != nil && t.provider != nil {
		o.TracerProvider = awstrace.Adapt(t.provider)
	}
}

// flush exports the spans ended so far.
func (t *tracing) flush(ctx context.Context, log *slog.Logger) {
	if t == nil || t.provider == nil {
		return
	}
	if err := t.provider.ForceFlush(ctx); err != nil {
		log.Warn("exporting traces failed", slog.Any("error", err))
	}
}

// shutdown exports what is left and stops the exporter, within 5s.
func (t *tracing) shutdown(log *slog.Logger) {
	if t == nil || t.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("stopping trace export failed", slog.Any("error", err))
	}
}
