package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics: the hosts' OpenTelemetry metrics (runs, steps, tokens, cost,
// retries, tool calls, takeovers), the server's own (requests by route and
// status, event streams open, active runs by tenant) and the Go runtime's,
// served at /metrics in Prometheus's text format, through OpenTelemetry's
// Prometheus exporter.

type metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler

	requests  metric.Int64Counter
	streams   metric.Int64UpDownCounter
	runs      metric.Int64UpDownCounter
	queueWait metric.Float64Histogram
}

func newMetrics() (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	m := &metrics{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	meter := m.provider.Meter("github.com/agentichost/agentic/server")
	if m.requests, err = meter.Int64Counter("agentic.http.requests", metric.WithUnit("{request}"),
		metric.WithDescription("API requests, by route and status code.")); err != nil {
		return nil, err
	}
	if m.streams, err = meter.Int64UpDownCounter("agentic.http.event_streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Event streams open (SSE).")); err != nil {
		return nil, err
	}
	if m.runs, err = meter.Int64UpDownCounter("agentic.runs.active", metric.WithUnit("{run}"),
		metric.WithDescription("Runs in flight in this host, by tenant.")); err != nil {
		return nil, err
	}
	if m.queueWait, err = meter.Float64Histogram("agentic.admission.queue.wait", metric.WithUnit("s"),
		metric.WithDescription("How long new runs (queue runs) and requests (queue requests) waited in a tenant's queues for a place under rate_limit.concurrent_runs or a token of requests_per_second, by tenant, queue and outcome (admitted, full, timeout, gone)."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120)); err != nil {
		return nil, err
	}
	return m, nil
}

// observeQueueWait records a wait in one of a tenant's admission queues
// ("runs": for a place under concurrent_runs; "requests": for a token of
// requests_per_second) or in the process's ("max_runs") that ended with
// err (nil: admitted).
func (m *metrics) observeQueueWait(tenant, queue string, d time.Duration, err error) {
	outcome := "admitted"
	switch {
	case errors.Is(err, errQueueFull), errors.Is(err, errQueueShare):
		outcome = "full"
	case errors.Is(err, errQueueTimeout):
		outcome = "timeout"
	case err != nil:
		outcome = "gone" // the request went away
	}
	m.queueWait.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("queue", queue), attribute.String("outcome", outcome)))
}

// observeQueues adds the gauges of the admissions waiting in each
// tenant's queue and, by tenant, in the process's queue (runq, when there
// is one), read at each collection.
func (m *metrics) observeQueues(tenants map[string]*tenant, runq *runQueue) error {
	meter := m.provider.Meter("github.com/agentichost/agentic/server")
	if runq != nil {
		_, err := meter.Int64ObservableGauge("agentic.admission.max_runs_queue.length", metric.WithUnit("{request}"),
			metric.WithDescription("New runs waiting in the process's queue for a place under max_runs, by tenant."),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				queued := runq.queued()
				for name := range tenants {
					o.Observe(int64(queued[name]), metric.WithAttributes(attribute.String("tenant", name)))
				}
				return nil
			}))
		if err != nil {
			return err
		}
	}
	_, err := meter.Int64ObservableGauge("agentic.admission.queue.length", metric.WithUnit("{request}"),
		metric.WithDescription("New runs waiting in a tenant's queue for a place under rate_limit.concurrent_runs, by tenant."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for name, t := range tenants {
				if t.cfg.RateLimit.QueueRuns > 0 {
					o.Observe(int64(t.slots.queued()), metric.WithAttributes(attribute.String("tenant", name)))
				}
			}
			return nil
		}))
	return err
}

// observePlugins adds the gauges of the plugins quarantined now, by tenant
// and plugin, and of their canaries' shares, read from reg at each
// collection.
func (m *metrics) observePlugins(reg *plugins.Registry) error {
	meter := m.provider.Meter("github.com/agentichost/agentic/server")
	_, err := meter.Int64ObservableGauge("agentic.plugins.quarantined", metric.WithUnit("{plugin}"),
		metric.WithDescription("Plugins quarantined now (failing too often: their calls are refused), by tenant and plugin."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, tenant := range reg.Tenants() {
				for _, q := range reg.Quarantined(tenant) {
					o.Observe(1, metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("plugin", q.Name)))
				}
			}
			return nil
		}))
	if err != nil {
		return err
	}
	_, err = meter.Float64ObservableGauge("agentic.plugins.canary.share", metric.WithUnit("1"),
		metric.WithDescription("The share of sessions a plugin's canary serves now, by tenant, plugin and the canary's hash."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			for _, tenant := range reg.Tenants() {
				for _, c := range reg.Canaries(tenant) {
					o.Observe(c.Share, metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("plugin", c.Name), attribute.String("module", c.Hash)))
				}
			}
			return nil
		}))
	return err
}

func (m *metrics) shutdown(ctx context.Context) { m.provider.Shutdown(ctx) }
