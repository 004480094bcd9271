package ledger

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Helpers for conversations kept outside a ledger: heal a tool-call
// history that a provider would refuse, and bound what one tool result
// puts in front of the model.

// SanitizeConversation returns msgs healed into a conversation every
// OpenAI-compatible provider accepts, in the same order otherwise:
//
//   - a tool call left without a result (the process died, the result was
//     lost) gets one, [MissingResult], right after its message's other
//     results;
//   - a tool message that answers no call of the assistant message before
//     it (an orphan, or a second answer to one call) is dropped;
//   - a tool call whose arguments are not JSON gets "{}" (providers refuse
//     the request otherwise; the call's result tells the model what
//     happened).
//
// msgs is not modified. ReplayMessages already returns healed
// conversations; this is for histories that come from elsewhere.
func SanitizeConversation(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	var open []ToolCall // calls of the last assistant message
	answered := map[string]bool{}
	closeOpen := func() {
		for _, c := range open {
			if !answered[c.ID] {
				out = append(out, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Parts: []Part{TextPart(MissingResult)}})
			}
		}
		open, answered = nil, map[string]bool{}
	}
	for _, m := range msgs {
		switch {
		case m.Role == RoleTool:
			pending := false
			for _, c := range open {
				if c.ID == m.ToolCallID && !answered[c.ID] {
					pending = true
				}
			}
			if !pending {
				continue // an orphan, or a second answer
			}
			answered[m.ToolCallID] = true
			out = append(out, m)
		default:
			closeOpen()
			if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
				calls := make([]ToolCall, len(m.ToolCalls))
				for i, c := range m.ToolCalls {
					if c.Arguments != "" && !json.Valid([]byte(c.Arguments)) {
						c.Arguments = "{}"
					}
					calls[i] = c
				}
				m.ToolCalls = calls
				open = calls
			}
			out = append(out, m)
		}
	}
	closeOpen()
	return out
}

// CapToolOutput bounds a tool's output to about max bytes: a longer one is
// cut at a character boundary at or before max, and a line saying how many
// bytes were cut ("[truncated N bytes]") is added, so that the model knows
// it sees part of it. max <= 0 leaves output whole.
func CapToolOutput(output string, max int) string {
	if max <= 0 || len(output) <= max {
		return output
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(output[cut]) {
		cut--
	}
	return fmt.Sprintf("%s\n[truncated %d bytes]", output[:cut], len(output)-cut)
}
