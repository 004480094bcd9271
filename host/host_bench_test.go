package host_test

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// instantModel answers every pass at once, in process: with it, a benchmark
// measures the host's own cost per step (ledger appends, replay, progress).
type instantModel struct{}

func (instantModel) Stream(_ context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	for _, d := range []string{"Hello", ", ", "world."} {
		onDelta(model.Delta{Kind: model.DeltaText, Text: d})
	}
	return model.Result{Text: "Hello, world.", FinishReason: "stop", Model: req.Model,
		Usage: ledger.Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15}}, nil
}

// BenchmarkLoopStep measures one Send of a one-pass run (a model pass, four
// ledger events) on a memory store:
//
//   - host: the harness's own cost, against an in-process model;
//   - fake-model-only: one streamed pass through openai-go to the fake
//     model over loopback HTTP, without the host;
//   - host+fake-model: both; the difference to fake-model-only is the host.
func BenchmarkLoopStep(b *testing.B) {
	srv, err := fakemodel.Start(fakemodel.Options{Script: nil})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	client, err := provider.New(provider.Config{BaseURL: srv.URL(), APIKey: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	newHost := func(m host.Model, tel ...*host.Telemetry) *host.Host {
		opts := host.Options{Storage: memory.New(), Model: m, Agent: host.Agent{Model: "fake/echo"}}
		if len(tel) > 0 {
			opts.Telemetry = tel[0]
		}
		h, err := host.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	ctx := context.Background()
	send := func(b *testing.B, h *host.Host) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			res, err := h.Session(fmt.Sprintf("b%d", i)).Send(ctx, "hello", host.SendOptions{OnProgress: func(host.Progress) {}})
			if err != nil || res.Status != ledger.RunCompleted {
				b.Fatalf("%+v %v", res, err)
			}
		}
	}
	b.Run("host", func(b *testing.B) { send(b, newHost(instantModel{})) })
	// Telemetry on, exported nowhere: the spans and metrics the SDK
	// makes, without the cost of an exporter's I/O.
	b.Run("host+telemetry", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(ctx)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		send(b, newHost(instantModel{}, &host.Telemetry{TracerProvider: tp, MeterProvider: mp}))
	})
	b.Run("fake-model-only", func(b *testing.B) {
		b.ReportAllocs()
		req := model.Request{Model: "fake/echo", Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("hello")}}}}
		for b.Loop() {
			if _, err := client.Stream(ctx, req, func(model.Delta) {}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("host+fake-model", func(b *testing.B) { send(b, newHost(client)) })
}
