package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
)

// TestTracingSettings: tracing is off unless the OTEL_* settings turn it
// on, OTEL_SDK_DISABLED wins, and a setting it cannot honour is a usage
// error naming it.
func TestTracingSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{"nothing set", nil, false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"other exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, `OTEL_TRACES_EXPORTER "zipkin": want otlp or none`},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false,
			`OTEL_EXPORTER_OTLP_PROTOCOL "grpc": only http/protobuf is supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr, err := newTracing(context.Background(), func(k string) string { return c.env[k] }, false)
			if c.err != "" {
				var ue usageError
				if !errors.As(err, &ue) || err.Error() != c.err {
					t.Fatalf("err = %v, want usage error %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.shutdown(slog.New(slog.DiscardHandler))
			if on := tr.TracerProvider() != nil; on != c.on {
				t.Errorf("tracing on = %v, want %v", on, c.on)
			}
		})
	}
}
