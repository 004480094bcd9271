package ledger

import (
	"strings"
	"testing"
)

// TestSanitizeConversation: missing results are added after the message's
// other results, orphans and second answers dropped, arguments that are not
// JSON replaced, and the input left as it was.
func TestSanitizeConversation(t *testing.T) {
	tool := func(id, text string) Message {
		return Message{Role: RoleTool, ToolCallID: id, Parts: []Part{TextPart(text)}}
	}
	in := []Message{
		{Role: RoleUser, Parts: []Part{TextPart("go")}},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Name: "x", Arguments: `{"n":1}`}, {ID: "b", Name: "y", Arguments: `{"n":`}}},
		tool("a", "one"),
		tool("a", "again"),
		tool("zz", "orphan"),
		{Role: RoleAssistant, Parts: []Part{TextPart("done")}},
		tool("a", "late"),
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "x"}}},
	}
	out := SanitizeConversation(in)
	var got []string
	for _, m := range out {
		s := string(m.Role) + ":" + m.ToolCallID + ":" + m.Text()
		for _, c := range m.ToolCalls {
			s += " " + c.ID + "=" + c.Arguments
		}
		got = append(got, s)
	}
	want := []string{"user::go", `assistant:: a={"n":1} b={}`, "tool:a:one", "tool:b:" + MissingResult,
		"assistant::done", "assistant:: c=", "tool:c:" + MissingResult}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if in[1].ToolCalls[1].Arguments != `{"n":` {
		t.Error("the input was modified")
	}
}

// TestCapToolOutput: a cut never splits a character.
func TestCapToolOutput(t *testing.T) {
	if got := CapToolOutput("héllo", 2); got != "h\n[truncated 5 bytes]" {
		t.Errorf("got %q", got)
	}
	if got := CapToolOutput("short", 10); got != "short" {
		t.Errorf("got %q", got)
	}
	if got := CapToolOutput("anything", 0); got != "anything" {
		t.Errorf("max 0: %q", got)
	}
}
