package host_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// attrOf returns the value of a span's attribute key, "" when it has none.
func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// telemetryRun runs, with telemetry on, a session whose first pass fails
// once (a retry), then asks for an allowed tool and one that needs
// approval in the same step; the request is approved, and the run
// answers.
func telemetryRun(t *testing.T, content bool) ([]sdktrace.ReadOnlySpan, metricdata.ResourceMetrics, host.RunResult) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m := hosttest.NewModel(
		hosttest.Reply{Text: "fl", Err: model.ErrStalled},
		hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "lookup", Arguments: `{"q":"secret plans"}`}, {Name: "publish", Arguments: `{"title":"x"}`}}},
		hosttest.Reply{Text: "all done"})
	lookup := host.NewTool(host.ToolSpec{Name: "lookup"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "found", Source: "sha256:abc", Fuel: 4321}, nil
	})
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "ok"}, nil
		})
	hs := hosttest.New(t, host.Options{Model: m, Retry: quickRetries,
		Telemetry: &host.Telemetry{TracerProvider: tp, MeterProvider: mp, RecordContent: content},
		Agent:     host.Agent{Tools: []host.Tool{lookup, publish}, Policies: []host.Policy{fuelPolicy{"a", 5}}}})
	ctx := context.Background()
	s := hs.Host.Session("s")
	res, err := s.Send(ctx, "look up the secret plans and publish", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	run, err := s.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err = run.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	return spans.GetSpans().Snapshots(), rm, res
}

// TestTelemetrySpans: the span tree of a run with a retry, a tool call and
// an approval — invoke_agent → step → chat (per attempt) and
// execute_tool, and, as the run goes on after the decision, approval.wait
// — with the GenAI conventions' attributes and the run's and session's
// ids on every span, all in the run's trace (TraceIDOf), and no prompt
// or completion text.
func TestTelemetrySpans(t *testing.T) {
	spans, _, res := telemetryRun(t, false)
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	// path names a span by the names of its ancestors.
	path := func(s sdktrace.ReadOnlySpan) string {
		var names []string
		for cur, ok := s, true; ok; cur, ok = byID[cur.Parent().SpanID().String()] {
			names = append([]string{cur.Name()}, names...)
		}
		return strings.Join(names, " > ")
	}
	var got []string
	for _, s := range spans {
		got = append(got, path(s))
		// One trace for the whole run, its continuation after the
		// approval included, named by the run's id.
		if tid := s.SpanContext().TraceID().String(); tid != host.TraceIDOf(res.RunID) {
			t.Errorf("span %s is in trace %s, want the run's %s", s.Name(), tid, host.TraceIDOf(res.RunID))
		}
		if attrOf(s, "agentic.run.id") != res.RunID || attrOf(s, "agentic.session.id") != "s" || attrOf(s, "gen_ai.conversation.id") != "s" {
			t.Errorf("span %s lacks the run's and session's ids: %v", s.Name(), s.Attributes())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "secret plans") || strings.Contains(kv.Value.String(), "all done") {
				t.Errorf("span %s carries content without RecordContent: %s", s.Name(), kv.Key)
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"invoke_agent default",
		"invoke_agent default",
		"invoke_agent default > approval.wait",
		"invoke_agent default > execute_tool publish",
		"invoke_agent default > step",
		"invoke_agent default > step",
		"invoke_agent default > step > chat test/model",
		"invoke_agent default > step > chat test/model",
		"invoke_agent default > step > chat test/model",
		"invoke_agent default > step > execute_tool lookup",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("span tree:\n %s\nwant\n %s", strings.Join(got, "\n "), strings.Join(want, "\n "))
	}
	var chats, runs []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.Name(), "chat "):
			chats = append(chats, s)
		case strings.HasPrefix(s.Name(), "invoke_agent"):
			runs = append(runs, s)
		case s.Name() == "execute_tool lookup":
			if attrOf(s, "gen_ai.operation.name") != "execute_tool" || attrOf(s, "gen_ai.tool.name") != "lookup" ||
				attrOf(s, "agentic.tool.effect") != "read" || attrOf(s, "agentic.tool.source") != "sha256:abc" ||
				attrOf(s, "agentic.tool.outcome") != "ok" || attrOf(s, "gen_ai.tool.call.id") == "" || attrOf(s, "agentic.tool.fuel") != "4321" ||
				attrOf(s, "agentic.policy.fuel") != "5" {
				t.Errorf("tool span attributes %v", s.Attributes())
			}
		case s.Name() == "approval.wait":
			if attrOf(s, "agentic.approval.decision") != "approve" || attrOf(s, "gen_ai.tool.name") != "publish" || !s.EndTime().After(s.StartTime()) {
				t.Errorf("approval.wait span %v, %s → %s", s.Attributes(), s.StartTime(), s.EndTime())
			}
		}
	}
	// Ended in order: the failed attempt first.
	first, last := chats[0], chats[len(chats)-1]
	if first.Status().Code != codes.Error || attrOf(first, "error.type") == "" || attrOf(first, "agentic.attempt") != "1" {
		t.Errorf("the failed attempt's span: %v %v", first.Status(), first.Attributes())
	}
	if attrOf(last, "gen_ai.operation.name") != "chat" || attrOf(last, "gen_ai.request.model") != hosttest.DefaultModel ||
		attrOf(last, "gen_ai.response.model") != hosttest.DefaultModel || attrOf(last, "gen_ai.usage.input_tokens") == "" ||
		attrOf(last, "gen_ai.usage.output_tokens") == "" || attrOf(last, "gen_ai.response.finish_reasons") != `["stop"]` ||
		attrOf(last, "agentic.usage.cost") == "" {
		t.Errorf("the last model span's attributes: %v", last.Attributes())
	}
	if attrOf(runs[0], "agentic.run.status") != "approval_required" || attrOf(runs[1], "agentic.run.status") != "completed" ||
		attrOf(runs[1], "agentic.run.resumed") != "true" {
		t.Errorf("run spans: %v / %v", runs[0].Attributes(), runs[1].Attributes())
	}
}

// TestTelemetryContent: with RecordContent, the model span carries the
// messages and the reply, and the tool span its arguments and result.
func TestTelemetryContent(t *testing.T) {
	spans, _, _ := telemetryRun(t, true)
	var input, output, args bool
	for _, s := range spans {
		input = input || strings.Contains(attrOf(s, "gen_ai.input.messages"), "secret plans")
		output = output || strings.Contains(attrOf(s, "gen_ai.output.messages"), "all done")
		args = args || (s.Name() == "execute_tool lookup" && strings.Contains(attrOf(s, "gen_ai.tool.call.arguments"), "secret plans") &&
			attrOf(s, "gen_ai.tool.call.result") == "found")
	}
	if !input || !output || !args {
		t.Errorf("content recorded: input %v, output %v, tool arguments and result %v", input, output, args)
	}
}

// TestTelemetryMetrics: the metrics of the same run: runs by status,
// steps, tokens, retries by class, tool calls by tool and outcome, and
// their durations.
func TestTelemetryMetrics(t *testing.T) {
	_, rm, _ := telemetryRun(t, false)
	sums := map[string]int64{}
	histograms := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					key := m.Name
					for _, k := range []attribute.Key{"agentic.run.status", "agentic.retry.class", "gen_ai.tool.name", "agentic.policy"} {
						if v, ok := p.Attributes.Value(k); ok {
							key += "{" + v.String() + "}"
						}
					}
					sums[key] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					histograms[m.Name] += p.Count
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					histograms[m.Name] += p.Count
				}
			}
		}
	}
	for key, want := range map[string]int64{
		"agentic.runs{approval_required}": 1, "agentic.runs{completed}": 1, "agentic.steps": 2,
		"agentic.retries{transient}": 1, "agentic.tool.calls{lookup}": 1, "agentic.tool.calls{publish}": 1,
		"agentic.tool.fuel{lookup}": 4321, "agentic.tool.fuel{publish}": 0,
		// The policy decided three times: lookup, publish, publish again
		// after the approval.
		"agentic.policy.fuel{a}": 15,
	} {
		if sums[key] != want {
			t.Errorf("%s = %d, want %d (all: %v)", key, sums[key], want, sums)
		}
	}
	for name, want := range map[string]uint64{"gen_ai.client.token.usage": 4, "gen_ai.client.operation.duration": 3, "agentic.tool.duration": 2} {
		if histograms[name] != want {
			t.Errorf("%s has %d points, want %d (all: %v)", name, histograms[name], want, histograms)
		}
	}
}

// TestProgressNamesTheTrace: a host that makes spans names the run's trace
// on every progress event (TraceIDOf the run), one that does not names
// none.
func TestProgressNamesTheTrace(t *testing.T) {
	for _, tracing := range []bool{true, false} {
		opts := host.Options{}
		if tracing {
			opts.Telemetry = &host.Telemetry{TracerProvider: sdktrace.NewTracerProvider()}
		}
		hs := hosttest.New(t, opts)
		var progress []host.Progress
		res, err := hs.Host.Session("s").Send(context.Background(), "hello", host.SendOptions{OnProgress: func(p host.Progress) { progress = append(progress, p) }})
		if err != nil || len(progress) == 0 {
			t.Fatalf("%+v %v, %d events", res, err, len(progress))
		}
		want := ""
		if tracing {
			want = host.TraceIDOf(res.RunID)
		}
		for _, p := range progress {
			if p.TraceID != want {
				t.Errorf("tracing %v: %s event names trace %q, want %q", tracing, p.Type, p.TraceID, want)
			}
		}
	}
	if id := host.TraceIDOf("run_1"); len(id) != 32 || id != host.TraceIDOf("run_1") || id == host.TraceIDOf("run_2") || host.TraceIDOf("") != "" {
		t.Errorf("TraceIDOf: %q", id)
	}
}

// TestTelemetryCost: agentic.cost adds up each pass's billed cost (the
// provider's cost, plus the upstream cost when the key is the account's
// own, BYOK), by the model that answered.
func TestTelemetryCost(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	byok := true
	m := hosttest.NewModel(
		hosttest.Reply{Text: "one", Usage: &ledger.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, Cost: 0.25}},
		hosttest.Reply{Text: "two", Usage: &ledger.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, Cost: 0.01, IsBYOK: &byok, UpstreamCost: 0.5}})
	hs := hosttest.New(t, host.Options{Model: m, Telemetry: &host.Telemetry{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}})
	ctx := context.Background()
	for _, text := range []string{"first", "second"} {
		if res, err := hs.Host.Session("s").Send(ctx, text, host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("%+v %v", res, err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	cost := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if d, ok := mt.Data.(metricdata.Sum[float64]); ok && mt.Name == "agentic.cost" {
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("gen_ai.response.model")
					cost[v.String()] += p.Value
				}
			}
		}
	}
	if got := cost[hosttest.DefaultModel]; len(cost) != 1 || got < 0.7599 || got > 0.7601 {
		t.Errorf("agentic.cost = %v, want 0.76 (0.25, then 0.01 + 0.5 upstream) on %s", cost, hosttest.DefaultModel)
	}
}

// TestTelemetryNoGlobalProviders: a host never falls back on the process's
// global OpenTelemetry providers: with Options.Telemetry nil, or with a
// tracer provider alone, the global ones receive no span and no metric.
func TestTelemetryNoGlobalProviders(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetMeterProvider(prevMP) })

	own := tracetest.NewInMemoryExporter()
	for _, tel := range []*host.Telemetry{nil, {TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(own))}} {
		hs := hosttest.New(t, host.Options{Telemetry: tel})
		if res, err := hs.Host.Session("s").Send(context.Background(), "hello", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("%+v %v", res, err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := len(spans.GetSpans()); n != 0 || len(rm.ScopeMetrics) != 0 {
		t.Errorf("the global providers got %d spans and %d scopes of metrics, want none", n, len(rm.ScopeMetrics))
	}
	if len(own.GetSpans()) == 0 {
		t.Error("the host's own tracer provider got no span")
	}
}
