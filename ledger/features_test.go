package ledger_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// TestEventFeatures: every feature is told by the events that use it, and
// by no event of the schema every build reads.
func TestEventFeatures(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	ev := func(kind ledger.Kind, set func(*ledger.Event)) ledger.Event {
		e := ledger.Event{ID: "evt_1", Kind: kind, Time: now, RunID: "run_1"}
		set(&e)
		return e
	}
	blob := "sha256:" + "0000000000000000000000000000000000000000000000000000000000000000"
	uses := map[ledger.Feature][]ledger.Event{
		ledger.FeatureFork: {ev(ledger.KindFork, func(e *ledger.Event) { e.RunID = ""; e.Fork = &ledger.Fork{Source: "s", At: "msg_1"} })},
		ledger.FeatureBlob: {
			ev(ledger.KindInput, func(e *ledger.Event) {
				e.Input = &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Blob: blob, Size: 9}}}
			}),
			ev(ledger.KindToolResult, func(e *ledger.Event) {
				e.ToolResult = &ledger.ToolResult{CallID: "c", Name: "t", Output: "…", OutputBlob: blob, OutputSize: 9}
			}),
		},
		ledger.FeatureTask: {
			ev(ledger.KindRunStart, func(e *ledger.Event) {
				e.RunStart = &ledger.RunStart{Inputs: []string{"msg_1"}, Task: &ledger.TaskRun{Schema: json.RawMessage(`{}`)}}
			}),
			ev(ledger.KindRunEnd, func(e *ledger.Event) {
				e.RunEnd = &ledger.RunEnd{Status: ledger.RunCompleted, Deliverable: json.RawMessage(`{"a":1}`)}
			}),
		},
		ledger.FeatureJournal: {ev(ledger.KindToolJournal, func(e *ledger.Event) {
			e.ToolJournal = &ledger.ToolJournal{CallID: "c", Name: "t", Entries: []ledger.JournalEntry{{Op: ledger.JournalHTTP}}}
		})},
		ledger.FeatureWait: {ev(ledger.KindToolJournal, func(e *ledger.Event) {
			e.ToolJournal = &ledger.ToolJournal{CallID: "c", Name: "t", Entries: []ledger.JournalEntry{{Op: ledger.JournalWaitEvent, Key: "k"}}}
		})},
		ledger.FeatureDecisionEdit: {
			ev(ledger.KindApprovalDecision, func(e *ledger.Event) {
				e.ApprovalDecision = &ledger.ApprovalDecision{ApprovalID: "a", Decision: ledger.DecisionEdit, Input: json.RawMessage(`{}`)}
			}),
			ev(ledger.KindApprovalDecision, func(e *ledger.Event) {
				e.ApprovalDecision = &ledger.ApprovalDecision{ApprovalID: "a", Decision: ledger.DecisionRespond, Response: "no"}
			}),
		},
		ledger.FeatureOverlap: {
			ev(ledger.KindInput, func(e *ledger.Event) {
				e.Input = &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("stop")}, Overlap: ledger.OverlapInterrupt}
			}),
			ev(ledger.KindRunEnd, func(e *ledger.Event) { e.RunEnd = &ledger.RunEnd{Status: ledger.RunCancelled, RolledBack: true} }),
		},
	}
	for _, f := range ledger.Features() {
		if len(uses[f]) == 0 {
			t.Fatalf("feature %q has no event here that uses it", f)
		}
		for _, e := range uses[f] {
			got := e.Features()
			if !slices.Contains(got, f) {
				t.Errorf("%s event %+v: features %v, want %q among them", e.Kind, e, got, f)
			}
			if !ledger.KnownFeature(f) || ledger.MissingFeatures(ledger.Features(), e) != nil {
				t.Errorf("%q: this build reads every feature", f)
			}
			if m := ledger.MissingFeatures(nil, e); !slices.Contains(m, f) {
				t.Errorf("%q: missing from nothing: %v", f, m)
			}
		}
	}
	if ledger.KnownFeature("teleport") {
		t.Fatal("an unknown feature is known")
	}
	plain := []ledger.Event{
		ev(ledger.KindInput, func(e *ledger.Event) {
			e.Input = &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("hi"), {Type: ledger.PartImage, MIME: "image/png", Data: []byte{1}}}}
		}),
		ev(ledger.KindRunStart, func(e *ledger.Event) { e.RunStart = &ledger.RunStart{Inputs: []string{"msg_1"}} }),
		ev(ledger.KindToolResult, func(e *ledger.Event) { e.ToolResult = &ledger.ToolResult{CallID: "c", Name: "t", Output: "ok"} }),
		ev(ledger.KindApprovalDecision, func(e *ledger.Event) {
			e.ApprovalDecision = &ledger.ApprovalDecision{ApprovalID: "a", Decision: ledger.DecisionApprove}
		}),
		ev(ledger.KindRunEnd, func(e *ledger.Event) { e.RunEnd = &ledger.RunEnd{Status: ledger.RunCompleted} }),
	}
	for _, e := range plain {
		if got := e.Features(); got != nil {
			t.Errorf("%s event: features %v, want none", e.Kind, got)
		}
	}
	// Missing features come once each, in the order of Features.
	all := append(slices.Clone(plain), uses[ledger.FeatureOverlap][0], uses[ledger.FeatureFork][0], uses[ledger.FeatureOverlap][1])
	if got := ledger.MissingFeatures([]ledger.Feature{ledger.FeatureBlob}, all...); !slices.Equal(got, []ledger.Feature{ledger.FeatureFork, ledger.FeatureOverlap}) {
		t.Fatalf("missing %v, want fork then overlap", got)
	}
}
