package ledger

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// msgLine renders a message as one line: "role: text", an assistant's
// calls in brackets, a tool message as "tool <call id> <name>: output".
func msgLine(m Message) string {
	var b strings.Builder
	b.WriteString(string(m.Role))
	if m.Role == RoleTool {
		fmt.Fprintf(&b, " %s %s", m.ToolCallID, m.Name)
	}
	b.WriteString(": ")
	text := m.Text()
	if text == MissingResult {
		text = "<missing>"
	}
	b.WriteString(text)
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, " [%s %s %s]", c.ID, c.Name, c.Arguments)
	}
	return b.String()
}

func msgLines(msgs []Message) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, msgLine(m))
	}
	return out
}

// checkConversation reports what a provider would refuse: a tool message
// that does not answer a call of the assistant message before its group, a
// call answered twice or never, a call id used twice.
func checkConversation(t *testing.T, msgs []Message) {
	t.Helper()
	called := map[string]bool{}
	var open map[string]bool // calls of the current assistant message, unanswered
	inGroup := false         // the previous message is the assistant with calls or one of its tool messages
	for i, m := range msgs {
		switch m.Role {
		case RoleTool:
			if !inGroup || !open[m.ToolCallID] {
				t.Errorf("message %d: tool message for %s does not follow the assistant message that made the call (or answers it twice)", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
			continue
		}
		for id := range open {
			t.Errorf("message %d: call %s is not answered before this %s message", i, id, m.Role)
		}
		open, inGroup = nil, false
		if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
			open, inGroup = map[string]bool{}, true
			for _, c := range m.ToolCalls {
				if called[c.ID] {
					t.Errorf("message %d: call id %s used twice", i, c.ID)
				}
				called[c.ID], open[c.ID] = true, true
			}
		}
		if m.Role == RoleAssistant && len(m.ToolCalls) == 0 && m.Text() == "" {
			t.Errorf("message %d: empty assistant message", i)
		}
	}
	for id := range open {
		t.Errorf("call %s is never answered", id)
	}
}

func TestReplayMessages(t *testing.T) {
	toolPending := func() *builder {
		return newBuilder().
			input("m1", "", "weather in Paris?").
			runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "weather", `{"city":"Paris"}`), call("c2", "clock", `{}`)).
			result("run1", "c2", "clock", "12:00")
	}
	const asked = `assistant:  [c1 weather {"city":"Paris"}] [c2 clock {}]`

	tests := []struct {
		name   string
		events []Event
		want   []string
	}{
		{"no events", nil, []string{}},
		{"simple chat", chatScenario(), []string{"user: hello", "assistant: hi there"}},
		{"tool call", toolScenario(), []string{
			"user: weather in Paris?",
			`assistant:  [c1 weather {"city":"Paris"}]`,
			"tool c1 weather: sunny, 21°C",
			"assistant: It is sunny in Paris.",
		}},
		{"crash in the first pass", crashScenario(), []string{"user: hello"}},
		{"cancelled with a partial pass", cancelledScenario(), []string{"user: write a poem", "assistant: Roses are"}},
		{"failed", newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").runEnd("run1", RunFailed, "x").build(),
			[]string{"user: hello"}},
		{"missing result at the end", toolPending().build(), []string{
			"user: weather in Paris?", asked, "tool c2 clock: 12:00", "tool c1 weather: <missing>",
		}},
		{"missing result before the next input", toolPending().runEnd("run1", RunCancelled, "").
			input("m2", "", "never mind").runStart("run2", "resp3", "m2").text("run2", "resp3", 0, "ok").runEnd("run2", RunCompleted, "").build(),
			[]string{
				"user: weather in Paris?", asked, "tool c2 clock: 12:00", "tool c1 weather: <missing>",
				"user: never mind", "assistant: ok",
			}},
		{"missing result before a poke", toolPending().poke("run1", "hurry").build(), []string{
			"user: weather in Paris?", asked, "tool c2 clock: 12:00", "tool c1 weather: <missing>", "user: hurry",
		}},
		{"missing result before the next step", toolPending().text("run1", "resp2", 1, "done").build(), []string{
			"user: weather in Paris?", asked, "tool c2 clock: 12:00", "tool c1 weather: <missing>", "assistant: done",
		}},
		{"all missing in call order", newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "a", `{}`), call("c2", "b", `{}`), call("c3", "c", `{}`)).
			result("run1", "c2", "b", "B").runEnd("run1", RunInterrupted, "").build(),
			[]string{"user: go", "assistant:  [c1 a {}] [c2 b {}] [c3 c {}]", "tool c2 b: B", "tool c1 a: <missing>", "tool c3 c: <missing>"}},
		{"results in the order they came", newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "a", `{}`), call("c2", "b", `{}`)).
			result("run1", "c2", "b", "B").result("run1", "c1", "a", "A").build(),
			[]string{"user: go", "assistant:  [c1 a {}] [c2 b {}]", "tool c2 b: B", "tool c1 a: A"}},
		{"text and tool calls in one step", newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
			step("run1", Step{ResponseID: "resp1", NextResponseID: "resp2", Text: "let me look", ToolCalls: []ToolCall{call("c1", "a", `{"x":`)}}).
			result("run1", "c1", "a", "bad args").build(),
			[]string{"user: go", `assistant: let me look [c1 a {"x":]`, "tool c1 a: bad args"}},
		{"duplicate tool results dropped", toolPending().result("run1", "c1", "weather", "rain").
			result("run1", "c1", "weather", "sunny").result("run1", "c2", "clock", "12:05").build(),
			[]string{"user: weather in Paris?", asked, "tool c2 clock: 12:00", "tool c1 weather: rain"}},
		{"result of an unknown call dropped", newBuilder().input("m1", "", "hello").result("run1", "c9", "x", "?").build(),
			[]string{"user: hello"}},
		{"empty steps dropped", newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").
			step("run1", Step{ResponseID: "resp1", NextResponseID: "resp2", Reasoning: "thinking only", FinishReason: "length"}).
			text("run1", "resp2", 1, "hi").runEnd("run1", RunCompleted, "").build(),
			[]string{"user: hello", "assistant: hi"}},
		{"pokes are user messages", newBuilder().input("m1", "", "task").runStart("run1", "resp1", "m1").
			text("run1", "resp1", 0, "partly done").poke("run1", "please finish the task").
			step("run1", Step{ResponseID: "resp2", Index: 1, Text: "finished"}).runEnd("run1", RunCompleted, "").build(),
			[]string{"user: task", "assistant: partly done", "user: please finish the task", "assistant: finished"}},
		{"run events, approvals and tool starts say nothing", func() []Event {
			b := newBuilder().input("m1", "", "deploy").runStart("run1", "resp1", "m1").
				calls("run1", "resp1", "resp2", 0, call("c1", "deploy", `{}`))
			b.add("run1", KindApprovalRequest, func(e *Event) {
				e.ApprovalRequest = &ApprovalRequest{ApprovalID: "a1", CallID: "c1", Name: "deploy"}
			}).add("run1", KindApprovalDecision, func(e *Event) {
				e.ApprovalDecision = &ApprovalDecision{ApprovalID: "a1", Decision: "approve"}
			})
			return b.toolStart("run1", "c1", "deploy").resume("run1", 1).result("run1", "c1", "deploy", "ok").
				text("run1", "resp2", 1, "deployed").runEnd("run1", RunCompleted, "").build()
		}(), []string{"user: deploy", "assistant:  [c1 deploy {}]", "tool c1 deploy: ok", "assistant: deployed"}},
		{"compaction", compactionScenario(), []string{
			"user: SUMMARY: the user asked a first question.",
			"user: second question",
			"user: please continue",
			"assistant: second answer",
		}},
		{"the last compaction stands", func() []Event {
			b := newBuilder().input("m1", "", "q1").runStart("run1", "r1", "m1").text("run1", "r1", 0, "a1")
			first := b.lastID()
			b.compaction("run1", "S1", first).runEnd("run1", RunCompleted, "").
				input("m2", "", "q2").runStart("run2", "r2", "m2").text("run2", "r2", 0, "a2")
			second := b.lastID()
			return b.compaction("run2", "S2", second).runEnd("run2", RunCompleted, "").
				input("m3", "", "q3").build()
		}(), []string{"user: S2", "user: q3"}},
		{"compaction through a tool call drops its late result", func() []Event {
			b := newBuilder().input("m1", "", "go").runStart("run1", "r1", "m1").
				calls("run1", "r1", "r2", 0, call("c1", "slow", `{}`))
			through := b.lastID()
			return b.compaction("run1", "S", through).result("run1", "c1", "slow", "late").
				text("run1", "r2", 1, "done").build()
		}(), []string{"user: S", "assistant: done"}},
		{"compaction keeps what came between Through and itself", func() []Event {
			b := newBuilder().input("m1", "", "q1").runStart("run1", "r1", "m1").text("run1", "r1", 0, "a1")
			through := b.lastID()
			return b.runEnd("run1", RunCompleted, "").input("m2", "", "q2").runStart("run2", "r2", "m2").
				text("run2", "r2", 0, "a2").compaction("run2", "S", through).build()
		}(), []string{"user: S", "user: q2", "assistant: a2"}},

		// A user message queued while a tool runs must not split the
		// assistant's tool calls from their results, and a result must
		// never be answered twice (once with MissingResult, once for real).
		{"input queued while a tool runs", newBuilder().
			input("m1", "", "go").runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
			input("m2", "", "and then?").
			result("run1", "c1", "clock", "12:00").
			text("run1", "resp2", 1, "noon").runEnd("run1", RunCompleted, "").
			runStart("run2", "resp3", "m2").text("run2", "resp3", 0, "then nothing").runEnd("run2", RunCompleted, "").build(),
			[]string{"user: go", "assistant:  [c1 clock {}]", "tool c1 clock: 12:00", "assistant: noon",
				"user: and then?", "assistant: then nothing"}},
		// A step appended twice (a retried append) is one pass, as the
		// transcript shows it.
		{"duplicate step", newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
			calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
			result("run1", "c1", "clock", "12:00").
			text("run1", "resp2", 1, "noon").runEnd("run1", RunCompleted, "").build(),
			[]string{"user: go", "assistant:  [c1 clock {}]", "tool c1 clock: 12:00", "assistant: noon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cloneEvents(t, tt.events)
			msgs := ReplayMessages(tt.events)
			diff(t, "messages", msgLines(msgs), tt.want)
			checkConversation(t, msgs)
			if !reflect.DeepEqual(tt.events, before) {
				t.Errorf("ReplayMessages modified its events")
			}
		})
	}
}

func TestReplayMessageFields(t *testing.T) {
	img := []byte{0x00, 0xff, 0x10}
	events := newBuilder().
		inputParts("m1", "", TextPart("see"), Part{Type: PartImage, MIME: "image/png", Data: img}).
		runStart("run1", "resp1", "m1").
		calls("run1", "resp1", "resp2", 0, call("c1", "ocr", `{"page":1}`)).
		result("run1", "c1", "ocr", "text").
		build()
	msgs := ReplayMessages(events)
	want := []Message{
		{Role: RoleUser, Parts: []Part{TextPart("see"), {Type: PartImage, MIME: "image/png", Data: img}}},
		{Role: RoleAssistant, ToolCalls: []ToolCall{call("c1", "ocr", `{"page":1}`)}},
		{Role: RoleTool, ToolCallID: "c1", Name: "ocr", Parts: []Part{TextPart("text")}},
	}
	diff(t, "messages", msgs, want)

	missing := ReplayMessages(events[:3])
	if got := missing[len(missing)-1]; got.Role != RoleTool || got.ToolCallID != "c1" || got.Name != "ocr" || got.Text() != MissingResult {
		t.Errorf("missing result message = %+v", got)
	}
}

// The compaction is found from the end without disturbing the caller's
// slice, even when it has spare capacity.
func TestReplayCompactionDoesNotTouchEvents(t *testing.T) {
	events := compactionScenario()
	big := make([]Event, len(events), len(events)+10)
	copy(big, events)
	before := cloneEvents(t, big)
	first := ReplayMessages(big)
	if !reflect.DeepEqual(big, before) {
		t.Fatalf("events changed")
	}
	if second := ReplayMessages(big); !reflect.DeepEqual(first, second) {
		t.Errorf("replay is not deterministic")
	}
}

// TestReplayReusedCallIDs: a ledger an earlier build wrote while the model
// reused its call ids (within a reply, across passes and runs) replays as
// a conversation a provider takes: each call shown once, with an id unique
// in it, followed by its own result; the events are left as they were.
func TestReplayReusedCallIDs(t *testing.T) {
	events := reusedCallIDsScenario()
	before := fmt.Sprint(events)
	msgs := ReplayMessages(events)
	checkConversation(t, msgs)
	diff(t, "messages", msgLines(msgs), []string{
		"user: count",
		"assistant:  [call_0 count {}] [call_0_2 count {}]",
		"tool call_0 count: 1",
		"tool call_0_2 count: 2",
		"assistant:  [call_0_3 count {}]",
		"tool call_0_3 count: 3",
		"assistant: done",
		"user: again",
		"assistant:  [call_0_4 count {}]",
		"tool call_0_4 count: <missing>",
	})
	if fmt.Sprint(events) != before {
		t.Error("ReplayMessages changed the events")
	}
}

// TestRunStartOrdersItsMessages: a message queued while a run ended
// without it (another host queued it as the run decided to end), then a
// message that starts a run for both: the model and the transcript see
// them in the order they were sent, as the run-start lists them.
func TestRunStartOrdersItsMessages(t *testing.T) {
	events := newBuilder().
		input("m1", "r1", "first").runStart("r1", "p1", "m1").text("r1", "p1", 0, "one").
		input("m2", "", "queued late").
		runEnd("r1", RunCompleted, "").
		input("m3", "r2", "third").runStart("r2", "p2", "m2", "m3").text("r2", "p2", 0, "both").runEnd("r2", RunCompleted, "").
		build()
	var replay []string
	for _, m := range ReplayMessages(events) {
		replay = append(replay, string(m.Role)+":"+m.Text())
	}
	if got, want := strings.Join(replay, " | "), "user:first | assistant:one | user:queued late | user:third | assistant:both"; got != want {
		t.Errorf("replay %q, want %q", got, want)
	}
	var items []string
	for _, it := range ProjectSession("s", events).Items {
		items = append(items, it.ID)
	}
	if got, want := strings.Join(items, " "), "m1 p1 m2 m3 p2"; got != want {
		t.Errorf("transcript %q, want %q", got, want)
	}
}
