package host_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestSessionWith: a session bound to an agent (Host.SessionWith) runs it
// for every send that names none — its model and system prompt reach the
// model — and for a resume; another session runs the host's agent; a send
// naming its own agent runs that; an invalid agent is refused.
func TestSessionWith(t *testing.T) {
	ctx := context.Background()
	m := hosttest.NewModel()
	hs := hosttest.New(t, host.Options{Storage: memory.New(), Model: m, Agent: host.Agent{Model: hosttest.DefaultModel, System: "host"}})
	sess, err := hs.Host.SessionWith("bound", host.Agent{Name: "writer", Model: "test/writer", System: "You write."})
	if err != nil {
		t.Fatal(err)
	}
	last := func() (string, string) {
		r := m.Requests()[m.RequestCount()-1]
		return r.Model, r.System
	}
	if _, err := sess.Send(ctx, "one", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if model, system := last(); model != "test/writer" || system != "You write." {
		t.Fatalf("the bound session's pass: %s %q", model, system)
	}
	// Through another handle on the same id, too.
	if _, err := hs.Host.Session("bound").Send(ctx, "two", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if model, _ := last(); model != "test/writer" {
		t.Fatalf("a second handle's pass: %s", model)
	}
	if _, err := hs.Host.Session("other").Send(ctx, "three", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if model, system := last(); model != hosttest.DefaultModel || system != "host" {
		t.Fatalf("an unbound session's pass: %s %q", model, system)
	}
	own := host.Agent{Model: "test/own"}
	if _, err := sess.Send(ctx, "four", host.SendOptions{Agent: &own}); err != nil {
		t.Fatal(err)
	}
	if model, _ := last(); model != "test/own" {
		t.Fatalf("a send naming its agent: %s", model)
	}
	if _, err := hs.Host.SessionWith("bad", host.Agent{}); !errors.Is(err, host.ErrInvalidInput) {
		t.Fatalf("an agent without a model: %v", err)
	}
}

// TestSessionWithResume: the sweep resumes a bound session's interrupted
// run with the bound agent, not AutoResume.AgentFor's.
func TestSessionWithResume(t *testing.T) {
	ctx := context.Background()
	m := hosttest.NewModel()
	store := memory.New()
	hs := hosttest.New(t, host.Options{Storage: store, Model: m, Agent: host.Agent{Model: hosttest.DefaultModel},
		AutoResume: &host.AutoResume{AgentFor: func(context.Context, string) (host.Agent, error) { return host.Agent{Model: "test/agentfor"}, nil }}})
	<-hs.Host.SweepDone()
	now := time.Now().UTC()
	// A run whose process died after it began.
	if err := store.Append(ctx, "crashed",
		ledger.Event{ID: "evt_1", Kind: ledger.KindInput, Time: now, RunID: "run_1", Input: &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("hi")}}},
		ledger.Event{ID: "evt_2", Kind: ledger.KindRunStart, Time: now, RunID: "run_1", RunStart: &ledger.RunStart{Inputs: []string{"msg_1"}, ResponseID: "resp_1", Model: hosttest.DefaultModel}},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Host.SessionWith("crashed", host.Agent{Model: "test/bound"}); err != nil {
		t.Fatal(err)
	}
	rep, err := hs.Host.Sweep(ctx)
	if err != nil || rep.Resumed != 1 {
		t.Fatalf("the sweep: %+v %v", rep, err)
	}
	waitRequests(t, m, 1)
	if got := m.Requests()[0].Model; got != "test/bound" {
		t.Fatalf("the resumed run asked %s, want the bound agent's model", got)
	}
}

// TestSessionWithDecision: a decision that continues a bound session's
// parked run runs the bound agent (its tools, its model and system
// prompt), not the host's, which has neither the tool nor the prompt.
func TestSessionWithDecision(t *testing.T) {
	ctx := context.Background()
	m := hosttest.NewModel()
	hs := hosttest.New(t, host.Options{Storage: memory.New(), Model: m, ApprovalSecret: []byte("0123456789abcdef0123456789abcdef"),
		Agent: host.Agent{Model: hosttest.DefaultModel, System: "host"}})
	var published atomic.Int64
	sess, err := hs.Host.SessionWith("bound", host.Agent{Name: "writer", Model: "test/writer", System: "You write.",
		Tools: []host.Tool{host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			published.Add(1)
			return host.ToolResult{Output: "published"}, nil
		})}})
	if err != nil {
		t.Fatal(err)
	}
	m.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{}`}}})
	res, err := sess.Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 {
		t.Fatalf("%+v %v; want approval_required", res, err)
	}
	run, err := hs.Host.Session("bound").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	final, err := run.Wait(ctx)
	if err != nil || final.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("after the approval: %+v %v, published %d times", final, err, published.Load())
	}
	r := m.Requests()[m.RequestCount()-1]
	if r.Model != "test/writer" || r.System != "You write." {
		t.Errorf("the continuation's pass: %s %q; want the bound agent's", r.Model, r.System)
	}
}
