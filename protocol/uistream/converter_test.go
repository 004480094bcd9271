package uistream

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// chunks runs updates through a converter of run "run1" and returns the
// chunks it sent, one JSON line each, and whether the message ended.
func chunks(t *testing.T, conv *Converter, updates ...host.Update) (string, bool) {
	t.Helper()
	var lines []string
	conv.emit = func(ch Chunk) error {
		b, err := json.Marshal(ch)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
		return nil
	}
	done := false
	for i, u := range updates {
		if done {
			t.Fatalf("update %d after the message ended", i)
		}
		var err error
		if done, err = conv.Update(u); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(lines, "\n"), done
}

// prog is a progress update of run1.
func prog(p host.Progress) host.Update {
	p.RunID = "run1"
	return host.Update{Progress: &p}
}

func respStart(id string) host.Update {
	return prog(host.Progress{Type: host.ProgressResponseStart, ResponseID: id})
}

func text(id string, offset int, delta string) host.Update {
	return prog(host.Progress{Type: host.ProgressText, ResponseID: id, Offset: offset, Delta: delta})
}

func runEnd(status ledger.RunStatus, reason string) host.Update {
	return prog(host.Progress{Type: host.ProgressRunEnd, Status: status, Reason: reason})
}

func lines(ls ...string) string { return strings.Join(ls, "\n") }

func checkChunks(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("chunks:\n%s\nwant:\n%s", got, want)
	}
}

// TestUIChunksToolRun: a pass that calls a tool, then a pass that answers,
// as the SDK's client expects them: a step per pass, the text part ended
// before the tool part, the tool's JSON output as JSON, finish stop.
func TestUIChunksToolRun(t *testing.T) {
	got, done := chunks(t, NewConverter("run1", "run1", nil),
		respStart("r1"),
		text("r1", 0, "Let me "),
		text("r1", 7, "look."),
		prog(host.Progress{Type: host.ProgressToolStart, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c1", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`)}}),
		prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c1", Name: "get_account", Output: `{"plan":"team"}`}}),
		prog(host.Progress{Type: host.ProgressToolStart, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c2", Name: "echo", Input: json.RawMessage(`{}`)}}),
		prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c2", Name: "echo", Output: `plain text`}}),
		prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c3", Name: "nope", Output: "error: there is no tool named \"nope\"", IsError: true}}),
		respStart("r2"),
		text("r2", 0, "The plan is team."),
		runEnd(ledger.RunCompleted, ""),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Let me "}`,
		`{"type":"text-delta","id":"text-r1","delta":"look."}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"get_account","input":{"account_id":"42"}}`,
		`{"type":"tool-output-available","toolCallId":"c1","output":{"plan":"team"}}`,
		`{"type":"tool-input-available","toolCallId":"c2","toolName":"echo","input":{}}`,
		`{"type":"tool-output-available","toolCallId":"c2","output":"plain text"}`,
		`{"type":"tool-input-available","toolCallId":"c3","toolName":"nope","input":{}}`,
		`{"type":"tool-output-error","toolCallId":"c3","errorText":"error: there is no tool named \"nope\""}`,
		`{"type":"finish-step"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r2"}`,
		`{"type":"text-delta","id":"text-r2","delta":"The plan is team."}`,
		`{"type":"text-end","id":"text-r2"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"stop"}`,
	))
	if !done {
		t.Error("the run ended, the message did not")
	}
}

// TestUIChunksReasoningAndRetry: reasoning ends when the text starts; a
// retry takes the failed attempt's parts back with reset-step, and the
// retry streams into the same ids again; a retry before anything streamed
// sends nothing.
func TestUIChunksReasoningAndRetry(t *testing.T) {
	retry := prog(host.Progress{Type: host.ProgressRetry, ResponseID: "r1", Retry: &host.RetryInfo{Reason: "HTTP 503", Attempt: 1, DelayMS: 10, Reset: true}})
	got, _ := chunks(t, NewConverter("run1", "run1", nil),
		respStart("r1"),
		retry, // nothing streamed yet
		prog(host.Progress{Type: host.ProgressReasoning, ResponseID: "r1", Delta: "Hmm."}),
		text("r1", 0, "Hel"),
		retry,
		prog(host.Progress{Type: host.ProgressReasoning, ResponseID: "r1", Delta: "Hmm!"}),
		text("r1", 0, "Hello"),
		runEnd(ledger.RunCompleted, ""),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"reasoning-start","id":"reasoning-r1"}`,
		`{"type":"reasoning-delta","id":"reasoning-r1","delta":"Hmm."}`,
		`{"type":"reasoning-end","id":"reasoning-r1"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Hel"}`,
		`{"type":"reset-step"}`,
		`{"type":"reasoning-start","id":"reasoning-r1"}`,
		`{"type":"reasoning-delta","id":"reasoning-r1","delta":"Hmm!"}`,
		`{"type":"reasoning-end","id":"reasoning-r1"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Hello"}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"stop"}`,
	))
}

// TestUIChunksRunEnds: how each end of a run ends the message.
func TestUIChunksRunEnds(t *testing.T) {
	for _, tc := range []struct {
		status ledger.RunStatus
		reason string
		want   string
	}{
		{ledger.RunFailed, "the model endpoint answered HTTP 401", `{"type":"error","errorText":"the run failed: the model endpoint answered HTTP 401"}` + "\n" + `{"type":"finish","finishReason":"error"}`},
		{ledger.RunTimedOut, "", `{"type":"error","errorText":"the run timed_out"}` + "\n" + `{"type":"finish","finishReason":"error"}`},
		{ledger.RunCancelled, "cancelled by the user", `{"type":"abort","reason":"cancelled by the user"}`},
		{ledger.RunCancelled, "", `{"type":"abort","reason":"cancelled"}`},
		{ledger.RunInterrupted, "", `{"type":"finish","finishReason":"interrupted"}`},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			got, done := chunks(t, NewConverter("run1", "run1", nil), respStart("r1"), text("r1", 0, "Hi"), runEnd(tc.status, tc.reason))
			checkChunks(t, got, lines(
				`{"type":"start","messageId":"run1"}`,
				`{"type":"start-step"}`,
				`{"type":"text-start","id":"text-r1"}`,
				`{"type":"text-delta","id":"text-r1","delta":"Hi"}`,
				`{"type":"text-end","id":"text-r1"}`,
				`{"type":"finish-step"}`,
				tc.want,
			))
			if !done {
				t.Error("the message did not end")
			}
		})
	}
}

// TestUIChunksParkedThenApproved: a run that parks for an approval ends
// its message with the request and finish tool-calls; the stream that
// follows the continued run (the client's message seeded with the parked
// run and the person's answer) sends neither the call's input nor the
// decision again, only what follows, into the same message.
func TestUIChunksParkedThenApproved(t *testing.T) {
	input := json.RawMessage(`{"title":"Hello"}`)
	expires := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	got, done := chunks(t, NewConverter("run1", "run1", nil),
		respStart("r1"),
		text("r1", 0, "Let me publish."),
		prog(host.Progress{Type: host.ProgressApprovalRequested, Approval: &host.ApprovalInfo{ApprovalID: "a1", CallID: "c1", Tool: "publish_post",
			Input: input, Summary: `publish_post {"title":"Hello"}`, Reason: "the tool has an external effect", State: ledger.ApprovalPending, ExpiresAt: expires, Token: "secret"}}),
		runEnd(ledger.RunApprovalRequired, "waiting for approval"),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Let me publish."}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"publish_post","input":{"title":"Hello"}}`,
		`{"type":"tool-approval-request","toolCallId":"c1","approvalId":"a1","reason":"the tool has an external effect","approvalDescriptor":{"summary":"publish_post {\"title\":\"Hello\"}","expiresAt":"2026-12-02T10:00:00Z"}}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"tool-calls"}`,
	))
	if !done {
		t.Error("the parked run's message did not end")
	}

	parked := ledger.Transcript{Items: []ledger.Item{
		{ID: "m1", Kind: ledger.ItemUser, RunID: "run1", Text: "publish"},
		{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Text: "Let me publish.", Status: ledger.StatusApprovalRequired,
			ToolCalls: []ledger.ItemToolCall{{ID: "c1", Name: "publish_post", Input: input, Status: ledger.ToolApprovalRequired, Approval: ledger.ApprovalPending, ApprovalID: "a1"}}},
	}}
	for _, tc := range []struct {
		name     string
		decision ledger.ApprovalState
		result   *host.ToolInfo
		want     string
	}{
		{"approved", ledger.ApprovalApproved, &host.ToolInfo{CallID: "c1", Name: "publish_post", Output: `{"status":"published"}`},
			`{"type":"tool-output-available","toolCallId":"c1","output":{"status":"published"}}`},
		{"denied", ledger.ApprovalDenied, &host.ToolInfo{CallID: "c1", Name: "publish_post", Output: "error: a person denied this call (ui)", IsError: true},
			`{"type":"tool-output-denied","toolCallId":"c1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := NewConverter("run1", "msg-client", nil)
			conv.Seed(parked)
			conv.Answered("c1", "a1")
			updates := []host.Update{
				prog(host.Progress{Type: host.ProgressApprovalDecided, Approval: &host.ApprovalInfo{ApprovalID: "a1", CallID: "c1", Tool: "publish_post", Input: input, State: tc.decision}}),
			}
			if tc.decision == ledger.ApprovalApproved {
				updates = append(updates, prog(host.Progress{Type: host.ProgressToolStart, Tool: &host.ToolInfo{CallID: "c1", Name: "publish_post", Input: input}}))
			}
			updates = append(updates,
				prog(host.Progress{Type: host.ProgressToolEnd, Tool: tc.result}),
				respStart("r2"),
				text("r2", 0, "Done."),
				runEnd(ledger.RunCompleted, ""),
			)
			got, _ := chunks(t, conv, updates...)
			checkChunks(t, got, lines(
				`{"type":"start","messageId":"msg-client"}`,
				tc.want,
				`{"type":"start-step"}`,
				`{"type":"text-start","id":"text-r2"}`,
				`{"type":"text-delta","id":"text-r2","delta":"Done."}`,
				`{"type":"text-end","id":"text-r2"}`,
				`{"type":"finish-step"}`,
				`{"type":"finish","finishReason":"stop"}`,
			))
		})
	}

	// Decided elsewhere (POST /v1/approvals/{id}) while the client still
	// shows the request: the decision reaches it.
	conv := NewConverter("run1", "run1", nil)
	conv.Seed(parked)
	got, _ = chunks(t, conv,
		prog(host.Progress{Type: host.ProgressApprovalDecided, Approval: &host.ApprovalInfo{ApprovalID: "a1", CallID: "c1", Tool: "publish_post", State: ledger.ApprovalExpired}}),
		prog(host.Progress{Type: host.ProgressToolEnd, Tool: &host.ToolInfo{CallID: "c1", Name: "publish_post", Output: "error: nobody approved this call in time", IsError: true}}),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"tool-approval-response","approvalId":"a1","approved":false}`,
		`{"type":"tool-output-error","toolCallId":"c1","errorText":"error: nobody approved this call in time"}`,
	))
}

// TestUIChunksResumeReplay: a resumed stream replays the snapshot (a
// finished pass with its tool call, the pass in flight with its partial
// reasoning and text, parts left open), then goes on with the progress
// after it; a delta that overlaps what the snapshot held is trimmed, so
// no character comes twice; progress of another run is ignored.
func TestUIChunksResumeReplay(t *testing.T) {
	snap := &host.Snapshot{
		Transcript: ledger.Transcript{Items: []ledger.Item{
			{ID: "m0", Kind: ledger.ItemUser, RunID: "run0", Text: "earlier"},
			{ID: "r0", Kind: ledger.ItemResponse, RunID: "run0", Text: "an earlier run", Status: ledger.StatusCompleted},
			{ID: "m1", Kind: ledger.ItemUser, RunID: "run1", Text: "hi"},
			{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Text: "Looking.", Status: ledger.StatusCompleted,
				ToolCalls: []ledger.ItemToolCall{{ID: "c1", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`), Status: ledger.ToolDone, Output: `{"plan":"team"}`}}},
			{ID: "r2", Kind: ledger.ItemResponse, RunID: "run1", Reasoning: "So…", Text: "The pl", Status: ledger.StatusStreaming},
		}},
		Status: host.Status{State: host.StateRunning, RunID: "run1"},
		Cursor: host.Cursor{RunID: "run1", Seq: 9},
	}
	other := host.Progress{Type: host.ProgressText, RunID: "run2", ResponseID: "rx", Delta: "not ours"}
	got, done := chunks(t, NewConverter("run1", "run1", nil),
		host.Update{Snapshot: snap},
		text("r2", 6, "an is"),
		text("r2", 8, " is team."), // overlaps "is" already sent
		host.Update{Progress: &other},
		runEnd(ledger.RunCompleted, ""),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Looking."}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"get_account","input":{"account_id":"42"}}`,
		`{"type":"tool-output-available","toolCallId":"c1","output":{"plan":"team"}}`,
		`{"type":"finish-step"}`,
		`{"type":"start-step"}`,
		`{"type":"reasoning-start","id":"reasoning-r2"}`,
		`{"type":"reasoning-delta","id":"reasoning-r2","delta":"So…"}`,
		`{"type":"reasoning-end","id":"reasoning-r2"}`,
		`{"type":"text-start","id":"text-r2"}`,
		`{"type":"text-delta","id":"text-r2","delta":"The pl"}`,
		`{"type":"text-delta","id":"text-r2","delta":"an is"}`,
		`{"type":"text-delta","id":"text-r2","delta":" team."}`,
		`{"type":"text-end","id":"text-r2"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"stop"}`,
	))
	if !done {
		t.Error("the message did not end")
	}
}

// TestUIChunksEndedRunSnapshot: a run that ended before its stream could
// follow it (or that another host ran) is sent whole from the snapshot,
// then its end; a parked one ends with its approval request.
func TestUIChunksEndedRunSnapshot(t *testing.T) {
	snap := func(state host.State, reason string, items ...ledger.Item) host.Update {
		return host.Update{Snapshot: &host.Snapshot{Transcript: ledger.Transcript{Items: items}, Status: host.Status{State: state, RunID: "run1", Reason: reason}}}
	}
	got, done := chunks(t, NewConverter("run1", "run1", nil), snap(host.StateApprovalRequired, "waiting for approval",
		ledger.Item{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Text: "Publishing.", Status: ledger.StatusApprovalRequired,
			ToolCalls: []ledger.ItemToolCall{{ID: "c1", Name: "publish_post", Input: json.RawMessage(`{}`), Status: ledger.ToolApprovalRequired, Approval: ledger.ApprovalPending, ApprovalID: "a1"}}}))
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Publishing."}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"publish_post","input":{}}`,
		`{"type":"tool-approval-request","toolCallId":"c1","approvalId":"a1"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"tool-calls"}`,
	))
	if !done {
		t.Error("the message did not end")
	}

	got, _ = chunks(t, NewConverter("run1", "run1", nil), snap(host.StateFailed, "HTTP 500",
		ledger.Item{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Text: "Part", Status: ledger.StatusFailed}))
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Part"}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"finish-step"}`,
		`{"type":"error","errorText":"the run failed: HTTP 500"}`,
		`{"type":"finish","finishReason":"error"}`,
	))

	// A run another host runs: each snapshot sends what is new.
	conv := NewConverter("run1", "run1", nil)
	item := ledger.Item{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Text: "One", Status: ledger.StatusCompleted,
		ToolCalls: []ledger.ItemToolCall{{ID: "c1", Name: "t", Input: json.RawMessage(`{}`), Status: ledger.ToolRunning}}}
	first, _ := chunks(t, conv, snap(host.StateRunning, "", item))
	item.ToolCalls[0].Status, item.ToolCalls[0].Output = ledger.ToolDone, "ok"
	second, done := chunks(t, conv, snap(host.StateCompleted, "", item,
		ledger.Item{ID: "r2", Kind: ledger.ItemResponse, RunID: "run1", Text: "Two", Status: ledger.StatusCompleted}))
	checkChunks(t, first+"\n"+second, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"One"}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"t","input":{}}`,
		`{"type":"tool-output-available","toolCallId":"c1","output":"ok"}`,
		`{"type":"finish-step"}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r2"}`,
		`{"type":"text-delta","id":"text-r2","delta":"Two"}`,
		`{"type":"text-end","id":"text-r2"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"stop"}`,
	))
	if !done {
		t.Error("the message did not end")
	}
}

// TestUIChunksRunApproval: a run's own approval request (no tool call: a
// budget that asks) is a data-approval part, and its decision one of the
// same id, which the client puts in its place.
func TestUIChunksRunApproval(t *testing.T) {
	expires := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	got, done := chunks(t, NewConverter("run1", "run1", nil),
		respStart("r1"),
		prog(host.Progress{Type: host.ProgressApprovalRequested, Approval: &host.ApprovalInfo{ApprovalID: "a1", Kind: "budget_exceeded",
			Reason: "budget_exceeded: tenant acme spent $1.20 of its $1.00 daily budget", Summary: "Approve to let it spend $0.50 more", State: ledger.ApprovalPending, ExpiresAt: expires}}),
		runEnd(ledger.RunApprovalRequired, "waiting for approval"),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"}`,
		`{"type":"data-approval","id":"a1","data":{"approvalId":"a1","kind":"budget_exceeded","state":"pending","reason":"budget_exceeded: tenant acme spent $1.20 of its $1.00 daily budget","summary":"Approve to let it spend $0.50 more","expiresAt":"2026-12-02T10:00:00Z"}}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"tool-calls"}`,
	))
	if !done {
		t.Error("the parked run's message did not end")
	}
	got, _ = chunks(t, NewConverter("run1", "run1", nil),
		prog(host.Progress{Type: host.ProgressApprovalDecided, Approval: &host.ApprovalInfo{ApprovalID: "a1", Kind: "budget_exceeded", State: ledger.ApprovalApproved}}),
		respStart("r1"),
		text("r1", 0, "Done."),
		runEnd(ledger.RunCompleted, ""),
	)
	checkChunks(t, got, lines(
		`{"type":"start","messageId":"run1"}`,
		`{"type":"data-approval","id":"a1","data":{"approvalId":"a1","kind":"budget_exceeded","state":"approved"}}`,
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Done."}`,
		`{"type":"text-end","id":"text-r1"}`,
		`{"type":"finish-step"}`,
		`{"type":"finish","finishReason":"stop"}`,
	))
}

// TestUIChunksRunApprovalSnapshot: a client that (re)connects to a run
// parked on its own request gets the request's data-approval part from the
// snapshot, then the message's end.
func TestUIChunksRunApprovalSnapshot(t *testing.T) {
	snap := &host.Snapshot{
		Transcript: ledger.Transcript{Items: []ledger.Item{
			{ID: "m1", Kind: ledger.ItemUser, RunID: "run1", Text: "go"},
			{ID: "r1", Kind: ledger.ItemResponse, RunID: "run1", Status: ledger.StatusApprovalRequired, Reason: "waiting for approval"},
		}},
		Status: host.Status{RunID: "run1", State: host.StateApprovalRequired, Reason: "waiting for approval",
			Approvals: []host.PendingApproval{{RunID: "run1", ApprovalID: "a1", Kind: "budget_exceeded", Reason: "budget_exceeded: spent", Summary: "Approve to go on"}}},
	}
	got, done := chunks(t, NewConverter("run1", "run1", nil), host.Update{Snapshot: snap})
	if !done || !strings.Contains(got, `{"type":"data-approval","id":"a1","data":{"approvalId":"a1","kind":"budget_exceeded","state":"pending","reason":"budget_exceeded: spent","summary":"Approve to go on"}}`) ||
		!strings.HasSuffix(got, `{"type":"finish","finishReason":"tool-calls"}`) {
		t.Errorf("chunks:\n%s\nwant the pending data-approval part, then the end", got)
	}
}

// TestUIChunksChildApproval: a sub-agent's child's requests, relayed to
// the parent's viewers (ApprovalInfo.SessionID set), are no part of the
// parent's message: its stream shows the delegate call running.
func TestUIChunksChildApproval(t *testing.T) {
	got, _ := chunks(t, NewConverter("run1", "run1", nil),
		respStart("r1"),
		prog(host.Progress{Type: host.ProgressToolStart, Tool: &host.ToolInfo{CallID: "c1", Name: "researcher", Input: json.RawMessage(`{"task":"x"}`)}}),
		prog(host.Progress{Type: host.ProgressApprovalRequested, Approval: &host.ApprovalInfo{ApprovalID: "a1", SessionID: "s.c1", CallID: "cc1", Tool: "publish", State: ledger.ApprovalPending}}),
		prog(host.Progress{Type: host.ProgressApprovalDecided, Approval: &host.ApprovalInfo{ApprovalID: "a1", SessionID: "s.c1", CallID: "cc1", Tool: "publish", State: ledger.ApprovalApproved}}),
	)
	if strings.Contains(got, "a1") || strings.Contains(got, "cc1") || !strings.Contains(got, `"toolCallId":"c1"`) {
		t.Errorf("chunks:\n%s", got)
	}
}

// TestBeginSendsTheStartOnce: Begin sends the start at once when the run
// is known, and the run's updates then go on without a second; a
// converter that does not know its run yet sends nothing.
func TestBeginSendsTheStartOnce(t *testing.T) {
	conv := NewConverter("run1", "run1", nil)
	var begun []string
	conv.emit = func(ch Chunk) error {
		begun = append(begun, ch.Type)
		return nil
	}
	if err := conv.Begin(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(begun, " ") != "start" {
		t.Fatalf("Begin sent %v, want the start", begun)
	}
	got, _ := chunks(t, conv, respStart("r1"), text("r1", 0, "Hi"))
	checkChunks(t, got, lines(
		`{"type":"start-step"}`,
		`{"type":"text-start","id":"text-r1"}`,
		`{"type":"text-delta","id":"text-r1","delta":"Hi"}`,
	))
	unknown := NewConverter("", "", nil)
	unknown.emit = func(ch Chunk) error {
		t.Errorf("a converter without its run sent %s", ch.Type)
		return nil
	}
	if err := unknown.Begin(); err != nil {
		t.Fatal(err)
	}
}
