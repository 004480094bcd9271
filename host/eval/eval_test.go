package eval_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

func lookupTool(calls *atomic.Int32) host.Tool {
	return host.NewTool(host.ToolSpec{Name: "lookup", Description: "Look a word up.", Effect: host.EffectExternal,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)},
		func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			calls.Add(1)
			return host.ToolResult{Output: `{"found":` + string(c.Input) + `}`}, nil
		})
}

func client(t *testing.T, srv *fakemodel.Server) host.Model {
	t.Helper()
	c, err := provider.New(provider.Config{BaseURL: srv.URL(), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startModel(t *testing.T, opts fakemodel.Options) *fakemodel.Server {
	t.Helper()
	srv, err := fakemodel.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// record makes session s1 in a store: a turn that calls the lookup tool,
// then a chat turn.
func record(t *testing.T, calls *atomic.Int32) storage.Storage {
	t.Helper()
	store := memory.New()
	h, err := host.New(host.Options{Storage: store, Model: client(t, startModel(t, fakemodel.Options{})),
		Agent: host.Agent{Model: "recorded/model", Tools: []host.Tool{lookupTool(calls)}, ToolApprovals: map[string]host.ApprovalMode{"lookup": host.ApproveAlways}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, text := range []string{"please lookup q: alpha", "thanks"} {
		if res, err := h.Session("s1").Send(ctx, text, host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("record %q: %+v %v", text, res, err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("recording: %d calls", calls.Load())
	}
	return store
}

// TestEvalMatches: a candidate that behaves as the recorded model gets every
// tool call answered from the recording (the tool never runs), and
// diverges nowhere; its figures are reported beside the recording's.
func TestEvalMatches(t *testing.T) {
	var calls atomic.Int32
	store := record(t, &calls)
	candidate := startModel(t, fakemodel.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := eval.Run(ctx, eval.Options{Source: store, Model: client(t, candidate),
		Agent: host.Agent{Model: "candidate/model", Tools: []host.Tool{lookupTool(&calls)}}, Sessions: []string{"s1", "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the tool ran during the replay: %d calls", calls.Load())
	}
	s := rep.Sessions[0]
	if s.Error != "" || s.Diverged || s.DivergedAt != -1 || s.Unmatched != 0 || len(s.Turns) != 2 {
		t.Fatalf("session: %+v", s)
	}
	if s.Candidate.Status != ledger.RunCompleted || s.Candidate.Steps != 3 || s.Recorded.Steps != 3 || s.Candidate.ToolCalls != 1 ||
		s.Candidate.PromptTokens == 0 || s.Candidate.CompletionTokens == 0 {
		t.Fatalf("figures: recorded %+v, candidate %+v", s.Recorded, s.Candidate)
	}
	if !s.Turns[0].SameCalls || !s.Turns[0].SameText || s.Turns[0].CandidateCalls[0] != `lookup {"q":"alpha"}` {
		t.Fatalf("turn 0: %+v", s.Turns[0])
	}
	if rep.Sessions[1].Error == "" || !strings.Contains(rep.Sessions[1].Error, "no session nope") {
		t.Fatalf("a missing session: %+v", rep.Sessions[1])
	}
	if rep.Total.Sessions != 1 || rep.Total.Errors != 1 || rep.Total.Completed != 1 || rep.Total.Diverged != 0 || rep.Model != "candidate/model" {
		t.Fatalf("total: %+v", rep.Total)
	}
	// Nothing was written where the sessions came from.
	if evs, _ := store.Load(ctx, "s1"); ledger.UsageOf(evs).Runs[1].Steps != 1 || len(ledger.UsageOf(evs).Runs) != 2 {
		t.Fatal("the source changed")
	}
}

// TestEvalDiverges: a candidate that calls the tool with arguments the
// recording lacks gets "no recorded result" (the tool does not run), and
// the report names the first turn that diverged.
func TestEvalDiverges(t *testing.T) {
	var calls atomic.Int32
	store := record(t, &calls)
	candidate := startModel(t, fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{Name: "lookup", Arguments: `{"q":"beta"}`}}},
		{Text: "could not find it"},
		{Text: "You said: thanks"},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := eval.Run(ctx, eval.Options{Source: store, Model: client(t, candidate), Agent: host.Agent{Model: "candidate/model"}, Sessions: []string{"s1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Sessions[0]
	if calls.Load() != 1 {
		t.Fatalf("the tool ran during the replay: %d calls", calls.Load())
	}
	if !s.Diverged || s.DivergedAt != 0 || s.Unmatched != 1 || !strings.Contains(s.Divergence, "without a recorded result") ||
		s.Turns[0].SameCalls || !s.Turns[1].SameText || rep.Total.Diverged != 1 || rep.Total.Unmatched != 1 {
		t.Fatalf("report: %+v", s)
	}
	reqs := candidate.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "tool" || !strings.HasPrefix(last.Text, "error: "+eval.NoRecordedResult) {
		t.Fatalf("the candidate was told %q", last.Text)
	}
}

func TestEvalOptions(t *testing.T) {
	if _, err := eval.Run(context.Background(), eval.Options{Sessions: []string{"../x"}}); !errors.Is(err, eval.ErrInvalidOptions) ||
		!strings.Contains(err.Error(), "Source") || !strings.Contains(err.Error(), "../x") {
		t.Fatalf("got %v", err)
	}
}
