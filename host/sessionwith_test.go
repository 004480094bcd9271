package host_test

import (
	"context"
	"errors"
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
