package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
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
			tr, err := newTracing(context.Background(), func(k string) string { return c.env[k] }, false, slog.New(slog.DiscardHandler))
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

// TestMalformedOTLPHeadersNeverPrint: a malformed OTEL_EXPORTER_OTLP_HEADERS
// (OpenTelemetry reads it from the process environment, and reports what it
// cannot parse through its global logger) shows no header value on stderr.
// The settings are the process's own, so it runs in a child process.
func TestMalformedOTLPHeadersNeverPrint(t *testing.T) {
	t.Parallel()
	const secret = "hdrs3cr3t"
	cmd := exec.Command(os.Args[0], "-test.run=^TestOTLPHeadersChild$")
	cmd.Env = append(os.Environ(), "CLAIMFIRST_OTLP_HEADERS_CHILD=1",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1",
		// A bad escape, a pair without '=', an invalid key: each is reported.
		"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%zz"+secret+",x-api-key:"+secret+",bad key"+secret+"=v")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if strings.Contains(string(out), secret) {
		t.Errorf("stderr shows a header value:\n%s", out)
	}
	if !strings.Contains(string(out), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Errorf("stderr does not say OTEL_EXPORTER_OTLP_HEADERS was malformed:\n%s", out)
	}
}

// TestOTLPHeadersChild is TestMalformedOTLPHeadersNeverPrint's child: it
// sets tracing up from the process environment, as `worker run` does.
func TestOTLPHeadersChild(t *testing.T) {
	if os.Getenv("CLAIMFIRST_OTLP_HEADERS_CHILD") != "1" {
		t.Skip("the child of TestMalformedOTLPHeadersNeverPrint")
	}
	tr, err := newTracing(context.Background(), os.Getenv, false, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tr.shutdown(slog.New(slog.DiscardHandler))
}
