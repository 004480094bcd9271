package cli_test

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	metricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an OTLP/HTTP receiver: it keeps the span and metric
// names the exporters send.
type otlpCollector struct {
	mu      sync.Mutex
	spans   []string
	traces  []string // the spans' trace ids, in hex
	metrics []string
	service string
}

// hasTrace reports whether a span of trace id arrived.
func (c *otlpCollector) hasTrace(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.traces, id)
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r.URL.Path {
	case "/v1/traces":
		var req tracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					c.service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, s.Name)
					c.traces = append(c.traces, hex.EncodeToString(s.TraceId))
				}
			}
		}
		out, _ := proto.Marshal(&tracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	case "/v1/metrics":
		var req metricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					c.metrics = append(c.metrics, m.Name)
				}
			}
		}
		out, _ := proto.Marshal(&metricpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	default:
		http.NotFound(w, r)
	}
}

// TestChatExportsOTLP: with the standard OTEL_EXPORTER_OTLP_ENDPOINT set,
// chat exports its run's spans and metrics over OTLP/HTTP before it exits,
// as the service OTEL_SERVICE_NAME names.
func TestChatExportsOTLP(t *testing.T) {
	bin := needBinary(t)
	var col otlpCollector
	srv := httptest.NewServer(&col)
	defer srv.Close()
	code, out, errOut := runBinEnv(t, bin, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_SERVICE_NAME=agents-test"},
		"chat", "--offline", "--storage", "memory:", "get_account account_id=42")
	if code != 0 || !strings.Contains(out, "get_account") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, want := range []string{"invoke_agent default", "step", "chat fake/echo", "execute_tool get_account"} {
		if !slices.Contains(col.spans, want) {
			t.Errorf("no span %q exported: %q", want, col.spans)
		}
	}
	for _, want := range []string{"agentic.runs", "agentic.steps", "gen_ai.client.token.usage", "agentic.tool.calls"} {
		if !slices.Contains(col.metrics, want) {
			t.Errorf("no metric %q exported: %q", want, col.metrics)
		}
	}
	if col.service != "agents-test" {
		t.Errorf("service.name %q, want agents-test", col.service)
	}
}
