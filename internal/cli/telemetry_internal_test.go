package cli

import (
	"context"
	"testing"
)

// TestOtelFromEnv: the standard variables decide the telemetry: none
// without an endpoint, none with OTEL_SDK_DISABLED=true even with one;
// with one, the content of calls recorded only with
// AGENTIC_OTEL_RECORD_CONTENT=true.
func TestOtelFromEnv(t *testing.T) {
	ctx := context.Background()
	envOf := func(vars map[string]string) Env {
		return Env{Getenv: func(k string) string { return vars[k] }}
	}
	const endpoint = "http://127.0.0.1:4318"
	for _, c := range []struct {
		name    string
		vars    map[string]string
		on      bool
		content bool
	}{
		{"no endpoint", map[string]string{}, false, false},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "TRUE"}, false, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, false},
		{"traces only, with content", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "AGENTIC_OTEL_RECORD_CONTENT": "true"}, true, true},
	} {
		tel, shutdown, err := otelFromEnv(ctx, envOf(c.vars))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (tel != nil) != c.on || tel != nil && tel.RecordContent != c.content {
			t.Errorf("%s: telemetry %+v, want on %v, content %v", c.name, tel, c.on, c.content)
		}
		if c.name == "traces only, with content" && (tel.TracerProvider == nil || tel.MeterProvider != nil) {
			t.Errorf("%s: tracer %v, meter %v; want traces alone", c.name, tel.TracerProvider, tel.MeterProvider)
		}
		// (The exporters find no collector: what they flush fails.)
		_ = shutdown(ctx)
	}
}
