package ledger_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// A session's events project to the transcript a client renders: the user
// turn, the pass that asked for a tool (with its result), and the answer.
func ExampleProjectSession() {
	at := func(sec int) time.Time { return time.Date(2025, 1, 2, 3, 4, sec, 0, time.UTC) }
	events := []ledger.Event{
		{ID: "ev_1", Kind: ledger.KindInput, Time: at(1),
			Input: &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("What time is it?")}}},
		{ID: "ev_2", Kind: ledger.KindRunStart, Time: at(2), RunID: "run_1",
			RunStart: &ledger.RunStart{Inputs: []string{"msg_1"}, ResponseID: "resp_1"}},
		{ID: "ev_3", Kind: ledger.KindStep, Time: at(3), RunID: "run_1",
			Step: &ledger.Step{ResponseID: "resp_1", NextResponseID: "resp_2",
				ToolCalls: []ledger.ToolCall{{ID: "call_1", Name: "clock", Arguments: `{"tz":"UTC"}`}},
				Raw:       json.RawMessage(`{"provider":"detail"}`)}},
		{ID: "ev_4", Kind: ledger.KindToolResult, Time: at(4), RunID: "run_1",
			ToolResult: &ledger.ToolResult{CallID: "call_1", Name: "clock", Output: "03:04"}},
		{ID: "ev_5", Kind: ledger.KindStep, Time: at(5), RunID: "run_1",
			Step: &ledger.Step{ResponseID: "resp_2", Index: 1, Text: "It is 03:04 UTC.",
				Usage: ledger.Usage{PromptTokens: 40, CompletionTokens: 8, TotalTokens: 48, Cost: 0.0001}}},
		{ID: "ev_6", Kind: ledger.KindRunEnd, Time: at(6), RunID: "run_1",
			RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}},
	}
	t := ledger.WireTranscript(ledger.ProjectSession("sess_1", events))
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	// Output:
	// {"session_id":"sess_1","items":[{"id":"msg_1","kind":"user","run_id":"run_1","text":"What time is it?","time":"2025-01-02T03:04:01Z"},{"id":"resp_1","kind":"response","run_id":"run_1","text":"","status":"completed","tool_calls":[{"id":"call_1","name":"clock","input":{"tz":"UTC"},"status":"done","output":"03:04"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},"time":"2025-01-02T03:04:03Z"},{"id":"resp_2","kind":"response","run_id":"run_1","text":"It is 03:04 UTC.","status":"completed","usage":{"prompt_tokens":40,"completion_tokens":8,"total_tokens":48,"cost":0.0001},"cost":0.0001,"time":"2025-01-02T03:04:05Z"}]}
}

// Encode writes one line per event; Decode refuses a ledger of a schema
// version this build does not speak.
func ExampleDecode() {
	e := ledger.Event{ID: "ev_1", Kind: ledger.KindPoke, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		RunID: "run_1", Poke: &ledger.Poke{Text: "please finish <the> task"}}
	line, _ := ledger.Encode(e)
	fmt.Println(string(line))

	_, err := ledger.Decode([]byte(`{"v":2,"id":"ev_9","kind":"poke"}`))
	fmt.Println(err)
	// Output:
	// {"v":1,"id":"ev_1","kind":"poke","time":"2025-01-02T03:04:05Z","run_id":"run_1","poke":{"text":"please finish <the> task"}}
	// ledger: event "ev_9" (poke): field "v": unsupported schema version 2, newer than this build's 1: upgrade agentic-host to read it
}

// ExampleSanitizeConversation heals a history whose process died between
// a tool call and its result, and which kept a stray result: the call
// gets an "outcome unknown" answer, the stray is dropped.
func ExampleSanitizeConversation() {
	msgs := []ledger.Message{
		{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("pay the invoice")}},
		{Role: ledger.RoleAssistant, ToolCalls: []ledger.ToolCall{{ID: "c1", Name: "pay", Arguments: `{"invoice":7}`}}},
		{Role: ledger.RoleTool, ToolCallID: "c9", Name: "pay", Parts: []ledger.Part{ledger.TextPart("stray")}},
		{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("did it work?")}},
	}
	for _, m := range ledger.SanitizeConversation(msgs) {
		fmt.Printf("%s|%s|%.37s\n", m.Role, m.ToolCallID, m.Text())
	}
	// Output:
	// user||pay the invoice
	// assistant||
	// tool|c1|error: this tool call was interrupted
	// user||did it work?
}

// ExampleCapToolOutput bounds what a tool result puts before the model.
func ExampleCapToolOutput() {
	fmt.Println(ledger.CapToolOutput("0123456789", 4))
	// Output:
	// 0123
	// [truncated 6 bytes]
}
