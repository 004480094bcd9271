package host

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/semconv/v1.37.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// OpenTelemetry: spans of each run — invoke_agent (the run) → step → chat
// (a model call, per attempt) and execute_tool (a tool call), and
// approval.wait — with the GenAI semantic conventions' names and
// attributes where they define one, and metrics of runs, steps, tokens,
// cost, retries, tool calls and lease takeovers. Off (no cost beyond a nil
// check) unless Options.Telemetry sets a provider.

// Telemetry configures the OpenTelemetry traces and metrics of the host's
// runs (see docs/operations.md for the spans, their attributes and the
// metrics). The host uses the OpenTelemetry API only: the program wires
// the SDK and its exporters.
type Telemetry struct {
	// TracerProvider makes the spans. Default: nil, no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Default: nil, no metrics.
	MeterProvider metric.MeterProvider
	// RecordContent adds what the spans are about: the messages sent to
	// the model and its reply (gen_ai.input.messages,
	// gen_ai.output.messages, gen_ai.system_instructions) and tool
	// arguments and results (gen_ai.tool.call.arguments,
	// gen_ai.tool.call.result). Default: false — no prompt, completion or
	// tool data leaves the host, only ids, counts, models and outcomes.
	RecordContent bool
}

// instrumentation is the scope the host's spans and metrics are in.
const instrumentation = "github.com/agentichost/agentic/host"

// The host's own attribute keys (the GenAI conventions define the rest).
const (
	attrRunID     = attribute.Key("agentic.run.id")
	attrSessionID = attribute.Key("agentic.session.id")
	attrStep      = attribute.Key("agentic.step")
	attrAttempt   = attribute.Key("agentic.attempt")
	attrStatus    = attribute.Key("agentic.run.status")
	attrReason    = attribute.Key("agentic.run.reason")
	attrTimeout   = attribute.Key("agentic.timeout")
	attrResumed   = attribute.Key("agentic.run.resumed")
	attrCost      = attribute.Key("agentic.usage.cost")
	attrEffect    = attribute.Key("agentic.tool.effect")
	attrSource    = attribute.Key("agentic.tool.source")
	attrFuel      = attribute.Key("agentic.tool.fuel")
	attrPolFuel   = attribute.Key("agentic.policy.fuel")
	attrPolicy    = attribute.Key("agentic.policy")
	attrTenant    = attribute.Key("agentic.tenant")
	attrOutcome   = attribute.Key("agentic.tool.outcome")
	attrApproval  = attribute.Key("agentic.approval.id")
	attrDecision  = attribute.Key("agentic.approval.decision")
	attrClass     = attribute.Key("agentic.retry.class")
	attrArgs      = attribute.Key("gen_ai.tool.call.arguments")
	// A sub-agent's run names its parent's call (see NewDelegateTool).
	attrParentSession = attribute.Key("agentic.parent.session.id")
	attrParentRun     = attribute.Key("agentic.parent.run.id")
	attrParentCall    = attribute.Key("agentic.parent.call.id")
	attrResult        = attribute.Key("gen_ai.tool.call.result")
)

// telemetry holds the host's instruments; a nil *telemetry records nothing.
type telemetry struct {
	tracer  trace.Tracer // nil: no spans
	content bool

	runs, steps, retries, toolCalls, takeovers metric.Int64Counter
	toolFuel, policyFuel                       metric.Int64Counter
	cost                                       metric.Float64Counter
	tokens                                     metric.Int64Histogram
	modelDuration, toolDuration                metric.Float64Histogram
}

// newTelemetry returns the instruments cfg asks for, nil when it asks for
// none.
func newTelemetry(cfg *Telemetry) (*telemetry, error) {
	if cfg == nil || (cfg.TracerProvider == nil && cfg.MeterProvider == nil) {
		return nil, nil
	}
	t := &telemetry{content: cfg.RecordContent}
	if cfg.TracerProvider != nil {
		t.tracer = cfg.TracerProvider.Tracer(instrumentation)
	}
	if cfg.MeterProvider == nil {
		return t, nil
	}
	m := cfg.MeterProvider.Meter(instrumentation)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	t.runs = counter("agentic.runs", "{run}", "Runs that ended, by status (approval_required: parked).")
	t.steps = counter("agentic.steps", "{step}", "Model passes recorded, by model and finish reason.")
	t.retries = counter("agentic.retries", "{retry}", "Model passes retried, by the class of their failure.")
	t.toolCalls = counter("agentic.tool.calls", "{call}", "Tool calls that ran, by tool and outcome, with error.type when they failed (a plugin's trap, timeout, out_of_memory, …).")
	t.toolFuel = counter("agentic.tool.fuel", "{fuel}", "Fuel used by metered tool calls (Wasm plugins), by tool, the module that served them and the host's tenant.")
	t.policyFuel = counter("agentic.policy.fuel", "{fuel}", "Fuel used by metered policies (Wasm plugins) deciding on tool calls, by policy, the module that served them and the host's tenant.")
	t.takeovers = counter("agentic.lease.takeovers", "{run}", "Interrupted runs this host resumed on a storage shared with other hosts.")
	var err error
	t.cost, err = m.Float64Counter("agentic.cost", metric.WithUnit("USD"), metric.WithDescription("Billed cost of model passes, by model."))
	errs = append(errs, err)
	t.tokens, err = m.Int64Histogram(genaiconv.ClientTokenUsage{}.Name(), metric.WithUnit(genaiconv.ClientTokenUsage{}.Unit()),
		metric.WithDescription(genaiconv.ClientTokenUsage{}.Description()),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	errs = append(errs, err)
	t.modelDuration, err = m.Float64Histogram(genaiconv.ClientOperationDuration{}.Name(), metric.WithUnit("s"),
		metric.WithDescription(genaiconv.ClientOperationDuration{}.Description()),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	errs = append(errs, err)
	t.toolDuration, err = m.Float64Histogram("agentic.tool.duration", metric.WithUnit("s"), metric.WithDescription("Duration of tool calls, by tool."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// meters reports whether t records metrics.
func (t *telemetry) meters() bool { return t != nil && t.runs != nil }

// ids are the attributes every span of a run carries.
func (r *run) ids() []attribute.KeyValue {
	return []attribute.KeyValue{attrRunID.String(r.id), attrSessionID.String(r.sessionID),
		semconv.GenAIConversationID(r.sessionID), semconv.GenAIAgentName(r.agent.Name)}
}

// TraceIDOf is the OpenTelemetry trace id of a run's spans: 32 hex
// digits of a digest of its id, so that every attempt of the run — on
// this host or another that resumes it — is one trace, and anything that
// knows the run id (a UI, a log line) can link to it without asking. It
// is "" for a run id that is empty.
func TraceIDOf(runID string) string {
	if runID == "" {
		return ""
	}
	id := traceIDOf(runID)
	return id.String()
}

// traceIDOf is TraceIDOf's trace.TraceID.
func traceIDOf(runID string) trace.TraceID {
	sum := sha256.Sum256([]byte("agentic-run:" + runID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// runTraceParent is ctx with the run's trace as its remote parent (see
// TraceIDOf), unless ctx is in a trace already.
func runTraceParent(ctx context.Context, runID string) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	sum := sha256.Sum256([]byte("agentic-run-parent:" + runID))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceIDOf(runID), SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

// tracing reports whether the host makes spans.
func (t *telemetry) tracing() bool { return t != nil && t.tracer != nil }

// startRunSpan starts the run's span (invoke_agent) on the run's context,
// in the run's own trace (TraceIDOf).
func (r *run) startRunSpan() trace.Span {
	t := r.h.tel
	if t == nil || t.tracer == nil {
		return nil
	}
	attrs := append(r.ids(), semconv.GenAIOperationNameInvokeAgent, attrResumed.Bool(!r.fresh))
	var links []trace.Link
	if p := r.parentCall(); p != nil {
		// A sub-agent's run, in a trace of its own, links its parent's:
		// the parent's call span when it waits in this host, and the
		// parent run's trace (TraceIDOf) always.
		attrs = append(attrs, attrParentSession.String(p.SessionID), attrParentRun.String(p.RunID), attrParentCall.String(p.CallID))
		if d, ok := r.h.delegated.Load(r.sessionID); ok && d.(delegation).span.IsValid() {
			links = append(links, trace.Link{SpanContext: d.(delegation).span})
		}
		if p.RunID != "" {
			links = append(links, trace.Link{SpanContext: trace.SpanContextFromContext(runTraceParent(context.Background(), p.RunID))})
		}
	}
	ctx, span := t.tracer.Start(runTraceParent(r.base, r.id), "invoke_agent "+r.agent.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	r.base, r.ctx = ctx, ctx
	return span
}

// parentCall returns the parent's call that the run's first message names
// (a sub-agent's run: ledger.Input.Parent), nil for any other run.
func (r *run) parentCall() *ledger.ParentCall {
	events := r.view()
	var inputs []string
	for _, e := range events {
		if e.RunStart != nil && e.RunID == r.id {
			inputs = e.RunStart.Inputs
			break
		}
	}
	for _, e := range events {
		if e.Input != nil && e.Input.Parent != nil && slices.Contains(inputs, e.Input.MessageID) {
			return e.Input.Parent
		}
	}
	return nil
}

// endRunSpan ends the run's span with how the run ended, and counts it.
func (r *run) endRunSpan(span trace.Span, res RunResult) {
	t := r.h.tel
	if t.meters() {
		t.runs.Add(context.Background(), 1, metric.WithAttributes(attrStatus.String(string(res.Status))))
	}
	if span == nil {
		return
	}
	span.SetAttributes(attrStatus.String(string(res.Status)),
		semconv.GenAIUsageInputTokens(int(res.Usage.PromptTokens)), semconv.GenAIUsageOutputTokens(int(res.Usage.CompletionTokens)),
		attrCost.Float64(res.Cost))
	if res.Timeout != "" {
		span.SetAttributes(attrTimeout.String(string(res.Timeout)))
	}
	switch res.Status {
	case ledger.RunCompleted, ledger.RunApprovalRequired:
	default:
		span.SetAttributes(attrReason.String(res.Reason))
		span.SetStatus(codes.Error, res.Reason)
	}
	span.End()
}

// startStepSpan starts the span of the pass about to run, under the run's,
// on the pass's context.
func (r *run) startStepSpan() trace.Span {
	t := r.h.tel
	if t == nil || t.tracer == nil {
		return nil
	}
	ctx, span := t.tracer.Start(r.ctx, "step", trace.WithAttributes(append(r.ids(), attrStep.Int(r.stepNow()))...))
	r.ctx = ctx
	return span
}

// endStepSpan ends a pass's span: o is how the run goes on (or ends).
func endStepSpan(span trace.Span, o outcome, stop bool) {
	if span == nil {
		return
	}
	if stop && o.status != "" && o.status != ledger.RunCompleted && o.status != ledger.RunApprovalRequired {
		span.SetStatus(codes.Error, o.reason)
		if o.timeout != "" {
			span.SetAttributes(attrTimeout.String(string(o.timeout)))
		}
	}
	span.End()
}

// modelCall traces and measures one model call (an attempt of a pass).
func (r *run) modelCall(ctx context.Context, req model.Request, attempt int, call func(context.Context) (model.Result, error)) (model.Result, error) {
	t := r.h.tel
	if t == nil {
		return call(ctx)
	}
	start := time.Now()
	var span trace.Span
	if t.tracer != nil {
		attrs := append(r.ids(), semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(req.Model),
			attrStep.Int(r.stepNow()), attrAttempt.Int(attempt))
		if req.MaxTokens > 0 {
			attrs = append(attrs, semconv.GenAIRequestMaxTokens(req.MaxTokens))
		}
		if t.content {
			attrs = append(attrs, attribute.String(string(semconv.GenAIInputMessagesKey), messagesJSON(req.Messages)))
			if req.System != "" {
				attrs = append(attrs, attribute.String(string(semconv.GenAISystemInstructionsKey), partsJSON([]ledger.Part{ledger.TextPart(req.System)})))
			}
		}
		ctx, span = t.tracer.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	}
	res, err := call(ctx)
	model := res.Model
	if model == "" {
		model = req.Model
	}
	if t.meters() {
		common := []attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(req.Model)}
		dur := common
		if err != nil {
			dur = append(dur, semconv.ErrorTypeKey.String(errorType(err)))
		}
		t.modelDuration.Record(context.Background(), time.Since(start).Seconds(), metric.WithAttributes(dur...))
		if err == nil {
			bg := context.Background()
			t.tokens.Record(bg, res.Usage.PromptTokens, metric.WithAttributes(append(common, semconv.GenAITokenTypeInput)...))
			t.tokens.Record(bg, res.Usage.CompletionTokens, metric.WithAttributes(append(common, semconv.GenAITokenTypeOutput)...))
			t.steps.Add(bg, 1, metric.WithAttributes(semconv.GenAIResponseModel(model), attribute.String(string(semconv.GenAIResponseFinishReasonsKey), res.FinishReason)))
			if c := res.Usage.Billed(); c > 0 {
				t.cost.Add(bg, c, metric.WithAttributes(semconv.GenAIResponseModel(model)))
			}
		}
	}
	if span != nil {
		span.SetAttributes(semconv.GenAIResponseModel(model), semconv.GenAIUsageInputTokens(int(res.Usage.PromptTokens)),
			semconv.GenAIUsageOutputTokens(int(res.Usage.CompletionTokens)), attrCost.Float64(res.Usage.Billed()))
		if res.FinishReason != "" {
			span.SetAttributes(semconv.GenAIResponseFinishReasons(res.FinishReason))
		}
		if res.GenerationID != "" {
			span.SetAttributes(semconv.GenAIResponseID(res.GenerationID))
		}
		if t.content {
			span.SetAttributes(attribute.String(string(semconv.GenAIOutputMessagesKey), messagesJSON([]ledger.Message{{
				Role: ledger.RoleAssistant, Parts: []ledger.Part{ledger.TextPart(res.Text)}, ToolCalls: res.ToolCalls}})))
		}
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
			span.SetStatus(codes.Error, truncate(err.Error(), 500))
		}
		span.End()
	}
	return res, err
}

// policyFuel counts the fuel a metered policy's decision used.
func (r *run) policyFuel(name string, d Decision) {
	t := r.h.tel
	if t == nil || !t.meters() || d.Fuel <= 0 {
		return
	}
	attrs := []attribute.KeyValue{attrPolicy.String(name), attrSource.String(d.Source)}
	if r.h.tenant != "" {
		attrs = append(attrs, attrTenant.String(r.h.tenant))
	}
	t.policyFuel.Add(context.Background(), d.Fuel, metric.WithAttributes(attrs...))
}

// toolCall traces and measures one tool call; policyFuel is the fuel the
// policies that let it run used.
func (r *run) toolCall(ctx context.Context, spec ToolSpec, call ToolCall, policyFuel int64, run func(context.Context) (ToolResult, error)) (ToolResult, error) {
	t := r.h.tel
	if t == nil {
		return run(ctx)
	}
	start := time.Now()
	var span trace.Span
	if t.tracer != nil {
		attrs := append(r.ids(), semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(spec.Name),
			semconv.GenAIToolCallID(call.ID), semconv.GenAIToolType("function"), attrEffect.String(string(effectOf(spec))), attrStep.Int(r.stepNow()))
		if t.content {
			attrs = append(attrs, attrArgs.String(string(call.Input)))
		}
		ctx, span = t.tracer.Start(ctx, "execute_tool "+spec.Name, trace.WithAttributes(attrs...))
	}
	res, err := run(ctx)
	outcome, etype := "ok", ""
	if err != nil {
		outcome, etype = "error", errorType(err)
		if te, ok := errors.AsType[*TimeoutError](err); ok && te.Kind == TimeoutTool {
			outcome = "timeout"
		}
	}
	if t.meters() {
		attrs := []attribute.KeyValue{semconv.GenAIToolName(spec.Name), attrOutcome.String(outcome)}
		if etype != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(etype))
		}
		bg := context.Background()
		t.toolCalls.Add(bg, 1, metric.WithAttributes(attrs...))
		t.toolDuration.Record(bg, time.Since(start).Seconds(), metric.WithAttributes(semconv.GenAIToolName(spec.Name)))
		if res.Fuel > 0 {
			attrs := []attribute.KeyValue{semconv.GenAIToolName(spec.Name), attrSource.String(res.Source)}
			if r.h.tenant != "" {
				attrs = append(attrs, attrTenant.String(r.h.tenant))
			}
			t.toolFuel.Add(bg, res.Fuel, metric.WithAttributes(attrs...))
		}
	}
	if span != nil {
		span.SetAttributes(attrOutcome.String(outcome))
		if res.Source != "" {
			span.SetAttributes(attrSource.String(res.Source))
		}
		if res.Fuel > 0 {
			span.SetAttributes(attrFuel.Int64(res.Fuel))
		}
		if policyFuel > 0 {
			span.SetAttributes(attrPolFuel.Int64(policyFuel))
		}
		if t.content && err == nil {
			span.SetAttributes(attrResult.String(res.Output))
		}
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(etype))
			span.SetStatus(codes.Error, truncate(err.Error(), 500))
		}
		span.End()
	}
	return res, err
}

// approvalWaitSpans records, as the run goes on after its decisions, a span
// for each wait that ended: from the request to its decision, as the ledger
// timed them.
func (r *run) approvalWaitSpans() {
	t := r.h.tel
	if t == nil || t.tracer == nil {
		return
	}
	events := r.view()
	decided := map[string]ledger.Event{}
	for _, e := range events {
		if d := e.ApprovalDecision; d != nil && e.RunID == r.id {
			decided[d.ApprovalID] = e
		}
	}
	answered := map[string]bool{}
	for _, e := range events {
		if e.ToolResult != nil {
			answered[e.ToolResult.CallID] = true
		}
	}
	for _, e := range events {
		a := e.ApprovalRequest
		if a == nil || e.RunID != r.id || answered[a.CallID] {
			continue
		}
		d, ok := decided[a.ApprovalID]
		if !ok {
			continue
		}
		_, span := t.tracer.Start(r.base, "approval.wait", trace.WithTimestamp(e.Time), trace.WithAttributes(append(r.ids(),
			attrApproval.String(a.ApprovalID), semconv.GenAIToolName(a.Name), semconv.GenAIToolCallID(a.CallID),
			attrDecision.String(d.ApprovalDecision.Decision))...))
		span.End(trace.WithTimestamp(d.Time))
	}
}

// countRetry counts a retried model pass.
func (t *telemetry) countRetry(class model.ClassKind) {
	if t.meters() {
		t.retries.Add(context.Background(), 1, metric.WithAttributes(attrClass.String(string(class))))
	}
}

// countResumed counts a run this host resumed, as a lease takeover when the
// storage is shared with other hosts (it has leases).
func (h *Host) countResumed() {
	if h.leaser != nil && h.tel.meters() {
		h.tel.takeovers.Add(context.Background(), 1)
	}
}

// ErrorTyper is implemented by errors that name their class for telemetry
// (OpenTelemetry's error.type), as the plugins' errors do ("trap",
// "timeout", "out_of_memory", …).
type ErrorTyper interface {
	error
	ErrorType() string
}

// errorType names err's class for the error.type attribute.
func errorType(err error) string {
	if et, ok := errors.AsType[ErrorTyper](err); ok {
		if s := et.ErrorType(); s != "" {
			return s
		}
	}
	if te, ok := errors.AsType[*TimeoutError](err); ok {
		return "timeout." + string(te.Kind)
	}
	if me, ok := errors.AsType[*model.Error](err); ok && me.StatusCode != 0 {
		return httpStatusText(me.StatusCode)
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "_OTHER"
}

func httpStatusText(code int) string {
	b := []byte("http.000")
	b[5], b[6], b[7] = byte('0'+code/100%10), byte('0'+code/10%10), byte('0'+code%10)
	return string(b)
}

func effectOf(spec ToolSpec) Effect {
	if spec.Effect == "" {
		return EffectRead
	}
	return spec.Effect
}

// messagesJSON renders messages in the GenAI conventions' shape:
// [{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", …}, …]}].
func messagesJSON(msgs []ledger.Message) string {
	type part struct {
		Type      string `json:"type"`
		Content   string `json:"content,omitempty"`
		ID        string `json:"id,omitempty"`
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments,omitempty"`
		Response  string `json:"response,omitempty"`
		MIME      string `json:"mime_type,omitempty"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]message, 0, len(msgs))
	for _, m := range msgs {
		msg := message{Role: string(m.Role)}
		for _, p := range m.Parts {
			switch {
			case m.Role == ledger.RoleTool:
				msg.Parts = append(msg.Parts, part{Type: "tool_call_response", ID: m.ToolCallID, Response: p.Text})
			case p.Type == ledger.PartText:
				msg.Parts = append(msg.Parts, part{Type: "text", Content: p.Text})
			default:
				msg.Parts = append(msg.Parts, part{Type: string(p.Type), MIME: p.MIME})
			}
		}
		for _, c := range m.ToolCalls {
			msg.Parts = append(msg.Parts, part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, msg)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// partsJSON renders parts in the GenAI conventions' shape.
func partsJSON(parts []ledger.Part) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	out := make([]part, 0, len(parts))
	for _, p := range parts {
		out = append(out, part{Type: string(p.Type), Content: p.Text})
	}
	b, _ := json.Marshal(out)
	return string(b)
}
