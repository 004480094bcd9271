package host_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSessionUsage(t *testing.T) {
	t.Run("from storage", func(t *testing.T) {
		hs := newHarness(t, fakemodel.Options{}, host.Agent{})
		// A BYOK call with its fee (0.00132 + 0.0264), then a legacy one
		// (no is_byok: cost only).
		byok, legacy := true, ledger.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, Cost: 0.95, UpstreamCost: 19}
		now := time.Now().UTC()
		var evs []ledger.Event
		for i, u := range []ledger.Usage{{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, Cost: 0.00132, IsBYOK: &byok, UpstreamCost: 0.0264}, legacy} {
			run, msg := ledger.NewID("run"), ledger.NewID("msg")
			evs = append(evs,
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: run,
					Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("hi")}}},
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: run,
					RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: ledger.NewID("resp")}},
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindStep, Time: now, RunID: run,
					Step: &ledger.Step{ResponseID: ledger.NewID("resp"), Index: i, Text: "ok", Usage: u}},
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: now, RunID: run,
					RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}})
		}
		if err := hs.store.Append(context.Background(), "billed", evs...); err != nil {
			t.Fatal(err)
		}
		got, err := hs.host.Session("billed").Usage(context.Background())
		if err != nil || len(got.Runs) != 2 || !near(got.Cost, 0.02772+0.95) {
			t.Fatalf("usage = %+v, %v", got, err)
		}
		empty, err := hs.host.Session("none").Usage(context.Background())
		if err != nil || empty.Cost != 0 || len(empty.Runs) != 0 {
			t.Errorf("empty session usage = %+v, %v", empty, err)
		}
	})
	t.Run("end to end", func(t *testing.T) {
		byok := &fakemodel.Usage{PromptTokens: 100, CompletionTokens: 10, Cost: 0.001, IsBYOK: fakemodel.Bool(true), UpstreamCost: 0.02}
		credits := &fakemodel.Usage{PromptTokens: 200, CompletionTokens: 20, Cost: 0.03, IsBYOK: fakemodel.Bool(false)}
		hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
			{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"x"}`}}, Usage: byok},
			{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"Fine","count":1}`}}, Usage: byok},
			{Text: "second run", Usage: credits},
		}}, host.Agent{})
		out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Title.", SessionID: "e2e",
			Deliverable: host.Deliverable{Schema: titleSchema}})
		if out.Status != host.OutcomeSubmitted || !near(out.Cost, 2*0.021) {
			t.Fatalf("outcome = %+v", out)
		}
		res, err := hs.host.Session("e2e").Send(context.Background(), "thanks", host.SendOptions{})
		if err != nil || !near(res.Cost, 0.03) {
			t.Fatalf("send = %+v, %v", res, err)
		}
		got, err := hs.host.Session("e2e").Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Runs) != 2 || got.Runs[0].RunID != out.RunID || got.Runs[0].Steps != 2 || !near(got.Runs[0].Cost, 0.042) ||
			got.Runs[1].RunID != res.RunID || got.Runs[1].Steps != 1 || !near(got.Runs[1].Cost, 0.03) {
			t.Errorf("runs = %+v", got.Runs)
		}
		if !near(got.Cost, 0.072) || got.Total.PromptTokens != 400 || got.Total.CompletionTokens != 40 || got.Total.TotalTokens != 440 {
			t.Errorf("total = %+v, cost %v", got.Total, got.Cost)
		}
	})
}
