package fakemodel

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

const accountSchema = `{"type":"object","properties":{"account_id":{"type":"string","description":"The account id, e.g. \"42\"."}},"required":["account_id"],"additionalProperties":false}`

func user(text string) Message { return Message{Role: "user", Text: text} }

func TestDefaultReply(t *testing.T) {
	account := Tool{Name: "get_account", Parameters: json.RawMessage(accountSchema)}
	readFile := Tool{Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}
	read := Tool{Name: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}
	kitchen := Tool{Name: "configure", Parameters: json.RawMessage(`{"type":"object","required":["mode","level","ratio","on","opts","tags","label","size","nested","picked"],"properties":{
		"mode":{"type":"string","enum":["fast","slow"]},
		"level":{"type":"integer","default":3},
		"ratio":{"type":"number"},
		"on":{"type":"boolean"},
		"opts":{"type":"object"},
		"tags":{"type":"array","items":{"type":"string"}},
		"label":{"type":["string","null"],"examples":["hello"]},
		"size":{"type":"integer"},
		"nested":{"type":"object","required":["x"],"properties":{"x":{"type":"integer"}}},
		"picked":{"type":"string","enum":["red","blue"]},
		"ignored":{"type":"string"}}}`)}
	assistantCall := Message{Role: "assistant", ToolCalls: []ToolCall{
		{ID: "call_1", Name: "get_account", Arguments: `{"account_id":"42"}`},
		{ID: "call_2", Name: "read_file", Arguments: `{"path":"a"}`}}}

	tests := []struct {
		name     string
		messages []Message
		tools    []Tool
		want     Reply
	}{
		{"echo", []Message{{Role: "system", Text: "sys"}, user("hello there")}, []Tool{account},
			Reply{Text: "You said: hello there"}},
		{"echo without tools", []Message{user("get_account 42")}, nil,
			Reply{Text: "You said: get_account 42"}},
		{"demo: name and name=value", []Message{user("Please get_account account_id=42 and tell me its plan.")}, []Tool{account},
			Reply{Text: "Let me use get_account.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "get_account", Arguments: `{"account_id":"42"}`}}}},
		{"spaces for underscores, name: value", []Message{user("Get Account for account id: A-17.")}, []Tool{account},
			Reply{Text: "Let me use get_account.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "get_account", Arguments: `{"account_id":"A-17"}`}}}},
		{"bare number after the name", []Message{user("get account, account id 1234 please")}, []Tool{account},
			Reply{Text: "Let me use get_account.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "get_account", Arguments: `{"account_id":"1234"}`}}}},
		{"no value: example", []Message{user("run get_account")}, []Tool{account},
			Reply{Text: "Let me use get_account.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "get_account", Arguments: `{"account_id":"example"}`}}}},
		{"two tools in mention order", []Message{user(`read_file path="go.mod" then get_account account_id is 7`)}, []Tool{account, readFile},
			Reply{Text: "Let me use read_file and get_account.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "read_file", Arguments: `{"path":"go.mod"}`}, {Name: "get_account", Arguments: `{"account_id":"7"}`}}}},
		{"whole words only", []Message{user("I already did that")}, []Tool{read},
			Reply{Text: "You said: I already did that"}},
		{"no required: all properties", []Message{user("read it")}, []Tool{read},
			Reply{Text: "Let me use read.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "read", Arguments: `{"path":"example"}`}}}},
		{"schema-derived values", []Message{user("configure size=9 picked=green on=false")}, []Tool{kitchen},
			Reply{Text: "Let me use configure.", FinishReason: "tool_calls",
				ToolCalls: []ToolCall{{Name: "configure", Arguments: `{"label":"hello","level":3,"mode":"fast","nested":{"x":1},"on":false,"opts":{},"picked":"red","ratio":1,"size":9,"tags":[]}`}}}},
		{"tool result", []Message{user("get_account 42"), assistantCall, {Role: "tool", ToolCallID: "call_1", Text: `{"plan":"pro"}`}}, []Tool{account},
			Reply{Text: `The get_account tool returned: {"plan":"pro"}`}},
		{"several tool results", []Message{user("x"), assistantCall,
			{Role: "tool", ToolCallID: "call_1", Text: "A"}, {Role: "tool", ToolCallID: "call_2", Text: "B"}}, nil,
			Reply{Text: "The get_account tool returned: A\nThe read_file tool returned: B"}},
		{"unknown tool call id", []Message{user("x"), {Role: "tool", ToolCallID: "nope", Text: "A"}}, nil,
			Reply{Text: "The tool returned: A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultReply(Request{Messages: tt.messages, Tools: tt.tools})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDefaultAgentLoop drives the offline-demo flow through openai-go: the
// model calls the named tool, then answers with its result.
func TestDefaultAgentLoop(t *testing.T) {
	s := start(t, Options{})
	c := client(s)
	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:       "get_account",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"account_id": map[string]any{"type": "string"}}, "required": []string{"account_id"}},
	})
	params := userParams("Please get_account account_id=42 and tell me its plan.", tool)
	r := stream(t, c, params)
	if r.err != nil {
		t.Fatal(r.err)
	}
	msg := r.acc.Choices[0].Message
	if r.finishReason() != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_account" ||
		msg.ToolCalls[0].Function.Arguments != `{"account_id":"42"}` {
		t.Fatalf("first turn: %q %+v", r.finishReason(), msg)
	}
	params.Messages = append(params.Messages, msg.ToParam(),
		openai.ToolMessage(`{"account_id":"42","plan":"pro"}`, msg.ToolCalls[0].ID))
	r = stream(t, c, params)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := r.acc.Choices[0].Message.Content, `The get_account tool returned: {"account_id":"42","plan":"pro"}`; got != want || r.finishReason() != "stop" {
		t.Errorf("second turn: %q (%s), want %q", got, r.finishReason(), want)
	}
}

// TestRespond: Options.Respond answers when the script is empty.
func TestRespond(t *testing.T) {
	s := start(t, Options{
		Script: []Reply{{Text: "scripted"}},
		Respond: func(r Request) Reply {
			return Reply{Text: "computed for " + r.Messages[len(r.Messages)-1].Text}
		},
	})
	c := client(s)
	for _, want := range []string{"scripted", "computed for hi", "computed for hi"} {
		if r := stream(t, c, userParams("hi")); r.err != nil || r.acc.Choices[0].Message.Content != want {
			t.Errorf("got %q %v, want %q", r.acc.Choices[0].Message.Content, r.err, want)
		}
	}
}

// TestDefaultReplyRemembers: the compaction note carries what the user
// stated, and a question is answered from the latest statement — a note's
// included.
func TestDefaultReplyRemembers(t *testing.T) {
	user := func(text string) Message { return Message{Role: "user", Text: text} }
	note := DefaultReply(Request{Messages: []Message{{Role: "system", Text: "[compaction] summarise"},
		user("Hello. My secret code is ZEBRA42, and my city is Oslo."), {Role: "assistant", Text: "Noted."}, user("My city is Rome.")}})
	if note.Text != "NOTE: The user's secret code is ZEBRA42. The user's city is Rome." {
		t.Errorf("note: %q", note.Text)
	}
	got := DefaultReply(Request{Messages: []Message{user(note.Text), user("filler"), user("What is my secret code?")}})
	if got.Text != "Your secret code is ZEBRA42." {
		t.Errorf("recall: %q", got.Text)
	}
	if got := DefaultReply(Request{Messages: []Message{user("What is my favourite colour?")}}); got.Text != "I do not know your favourite colour." {
		t.Errorf("unknown: %q", got.Text)
	}
}

// TestAnchorReply: "CALL tool {json}" calls the tool with those arguments;
// a tool result is answered "RESULT: …".
func TestAnchorReply(t *testing.T) {
	got := AnchorReply(Request{Messages: []Message{{Role: "user", Text: `CALL get_account {"id":"ACC-7"}`}}})
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Name != "get_account" || got.ToolCalls[0].Arguments != `{"id":"ACC-7"}` {
		t.Errorf("call: %+v", got)
	}
	got = AnchorReply(Request{Messages: []Message{{Role: "user", Text: "CALL x"}, {Role: "tool", Text: `{"balance":1}`}}})
	if got.Text != `RESULT: {"balance":1}` {
		t.Errorf("result: %+v", got)
	}
}
