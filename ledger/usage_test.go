package ledger_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

// fixtureUsage parses an OpenRouter usage object from the fixtures into a
// ledger.Usage, the way the provider client records it.
func fixtureUsage(t *testing.T, name string) ledger.Usage {
	t.Helper()
	var w struct {
		PromptTokens        int64   `json:"prompt_tokens"`
		CompletionTokens    int64   `json:"completion_tokens"`
		TotalTokens         int64   `json:"total_tokens"`
		Cost                float64 `json:"cost"`
		IsBYOK              *bool   `json:"is_byok"`
		PromptTokensDetails struct {
			CachedTokens     int64 `json:"cached_tokens"`
			CacheWriteTokens int64 `json:"cache_write_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
		CostDetails struct {
			UpstreamInferenceCost float64 `json:"upstream_inference_cost"`
		} `json:"cost_details"`
	}
	if err := json.Unmarshal(fixtures.Bytes(name), &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ledger.Usage{PromptTokens: w.PromptTokens, CompletionTokens: w.CompletionTokens, TotalTokens: w.TotalTokens,
		CachedTokens: w.PromptTokensDetails.CachedTokens, CacheWriteTokens: w.PromptTokensDetails.CacheWriteTokens,
		ReasoningTokens: w.CompletionTokensDetails.ReasoningTokens, Cost: w.Cost, IsBYOK: w.IsBYOK,
		UpstreamCost: w.CostDetails.UpstreamInferenceCost}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// usageLedger builds a session ledger with one run per usage set, each
// usage on its own step.
func usageLedger(runs ...[]ledger.Usage) []ledger.Event {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var evs []ledger.Event
	for _, steps := range runs {
		runID := ledger.NewID("run")
		msg := ledger.NewID("msg")
		evs = append(evs,
			ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
				Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("hi")}}},
			ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
				RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: ledger.NewID("resp")}})
		for j, u := range steps {
			evs = append(evs, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindStep, Time: now, RunID: runID,
				Step: &ledger.Step{ResponseID: ledger.NewID("resp"), Index: j, Text: "ok", Usage: u}})
		}
		evs = append(evs, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: now, RunID: runID,
			RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}})
	}
	return evs
}

func TestUsageOfFixtures(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		billed  float64
	}{
		{"usage_byok.json", 0.02772},              // BYOK, fee charged: cost + upstream
		{"usage_byok_fee_waived.json", 0.0002011}, // BYOK, fee waived: 0 + upstream
		{"usage_credits.json", 0.0264},            // credits: upstream == cost, not added
		{"usage_minimal_legacy.json", 0.95},       // is_byok absent: cost only, never the sum
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			u := fixtureUsage(t, tc.fixture)
			got := ledger.UsageOf(usageLedger([]ledger.Usage{u}))
			if !near(got.Cost, tc.billed) || len(got.Runs) != 1 || !near(got.Runs[0].Cost, tc.billed) || got.Runs[0].Steps != 1 {
				t.Fatalf("usage = %+v, want cost %v", got, tc.billed)
			}
			if got.Total.PromptTokens != u.PromptTokens || got.Total.TotalTokens != u.TotalTokens || got.Total.IsBYOK != nil {
				t.Errorf("total = %+v, from %+v", got.Total, u)
			}
		})
	}
	t.Run("mixed runs and a compaction", func(t *testing.T) {
		byok, waived := fixtureUsage(t, "usage_byok.json"), fixtureUsage(t, "usage_byok_fee_waived.json")
		credits, legacy := fixtureUsage(t, "usage_credits.json"), fixtureUsage(t, "usage_minimal_legacy.json")
		evs := usageLedger([]ledger.Usage{byok, credits}, []ledger.Usage{waived}, nil)
		// A compaction in the second run, billed with the legacy usage.
		second := evs[6].RunID
		evs = append(evs, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindCompaction, Time: evs[0].Time, RunID: second,
			Compaction: &ledger.Compaction{Summary: "s", Through: evs[0].ID, Usage: legacy}})
		got := ledger.UsageOf(evs)
		if len(got.Runs) != 3 {
			t.Fatalf("runs = %+v", got.Runs)
		}
		wantRuns := []struct {
			cost  float64
			steps int
		}{{0.02772 + 0.0264, 2}, {0.0002011 + 0.95, 1}, {0, 0}}
		for i, w := range wantRuns {
			if r := got.Runs[i]; !near(r.Cost, w.cost) || r.Steps != w.steps {
				t.Errorf("run %d = %+v, want cost %v, %d steps", i, r, w.cost, w.steps)
			}
		}
		if want := 0.02772 + 0.0264 + 0.0002011 + 0.95; !near(got.Cost, want) {
			t.Errorf("cost = %v, want %v", got.Cost, want)
		}
		if want := byok.PromptTokens + credits.PromptTokens + waived.PromptTokens + legacy.PromptTokens; got.Total.PromptTokens != want {
			t.Errorf("prompt tokens = %d, want %d", got.Total.PromptTokens, want)
		}
	})
}

// TestUsageOfFuel: the fuel of metered tool calls sums per run and over
// the session; results without fuel add nothing.
func TestUsageOfFuel(t *testing.T) {
	evs := usageLedger([]ledger.Usage{{TotalTokens: 1}}, []ledger.Usage{{TotalTokens: 1}})
	runs := []string{evs[0].RunID, evs[len(evs)-1].RunID}
	for i, fuel := range []int64{100, 0, 23} {
		evs = append(evs, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindToolResult, RunID: runs[min(i, 1)],
			ToolResult: &ledger.ToolResult{CallID: ledger.NewID("call"), Name: "t", Output: "ok", Fuel: fuel}})
	}
	su := ledger.UsageOf(evs)
	if su.Fuel != 123 || len(su.Runs) != 2 || su.Runs[0].Fuel != 100 || su.Runs[1].Fuel != 23 || su.Total.TotalTokens != 2 {
		t.Errorf("fuel %d, runs %+v, tokens %d; want 123 = 100 + 23, and the tokens unchanged", su.Fuel, su.Runs, su.Total.TotalTokens)
	}
}

// TestUsageOfPolicyFuel: the fuel policies used counts with the tools',
// on the approval request they asked for and on the call's result.
func TestUsageOfPolicyFuel(t *testing.T) {
	run := ledger.NewID("run")
	evs := []ledger.Event{
		{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, RunID: run, RunStart: &ledger.RunStart{Agent: "a"}},
		{ID: ledger.NewID("evt"), Kind: ledger.KindApprovalRequest, RunID: run,
			ApprovalRequest: &ledger.ApprovalRequest{ApprovalID: "appr_1", CallID: "call_1", Name: "t", PolicyFuel: 7}},
		{ID: ledger.NewID("evt"), Kind: ledger.KindToolResult, RunID: run,
			ToolResult: &ledger.ToolResult{CallID: "call_1", Name: "t", Output: "ok", Fuel: 100, PolicyFuel: 9}},
	}
	su := ledger.UsageOf(evs)
	if su.Fuel != 116 || len(su.Runs) != 1 || su.Runs[0].Fuel != 116 {
		t.Errorf("fuel %d, runs %+v; want 116 = 7 + 100 + 9", su.Fuel, su.Runs)
	}
}
