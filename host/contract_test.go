package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
)

// TestRuntimeContract is the runtime contract's failure-injection
// checklist: for each failure, the state the session is left in, the live
// events that tell it and the spans that trace it — each naming the run
// and the session, so that an operator finds it by either.
func TestRuntimeContract(t *testing.T) {
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "ok"}, nil
		})
	callPublish := hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"t"}`}}}
	callNap := hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}
	for _, c := range []struct {
		name     string
		script   []hosttest.Reply
		timeouts host.AgentTimeouts
		deny     bool // deny the approval the run waits for
		state    host.State
		events   string // the live events, in order
		span     string // a span that must be there, with the error status when spanErr
		spanErr  bool
		reason   string // in the status's reason
	}{
		{name: "approval wait", script: []hosttest.Reply{callPublish}, state: host.StateApprovalRequired,
			events: "run-start step approval-requested run-end", span: "invoke_agent default"},
		{name: "deny is a normal branch", script: []hosttest.Reply{callPublish, {Text: "understood, not published"}}, deny: true,
			state:  host.StateCompleted,
			events: "run-start step approval-requested run-end approval-decided run-start step run-end", span: "approval.wait"},
		{name: "slow tool: its timeout, the run goes on", script: []hosttest.Reply{callNap, {Text: "it took too long"}},
			timeouts: host.AgentTimeouts{Tool: 30 * time.Millisecond}, state: host.StateCompleted,
			events: "run-start step timeout step run-end", span: "execute_tool nap", spanErr: true},
		{name: "slow tool: the total timeout ends the run", script: []hosttest.Reply{callNap, {Text: "never"}},
			timeouts: host.AgentTimeouts{Total: 60 * time.Millisecond}, state: host.StateTimedOut,
			events: "run-start step timeout run-end", span: "invoke_agent default", spanErr: true, reason: "total timeout"},
		{name: "stalled stream past its retries", script: []hosttest.Reply{{Stall: time.Hour, Text: "a"}, {Stall: time.Hour, Text: "a"}, {Stall: time.Hour, Text: "a"}},
			timeouts: host.AgentTimeouts{Chunk: 30 * time.Millisecond}, state: host.StateTimedOut,
			events: "run-start timeout retry timeout retry timeout run-end", span: "chat test/model", spanErr: true, reason: "chunk timeout"},
		{name: "model error", script: []hosttest.Reply{{Err: &model.Error{StatusCode: 402, Message: "insufficient credits"}}}, state: host.StateFailed,
			events: "run-start run-end", span: "chat test/model", spanErr: true, reason: "insufficient credits"},
		{name: "truncated turn", script: []hosttest.Reply{{Text: "half a", FinishReason: "length"}}, state: host.StateFailed,
			events: "run-start step run-end", span: "invoke_agent default", spanErr: true, reason: "truncated at max tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log eventLog
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			hs := hosttest.New(t, host.Options{Model: hosttest.NewModel(c.script...), Retry: quickRetries, OnEvent: log.add,
				Telemetry: &host.Telemetry{TracerProvider: tp},
				Agent:     host.Agent{Tools: []host.Tool{publish, sleepTool("nap", time.Hour)}, Timeouts: c.timeouts}})
			ctx := context.Background()
			s := hs.Host.Session("s")
			res, err := s.Send(ctx, "go", host.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Approvals) > 0 && c.deny {
				run, err := s.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Reason: "not now"})
				if err != nil {
					t.Fatal(err)
				}
				if res, err = run.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			st, err := s.Status(ctx)
			if err != nil || st.State != c.state || !strings.Contains(st.Reason, c.reason) {
				t.Fatalf("status %+v %v, want %s with a reason saying %q", st, err, c.state, c.reason)
			}
			ends := strings.Count(c.events, "run-end")
			evs := log.wait(t, host.EventRunEnd, ends)
			var got []string
			for _, e := range evs {
				got = append(got, string(e.Type))
				if e.SessionID != "s" || e.RunID != res.RunID {
					t.Errorf("event %s names session %q, run %q; want s, %s", e.Type, e.SessionID, e.RunID, res.RunID)
				}
			}
			if strings.Join(got, " ") != c.events {
				t.Errorf("events %q, want %q", strings.Join(got, " "), c.events)
			}
			found := false
			for _, sp := range spans.GetSpans().Snapshots() {
				if attrOf(sp, "agentic.run.id") != res.RunID || attrOf(sp, "agentic.session.id") != "s" {
					t.Errorf("span %s does not name the run and the session", sp.Name())
				}
				if sp.Name() == c.span && (!c.spanErr || sp.Status().Code == codes.Error) {
					found = true
				}
			}
			if !found {
				t.Errorf("no span %q (error status: %v)", c.span, c.spanErr)
			}
			if c.deny {
				var denied bool
				for _, e := range hs.Events("s") {
					denied = denied || (e.ToolResult != nil && strings.Contains(e.ToolResult.Output, "denied") && strings.Contains(e.ToolResult.Output, "not now"))
				}
				if !denied || res.Text != "understood, not published" {
					t.Errorf("after the denial: %+v (the model must read the denial and answer)", res)
				}
			}
		})
	}
}
