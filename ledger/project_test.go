package ledger

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// itemView is the part of an [Item] the scenario table compares; times,
// usage, models and parts have tests of their own.
type itemView struct {
	ID     string
	Kind   ItemKind
	RunID  string
	Text   string
	Status ItemStatus
	Reason string
	Calls  []callView
}

type callView struct {
	ID, Name, Input string
	Status          ToolStatus
	Output          string
}

func viewOf(items []Item) []itemView {
	out := []itemView{}
	for _, it := range items {
		v := itemView{ID: it.ID, Kind: it.Kind, RunID: it.RunID, Text: it.Text, Status: it.Status, Reason: it.Reason}
		for _, c := range it.ToolCalls {
			v.Calls = append(v.Calls, callView{ID: c.ID, Name: c.Name, Input: string(c.Input), Status: c.Status, Output: c.Output})
		}
		out = append(out, v)
	}
	return out
}

func user(id, run, text string) itemView {
	return itemView{ID: id, Kind: ItemUser, RunID: run, Text: text}
}

func resp(id, run, text string, status ItemStatus, reason string, calls ...callView) itemView {
	return itemView{ID: id, Kind: ItemResponse, RunID: run, Text: text, Status: status, Reason: reason, Calls: calls}
}

func TestProjectSession(t *testing.T) {
	// A run that asked for a tool and stopped before the tool returned.
	toolPending := func() *builder {
		return newBuilder().
			input("m1", "", "weather in Paris?").
			runStart("run1", "resp1", "m1").
			calls("run1", "resp1", "resp2", 0, call("c1", "weather", `{"city":"Paris"}`), call("c2", "clock", `{}`)).
			result("run1", "c2", "clock", "12:00")
	}
	weather := func(status ToolStatus, output string) callView {
		return callView{"c1", "weather", `{"city":"Paris"}`, status, output}
	}
	clock := callView{"c2", "clock", `{}`, ToolDone, "12:00"}

	tests := []struct {
		name   string
		events []Event
		live   []Live
		want   []itemView
	}{
		{
			name:   "simple chat",
			events: chatScenario(),
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi there", StatusCompleted, "")},
		},
		{
			name:   "no events",
			events: nil,
			want:   []itemView{},
		},
		{
			name:   "queued input no run picked up",
			events: newBuilder().input("m1", "", "hello").build(),
			want:   []itemView{user("m1", "", "hello")},
		},
		{
			name: "input appended with its run id",
			events: newBuilder().input("m1", "run1", "hello").runStart("run1", "resp1", "m1").
				text("run1", "resp1", 0, "hi").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "")},
		},
		{
			name:   "tool call",
			events: toolScenario(),
			want: []itemView{
				user("m1", "run1", "weather in Paris?"),
				resp("resp1", "run1", "", StatusCompleted, "", weather(ToolDone, "sunny, 21°C")),
				resp("resp2", "run1", "It is sunny in Paris.", StatusCompleted, ""),
			},
		},
		{
			name: "tool error and odd arguments",
			events: newBuilder().
				input("m1", "", "go").
				runStart("run1", "resp1", "m1").
				calls("run1", "resp1", "resp2", 0,
					call("c1", "shell", `{"cmd": "ls`),
					call("c2", "noargs", ``),
					call("c3", "list", ` [1, 2] `),
					call("c4", "scalar", `"just a string"`)).
				errResult("run1", "c1", "shell", "invalid arguments").
				result("run1", "c2", "noargs", "ok").
				result("run1", "c3", "list", "ok").
				result("run1", "c4", "scalar", "ok").
				text("run1", "resp2", 1, "done").
				runEnd("run1", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "go"),
				resp("resp1", "run1", "", StatusCompleted, "",
					callView{"c1", "shell", `"{\"cmd\": \"ls"`, ToolError, "invalid arguments"},
					callView{"c2", "noargs", `{}`, ToolDone, "ok"},
					callView{"c3", "list", ` [1, 2] `, ToolDone, "ok"},
					callView{"c4", "scalar", `"just a string"`, ToolDone, "ok"}),
				resp("resp2", "run1", "done", StatusCompleted, ""),
			},
		},
		{
			name:   "crash in the first pass",
			events: crashScenario(),
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "", StatusInterrupted, "")},
		},
		{
			name:   "first pass streaming",
			events: crashScenario(),
			live:   []Live{{RunID: "run1", ResponseID: "resp1", Text: "par"}},
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "par", StatusStreaming, "")},
		},
		{
			name:   "live without a response id streams into the minted one",
			events: crashScenario(),
			live:   []Live{{RunID: "run1", Text: "par"}},
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "par", StatusStreaming, "")},
		},
		{
			name:   "live of another run is ignored",
			events: crashScenario(),
			live:   []Live{{RunID: "run9", ResponseID: "resp9", Text: "par"}},
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "", StatusInterrupted, "")},
		},
		{
			name:   "live of an ended run is ignored",
			events: chatScenario(),
			live:   []Live{{RunID: "run1", ResponseID: "resp1", Text: "stale"}},
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi there", StatusCompleted, "")},
		},
		{
			name:   "tools running in a live run",
			events: toolPending().build(),
			live:   []Live{{RunID: "run1", ResponseID: "resp2", Text: "par"}},
			want: []itemView{
				user("m1", "run1", "weather in Paris?"),
				resp("resp1", "run1", "", StatusCompleted, "", weather(ToolRunning, ""), clock),
				resp("resp2", "run1", "par", StatusStreaming, ""),
			},
		},
		{
			// Hosts before call ids were made unique recorded the ids a
			// model reused (call_0 in every reply) as they came: each
			// result answers a call of the pass before it, and a reused
			// id is shown renamed, as ReplayMessages shows it.
			name:   "call ids a model reused, in an older ledger",
			events: reusedCallIDsScenario(),
			want: []itemView{
				user("m1", "run1", "count"),
				resp("resp1", "run1", "", StatusCompleted, "",
					callView{"call_0", "count", `{}`, ToolDone, "1"}, callView{"call_0_2", "count", `{}`, ToolDone, "2"}),
				resp("resp2", "run1", "", StatusCompleted, "", callView{"call_0_3", "count", `{}`, ToolDone, "3"}),
				resp("resp3", "run1", "done", StatusCompleted, ""),
				user("m2", "run2", "again"),
				resp("resp4", "run2", "", StatusCompleted, "", callView{"call_0_4", "count", `{}`, ToolInterrupted, ""}),
				resp("resp5", "run2", "", StatusInterrupted, ""),
			},
		},
		{
			name:   "tools interrupted in a dead run",
			events: toolPending().build(),
			want: []itemView{
				user("m1", "run1", "weather in Paris?"),
				resp("resp1", "run1", "", StatusCompleted, "", weather(ToolInterrupted, ""), clock),
				resp("resp2", "run1", "", StatusInterrupted, ""),
			},
		},
		{
			name:   "cancelled with a partial pass",
			events: cancelledScenario(),
			want: []itemView{
				user("m1", "run1", "write a poem"),
				resp("resp1", "run1", "Roses are", StatusCancelled, "cancelled by the user"),
			},
		},
		{
			name:   "cancelled while tools ran",
			events: toolPending().runEnd("run1", RunCancelled, "cancelled by the user").build(),
			want: []itemView{
				user("m1", "run1", "weather in Paris?"),
				resp("resp1", "run1", "", StatusCompleted, "", weather(ToolInterrupted, ""), clock),
				resp("resp2", "run1", "", StatusCancelled, "cancelled by the user"),
			},
		},
		{
			name:   "failed before any step",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").runEnd("run1", RunFailed, "provider error 502").build(),
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "", StatusFailed, "provider error 502")},
		},
		{
			name: "failed after a completed last step",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").
				text("run1", "resp1", 0, "hi").runEnd("run1", RunFailed, "could not save").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusFailed, "could not save")},
		},
		{
			name:   "failed while tools ran",
			events: toolPending().runEnd("run1", RunFailed, "tool crashed the sandbox").build(),
			want: []itemView{
				user("m1", "run1", "weather in Paris?"),
				resp("resp1", "run1", "", StatusCompleted, "", weather(ToolInterrupted, ""), clock),
				resp("resp2", "run1", "", StatusFailed, "tool crashed the sandbox"),
			},
		},
		{
			name:   "timed out",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").runEnd("run1", RunTimedOut, "deadline exceeded").build(),
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "", StatusTimedOut, "deadline exceeded")},
		},
		{
			name:   "given up as interrupted",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").resume("run1", 1).resume("run1", 2).runEnd("run1", RunInterrupted, "gave up after 2 attempts").build(),
			want:   []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "", StatusInterrupted, "gave up after 2 attempts")},
		},
		{
			name: "resumed and completed",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").resume("run1", 1).
				text("run1", "resp1", 0, "hi").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "")},
		},
		{
			name: "completed run with a minted pass that never ran",
			events: newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
				calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).result("run1", "c1", "clock", "12:00").
				runEnd("run1", RunCompleted, "max steps").build(),
			want: []itemView{
				user("m1", "run1", "go"),
				resp("resp1", "run1", "", StatusCompleted, "", callView{"c1", "clock", `{}`, ToolDone, "12:00"}),
			},
		},
		{
			name: "interrupted after the last step, before run-end",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").
				text("run1", "resp1", 0, "hi").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "the run was interrupted before it ended")},
		},
		{
			name: "second run-end is ignored",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").
				text("run1", "resp1", 0, "hi").runEnd("run1", RunCompleted, "").runEnd("run1", RunFailed, "late").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "")},
		},
		{
			name: "pokes compactions approvals and tool starts never show",
			events: func() []Event {
				b := newBuilder().input("m1", "", "q1").runStart("run1", "resp1", "m1")
				b.add("run1", KindApprovalRequest, func(e *Event) {
					e.ApprovalRequest = &ApprovalRequest{ApprovalID: "a1", CallID: "c0", Name: "deploy"}
				}).add("run1", KindApprovalDecision, func(e *Event) {
					e.ApprovalDecision = &ApprovalDecision{ApprovalID: "a1", Decision: "approve"}
				})
				b.toolStart("run1", "c0", "deploy").poke("run1", "go on").
					compaction("run1", "summary", "ev-001").
					text("run1", "resp1", 0, "a1").runEnd("run1", RunCompleted, "")
				return b.build()
			}(),
			want: []itemView{user("m1", "run1", "q1"), resp("resp1", "run1", "a1", StatusCompleted, "")},
		},
		{
			name:   "compaction scenario",
			events: compactionScenario(),
			want: []itemView{
				user("m1", "run1", "first question"), resp("resp1", "run1", "first answer", StatusCompleted, ""),
				user("m2", "run2", "second question"), resp("resp2", "run2", "second answer", StatusCompleted, ""),
			},
		},
		{
			name: "duplicate step replaces",
			events: newBuilder().input("m1", "", "hello").runStart("run1", "resp1", "m1").
				text("run1", "resp1", 0, "first try").text("run1", "resp1", 0, "hi").
				runEnd("run1", RunCompleted, "").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "")},
		},
		{
			name: "duplicate tool step keeps the result",
			events: newBuilder().input("m1", "", "go").runStart("run1", "resp1", "m1").
				calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
				calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
				result("run1", "c1", "clock", "12:00").
				text("run1", "resp2", 1, "noon").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "go"),
				resp("resp1", "run1", "", StatusCompleted, "", callView{"c1", "clock", `{}`, ToolDone, "12:00"}),
				resp("resp2", "run1", "noon", StatusCompleted, ""),
			},
		},
		{
			name: "duplicate input replaces",
			events: newBuilder().input("m1", "", "hello").input("m1", "", "hello").
				runStart("run1", "resp1", "m1").text("run1", "resp1", 0, "hi").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{user("m1", "run1", "hello"), resp("resp1", "run1", "hi", StatusCompleted, "")},
		},
		{
			name: "two runs",
			events: newBuilder().
				input("m1", "", "one").runStart("run1", "resp1", "m1").text("run1", "resp1", 0, "1").runEnd("run1", RunCompleted, "").
				input("m2", "", "two").runStart("run2", "resp2", "m2").text("run2", "resp2", 0, "2").runEnd("run2", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "one"), resp("resp1", "run1", "1", StatusCompleted, ""),
				user("m2", "run2", "two"), resp("resp2", "run2", "2", StatusCompleted, ""),
			},
		},
		{
			name: "one run answers two inputs",
			events: newBuilder().input("m1", "", "one").input("m2", "", "two").
				runStart("run1", "resp1", "m1", "m2").text("run1", "resp1", 0, "both").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{user("m1", "run1", "one"), user("m2", "run1", "two"), resp("resp1", "run1", "both", StatusCompleted, "")},
		},

		// Causal order: a response item exists from the moment its id is
		// minted (run-start, or the step that carries NextResponseID). An
		// input queued after that comes after the item, not before it.
		{
			name: "input queued during the first pass",
			events: newBuilder().
				input("m1", "", "one").runStart("run1", "resp1", "m1").
				input("m2", "", "two").
				text("run1", "resp1", 0, "1").runEnd("run1", RunCompleted, "").
				runStart("run2", "resp2", "m2").text("run2", "resp2", 0, "2").runEnd("run2", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "one"), resp("resp1", "run1", "1", StatusCompleted, ""),
				user("m2", "run2", "two"), resp("resp2", "run2", "2", StatusCompleted, ""),
			},
		},
		{
			name: "input queued during a later pass",
			events: newBuilder().
				input("m1", "", "go").runStart("run1", "resp1", "m1").
				calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
				input("m2", "", "and then?").
				result("run1", "c1", "clock", "12:00").
				text("run1", "resp2", 1, "noon").runEnd("run1", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "go"),
				resp("resp1", "run1", "", StatusCompleted, "", callView{"c1", "clock", `{}`, ToolDone, "12:00"}),
				resp("resp2", "run1", "noon", StatusCompleted, ""),
				user("m2", "", "and then?"),
			},
		},
		{
			name: "input queued while streaming",
			events: newBuilder().
				input("m1", "", "one").runStart("run1", "resp1", "m1").
				input("m2", "", "two").build(),
			live: []Live{{RunID: "run1", ResponseID: "resp1", Text: "par"}},
			want: []itemView{
				user("m1", "run1", "one"), resp("resp1", "run1", "par", StatusStreaming, ""),
				user("m2", "", "two"),
			},
		},
		{
			name: "interrupted run followed by another run",
			events: newBuilder().
				input("m1", "", "one").runStart("run1", "resp1", "m1").
				input("m2", "", "two").runStart("run2", "resp2", "m2").text("run2", "resp2", 0, "2").runEnd("run2", RunCompleted, "").build(),
			want: []itemView{
				user("m1", "run1", "one"), resp("resp1", "run1", "", StatusInterrupted, ""),
				user("m2", "run2", "two"), resp("resp2", "run2", "2", StatusCompleted, ""),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cloneEvents(t, tt.events)
			got := ProjectSession("sess1", tt.events, tt.live...)
			if got.SessionID != "sess1" {
				t.Errorf("SessionID = %q", got.SessionID)
			}
			if got.Items == nil {
				t.Errorf("Items is nil, want an empty slice (JSON [])")
			}
			diff(t, "items", viewOf(got.Items), tt.want)
			checkUniqueIDs(t, got.Items)
			if !reflect.DeepEqual(tt.events, before) {
				t.Errorf("ProjectSession modified its events")
			}
			// A pure function: the same answer twice.
			again := ProjectSession("sess1", tt.events, tt.live...)
			if !reflect.DeepEqual(got, again) {
				t.Errorf("ProjectSession is not deterministic")
			}
		})
	}
}

// checkUniqueIDs checks that no item id, and no tool call id, appears
// twice in a transcript.
func checkUniqueIDs(t *testing.T, items []Item) {
	t.Helper()
	seen, calls := map[string]bool{}, map[string]bool{}
	for _, it := range items {
		if seen[it.ID] {
			t.Errorf("item %s appears twice", it.ID)
		}
		seen[it.ID] = true
		for _, c := range it.ToolCalls {
			if calls[c.ID] {
				t.Errorf("tool call %s appears twice", c.ID)
			}
			calls[c.ID] = true
		}
	}
}

// cloneEvents deep-copies events through the codec.
func cloneEvents(t testing.TB, events []Event) []Event {
	t.Helper()
	var out []Event
	for _, e := range events {
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("Encode(%s): %v", e.ID, err)
		}
		c, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s): %v", e.ID, err)
		}
		out = append(out, c)
	}
	return out
}

func TestProjectSessionDetails(t *testing.T) {
	raw := json.RawMessage(`{"reasoning_details":[{"type":"reasoning.text","text":"hmm"}]}`)
	events := newBuilder().
		input("m1", "", "hello").
		runStart("run1", "resp1", "m1").
		step("run1", Step{ResponseID: "resp1", Text: "hi", Reasoning: "hmm", Model: "vendor/model-v2",
			Usage: Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, Cost: 0.5, UpstreamCost: 2, IsBYOK: ptr(true)},
			Raw:   raw}).
		runEnd("run1", RunCompleted, "").build()
	tr := ProjectSession("s", events)
	if len(tr.Items) != 2 {
		t.Fatalf("got %d items", len(tr.Items))
	}
	u, r := tr.Items[0], tr.Items[1]
	if !u.Time.Equal(events[0].Time) || u.Status != "" || u.Parts != nil || u.Usage != nil {
		t.Errorf("user item = %+v", u)
	}
	if !r.Time.Equal(events[2].Time) {
		t.Errorf("response time %v, want the step's %v", r.Time, events[2].Time)
	}
	if r.Model != "vendor/model-v2" || r.Reasoning != "hmm" || !bytes.Equal(r.Raw, raw) {
		t.Errorf("response = %+v", r)
	}
	if r.Usage == nil || r.Usage.PromptTokens != 100 || r.Usage.TotalTokens != 120 {
		t.Errorf("usage = %+v", r.Usage)
	}
	if r.Cost != 2.5 {
		t.Errorf("cost = %v, want 2.5 (BYOK: cost + upstream)", r.Cost)
	}
	// Placeholders are not durable yet: no time, no usage.
	p := ProjectSession("s", crashScenario()).Items[1]
	if !p.Time.IsZero() || p.Usage != nil || p.Cost != 0 {
		t.Errorf("placeholder = %+v", p)
	}
}

func TestProjectSessionBinaryParts(t *testing.T) {
	img := []byte{0x89, 'P', 'N', 'G', 0x00, 0xff, 0xfe}
	wav := []byte{'R', 'I', 'F', 'F', 0x00, 0x80, 0xc3}
	parts := []Part{
		TextPart("what is "),
		{Type: PartImage, MIME: "image/png", Data: img},
		TextPart("and this?"),
		{Type: PartAudio, MIME: "audio/wav", Data: wav},
		{Type: PartFile, URL: "https://example.com/a.pdf", Name: "a.pdf"},
	}
	events := newBuilder().inputParts("m1", "", parts...).build()
	it := ProjectSession("s", cloneEvents(t, events)).Items[0]
	if it.Text != "what is and this?" {
		t.Errorf("Text = %q, want the text parts joined", it.Text)
	}
	diff(t, "parts", it.Parts, parts)

	// Text only: no Parts.
	it = ProjectSession("s", newBuilder().inputParts("m1", "", TextPart("a"), TextPart("b")).build()).Items[0]
	if it.Text != "ab" || it.Parts != nil {
		t.Errorf("text-only item: Text %q Parts %v", it.Text, it.Parts)
	}
	// The binary bytes survive the wire JSON (base64).
	b, err := json.Marshal(WireTranscript(ProjectSession("s", events)))
	if err != nil {
		t.Fatal(err)
	}
	var back Transcript
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Items[0].Parts[1].Data, img) || !bytes.Equal(back.Items[0].Parts[3].Data, wav) {
		t.Errorf("binary parts did not survive JSON: %s", b)
	}
}

func TestTextOf(t *testing.T) {
	tests := []struct {
		parts []Part
		want  string
	}{
		{nil, ""},
		{[]Part{TextPart("a")}, "a"},
		{[]Part{TextPart("a"), TextPart("b")}, "ab"},
		{[]Part{{Type: PartImage, URL: "u"}}, ""},
		{[]Part{{Type: PartImage, URL: "u"}, TextPart("x")}, "x"},
	}
	for _, tt := range tests {
		if got := TextOf(tt.parts); got != tt.want {
			t.Errorf("TextOf(%v) = %q, want %q", tt.parts, got, tt.want)
		}
	}
}

func TestWireTranscript(t *testing.T) {
	events := newBuilder().
		input("m1", "", "hello").
		runStart("run1", "resp1", "m1").
		step("run1", Step{ResponseID: "resp1", NextResponseID: "resp2", ToolCalls: []ToolCall{call("c1", "clock", `{}`)},
			Raw: json.RawMessage(`{"secret":"provider detail"}`)}).
		result("run1", "c1", "clock", "12:00").
		step("run1", Step{ResponseID: "resp2", Index: 1, Text: "noon", Raw: json.RawMessage(`[1]`)}).
		runEnd("run1", RunCompleted, "").build()
	tr := ProjectSession("sess1", events)
	keep := ProjectSession("sess1", events)

	w := WireTranscript(tr)
	for _, it := range w.Items {
		if it.Raw != nil {
			t.Errorf("item %s keeps Raw %s", it.ID, it.Raw)
		}
	}
	if !reflect.DeepEqual(tr, keep) {
		t.Errorf("WireTranscript modified its input")
	}
	if tr.Items[1].Raw == nil || tr.Items[2].Raw == nil {
		t.Errorf("input lost its Raw")
	}
	// Only Raw differs.
	for i := range tr.Items {
		a := tr.Items[i]
		a.Raw = nil
		if !reflect.DeepEqual(a, w.Items[i]) {
			t.Errorf("item %d differs beyond Raw:\n%+v\n%+v", i, a, w.Items[i])
		}
	}
	// The copy is independent: changing it leaves the input alone.
	w.Items[0].Text = "changed"
	if tr.Items[0].Text != "hello" {
		t.Errorf("WireTranscript shares its items with the input")
	}
	if w := WireTranscript(Transcript{SessionID: "empty", Items: []Item{}}); w.Items == nil {
		t.Errorf("empty transcript: Items is nil")
	}
	b, _ := json.Marshal(WireTranscript(tr))
	if strings.Contains(string(b), "secret") || strings.Contains(string(b), `"raw"`) {
		t.Errorf("wire JSON holds raw payloads: %s", b)
	}
}

// TestWireTranscriptJSON pins the JSON shape clients render.
func TestWireTranscriptJSON(t *testing.T) {
	b0 := newBuilder()
	b0.events = toolScenario()
	events := b0.input("m2", "", "and <now>?").runStart("run2", "resp3", "m2").build()
	tr := WireTranscript(ProjectSession("sess1", events, Live{RunID: "run2", ResponseID: "resp3", Text: "Let me"}))
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}

	var shape struct {
		SessionID *string          `json:"session_id"`
		Items     []map[string]any `json:"items"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&shape); err != nil {
		t.Fatalf("transcript JSON %s: %v", b, err)
	}
	if shape.SessionID == nil || *shape.SessionID != "sess1" {
		t.Errorf("session_id missing: %s", b)
	}
	for _, it := range shape.Items {
		for _, k := range []string{"id", "kind", "text"} {
			if _, ok := it[k]; !ok {
				t.Errorf("item lacks %q: %v", k, it)
			}
		}
		if it["kind"] == "response" {
			for _, k := range []string{"status", "run_id"} {
				if _, ok := it[k]; !ok {
					t.Errorf("response lacks %q: %v", k, it)
				}
			}
		} else if _, ok := it["status"]; ok {
			t.Errorf("user item has a status: %v", it)
		}
		if _, ok := it["raw"]; ok {
			t.Errorf("item has raw: %v", it)
		}
	}
	golden(t, filepath.Join("testdata", "wire_transcript.json"), marshalGolden(t, tr))
}

func TestProjectRun(t *testing.T) {
	usage := func(cost, upstream float64, byok *bool) Usage {
		return Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110, CachedTokens: 50, ReasoningTokens: 3,
			Cost: cost, UpstreamCost: upstream, IsBYOK: byok}
	}
	events := newBuilder().
		input("m1", "", "go").
		runStart("run1", "resp1", "m1").
		resume("run1", 1).
		step("run1", Step{ResponseID: "resp1", NextResponseID: "resp2", ToolCalls: []ToolCall{call("c1", "clock", `{}`)},
			Usage: usage(0.01, 0.10, ptr(true))}). // BYOK: 0.01 + 0.10
		result("run1", "c1", "clock", "12:00").
		resume("run1", 2).
		step("run1", Step{ResponseID: "resp2", NextResponseID: "resp3", Index: 1, Text: "thinking",
			ToolCalls: []ToolCall{call("c2", "clock", `{}`)},
			Usage:     usage(0.02, 0.20, ptr(false))}). // credits: 0.02
		result("run1", "c2", "clock", "12:01").
		step("run1", Step{ResponseID: "resp3", Index: 2, Text: "it is noon",
			Usage: usage(0.04, 0.40, nil)}). // unknown: 0.04
		runEnd("run1", RunFailed, "could not notify").
		input("m2", "", "other").
		runStart("run2", "resp4", "m2").build()

	run, ok := ProjectRun(events, "run1")
	if !ok {
		t.Fatal("ok = false")
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"ID", run.ID, "run1"},
		{"Inputs", run.Inputs, []string{"m1"}},
		{"Ended", run.Ended, true},
		{"Status", run.Status, RunFailed},
		{"Reason", run.Reason, "could not notify"},
		{"Steps", len(run.Steps), 3},
		{"Results", len(run.Results), 2},
		{"Text", run.Text, "it is noon"},
		{"ResponseID", run.ResponseID, "resp3"},
		{"ResumeAttempts", run.ResumeAttempts, 2},
		{"StartedAt", run.StartedAt, events[1].Time},
		{"EndedAt", run.EndedAt, events[9].Time},
		{"Usage", run.Usage, Usage{PromptTokens: 300, CompletionTokens: 30, TotalTokens: 330, CachedTokens: 150,
			ReasoningTokens: 9, Cost: 0.07, UpstreamCost: 0.70}},
	}
	for _, c := range checks {
		if u, ok := c.got.(Usage); ok {
			w := c.want.(Usage)
			if !floatNear(u.Cost, w.Cost) || !floatNear(u.UpstreamCost, w.UpstreamCost) {
				t.Errorf("Usage costs = %v/%v, want %v/%v", u.Cost, u.UpstreamCost, w.Cost, w.UpstreamCost)
			}
			u.Cost, u.UpstreamCost, w.Cost, w.UpstreamCost = 0, 0, 0, 0
			c.got, c.want = u, w
		}
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if want := 0.01 + 0.10 + 0.02 + 0.04; !floatNear(run.Cost, want) {
		t.Errorf("Cost = %v, want %v (BYOK true adds upstream; false and nil do not)", run.Cost, want)
	}
	if run.Results[1].Output != "12:01" || run.Steps[2].Text != "it is noon" {
		t.Errorf("steps/results out of order: %+v %+v", run.Steps, run.Results)
	}
}

func floatNear(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestProjectRunCases(t *testing.T) {
	tests := []struct {
		name       string
		events     []Event
		run        string
		ok         bool
		ended      bool
		status     RunStatus
		text       string
		responseID string
		steps      int
	}{
		{"unknown run", chatScenario(), "run9", false, false, "", "", "", 0},
		{"no events", nil, "run1", false, false, "", "", "", 0},
		{"completed", chatScenario(), "run1", true, true, RunCompleted, "hi there", "resp1", 1},
		{"tool call", toolScenario(), "run1", true, true, RunCompleted, "It is sunny in Paris.", "resp2", 2},
		{"open, first pass minted", crashScenario(), "run1", true, false, "", "", "resp1", 0},
		{"cancelled partial", cancelledScenario(), "run1", true, true, RunCancelled, "Roses are", "resp1", 1},
		{"second run of two", compactionScenario(), "run2", true, true, RunCompleted, "second answer", "resp2", 1},
		{"first run-end wins", newBuilder().input("m1", "", "x").runStart("run1", "resp1", "m1").
			runEnd("run1", RunCancelled, "").runEnd("run1", RunFailed, "").build(), "run1", true, true, RunCancelled, "", "resp1", 0},
		// A step appended twice (a retried append) is one pass: counted
		// once, as the transcript shows it once.
		{"duplicate step", newBuilder().input("m1", "", "x").runStart("run1", "resp1", "m1").
			text("run1", "resp1", 0, "a").text("run1", "resp1", 0, "a").runEnd("run1", RunCompleted, "").build(),
			"run1", true, true, RunCompleted, "a", "resp1", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, ok := ProjectRun(tt.events, tt.run)
			if ok != tt.ok || run.Ended != tt.ended || run.Status != tt.status || run.Text != tt.text ||
				run.ResponseID != tt.responseID || len(run.Steps) != tt.steps {
				t.Errorf("ProjectRun = ok %v, {Ended %v Status %q Text %q ResponseID %q Steps %d}, want ok %v {%v %q %q %q %d}",
					ok, run.Ended, run.Status, run.Text, run.ResponseID, len(run.Steps),
					tt.ok, tt.ended, tt.status, tt.text, tt.responseID, tt.steps)
			}
			if run.ID != tt.run {
				t.Errorf("ID = %q", run.ID)
			}
			var cost float64
			for _, s := range run.Steps {
				cost += s.Usage.Billed()
			}
			if !floatNear(run.Cost, cost) {
				t.Errorf("Cost = %v, want the sum over Steps %v", run.Cost, cost)
			}
		})
	}
}

func TestOpenRuns(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   []string
	}{
		{"none", nil, nil},
		{"completed", chatScenario(), nil},
		{"crashed", crashScenario(), []string{"run1"}},
		{"cancelled", cancelledScenario(), nil},
		{"several in start order", newBuilder().
			input("m1", "", "a").runStart("runB", "r1", "m1").
			input("m2", "", "b").runStart("runA", "r2", "m2").
			input("m3", "", "c").runStart("runC", "r3", "m3").runEnd("runA", RunCompleted, "").build(),
			[]string{"runB", "runC"}},
		{"run-end without run-start", newBuilder().runEnd("ghost", RunFailed, "").build(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OpenRuns(tt.events)
			if !slices.Equal(got, tt.want) {
				t.Errorf("OpenRuns = %v, want %v", got, tt.want)
			}
		})
	}
}

// The item time is the step's, to the nanosecond, in UTC.
func TestProjectSessionTimes(t *testing.T) {
	tr := ProjectSession("s", cloneEvents(t, toolScenario()))
	for _, it := range tr.Items {
		if it.Time.Location() != time.UTC || it.Time.Nanosecond() != t0.Nanosecond() {
			t.Errorf("item %s time %v", it.ID, it.Time)
		}
	}
}

// TestRunItems: the transcript items of one run — the message that started
// it, one folded into it, its responses — and none of another run's.
func TestRunItems(t *testing.T) {
	events := newBuilder().
		input("m1", "", "go").
		runStart("run1", "resp1", "m1").
		step("run1", Step{ResponseID: "resp1", NextResponseID: "resp2", ToolCalls: []ToolCall{call("c1", "clock", `{}`)}}).
		input("m2", "", "and the date?").
		result("run1", "c1", "clock", "12:00").
		step("run1", Step{ResponseID: "resp2", Index: 1, Text: "noon, the sixth", Inputs: []string{"m2"}}).
		runEnd("run1", RunCompleted, "").
		input("m3", "", "other").
		runStart("run2", "resp3", "m3").build()
	var got []string
	for _, it := range RunItems(events, "run1") {
		got = append(got, string(it.Kind)+":"+it.ID+":"+it.Text)
	}
	want := []string{"user:m1:go", "response:resp1:", "user:m2:and the date?", "response:resp2:noon, the sixth"}
	if !slices.Equal(got, want) {
		t.Fatalf("RunItems(run1) = %q, want %q", got, want)
	}
	if items := RunItems(events, "run9"); items != nil {
		t.Fatalf("RunItems of no run: %+v", items)
	}
}
