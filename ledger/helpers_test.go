package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"
)

// update regenerates the golden outputs in testdata/ (never the checked-in
// ledgers, which are fixed inputs).
var update = flag.Bool("update", false, "regenerate golden files in testdata/")

// t0 is the time of a built session's first event: nanoseconds set, in UTC.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// builder constructs event sequences for tests: ids "ev-001", "ev-002", …
// and times one second apart from t0.
type builder struct {
	events []Event
}

func newBuilder() *builder { return &builder{} }

func (b *builder) add(runID string, kind Kind, set func(*Event)) *builder {
	n := len(b.events) + 1
	e := Event{ID: fmt.Sprintf("ev-%03d", n), Kind: kind, Time: t0.Add(time.Duration(n-1) * time.Second), RunID: runID}
	set(&e)
	b.events = append(b.events, e)
	return b
}

// lastID is the id of the event added last.
func (b *builder) lastID() string { return b.events[len(b.events)-1].ID }

// input adds a user message; runID is empty for a queued input.
func (b *builder) input(msgID, runID, text string) *builder {
	return b.inputParts(msgID, runID, TextPart(text))
}

func (b *builder) inputParts(msgID, runID string, parts ...Part) *builder {
	return b.add(runID, KindInput, func(e *Event) {
		e.Input = &Input{MessageID: msgID, Parts: parts}
	})
}

func (b *builder) runStart(runID, responseID string, inputs ...string) *builder {
	return b.add(runID, KindRunStart, func(e *Event) {
		e.RunStart = &RunStart{Inputs: inputs, ResponseID: responseID, Agent: "default", Model: "test/model"}
	})
}

func (b *builder) step(runID string, s Step) *builder {
	return b.add(runID, KindStep, func(e *Event) { e.Step = &s })
}

// text adds a final step with text.
func (b *builder) text(runID, responseID string, index int, text string) *builder {
	return b.step(runID, Step{ResponseID: responseID, Index: index, Text: text, FinishReason: "stop",
		Model: "test/model", Usage: Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, Cost: 0.001}})
}

// calls adds a step that asks for tools and mints next for the next pass.
func (b *builder) calls(runID, responseID, next string, index int, calls ...ToolCall) *builder {
	return b.step(runID, Step{ResponseID: responseID, NextResponseID: next, Index: index, ToolCalls: calls,
		FinishReason: "tool_calls", Model: "test/model",
		Usage: Usage{PromptTokens: 20, CompletionTokens: 8, TotalTokens: 28, Cost: 0.002}})
}

func (b *builder) toolStart(runID, callID, name string) *builder {
	return b.add(runID, KindToolStart, func(e *Event) {
		e.ToolStart = &ToolStart{CallID: callID, Name: name, Effect: "external"}
	})
}

func (b *builder) result(runID, callID, name, output string) *builder {
	return b.add(runID, KindToolResult, func(e *Event) {
		e.ToolResult = &ToolResult{CallID: callID, Name: name, Output: output, Source: "builtin", DurationMS: 3}
	})
}

func (b *builder) errResult(runID, callID, name, output string) *builder {
	return b.add(runID, KindToolResult, func(e *Event) {
		e.ToolResult = &ToolResult{CallID: callID, Name: name, Output: output, IsError: true}
	})
}

func (b *builder) runEnd(runID string, status RunStatus, reason string) *builder {
	return b.add(runID, KindRunEnd, func(e *Event) { e.RunEnd = &RunEnd{Status: status, Reason: reason} })
}

func (b *builder) poke(runID, text string) *builder {
	return b.add(runID, KindPoke, func(e *Event) { e.Poke = &Poke{Text: text} })
}

func (b *builder) compaction(runID, summary, through string) *builder {
	return b.add(runID, KindCompaction, func(e *Event) {
		e.Compaction = &Compaction{Summary: summary, Through: through, PromptTokens: 9000,
			Usage: Usage{PromptTokens: 9000, CompletionTokens: 300, TotalTokens: 9300, Cost: 0.01}}
	})
}

func (b *builder) resume(runID string, attempt int) *builder {
	return b.add(runID, KindResumeAttempt, func(e *Event) {
		e.ResumeAttempt = &ResumeAttempt{Attempt: attempt, Host: "host-a"}
	})
}

func (b *builder) build() []Event { return b.events }

func call(id, name, args string) ToolCall { return ToolCall{ID: id, Name: name, Arguments: args} }

// The scenarios shared by the projection and replay tests.

func chatScenario() []Event {
	return newBuilder().
		input("m1", "", "hello").
		runStart("run1", "resp1", "m1").
		text("run1", "resp1", 0, "hi there").
		runEnd("run1", RunCompleted, "").
		build()
}

// reusedCallIDsScenario is a ledger an earlier build wrote while the model
// reused its call ids, as some models number their calls per reply: twice
// in one reply, then across passes and runs, with a duplicate result, and
// a last run interrupted before its result.
func reusedCallIDsScenario() []Event {
	return newBuilder().
		input("m1", "run1", "count").
		runStart("run1", "resp1", "m1").
		calls("run1", "resp1", "resp2", 0, call("call_0", "count", `{}`), call("call_0", "count", `{}`)).
		result("run1", "call_0", "count", "1").
		result("run1", "call_0", "count", "2").
		result("run1", "call_0", "count", "2 again"). // a duplicate: no call is left for it
		calls("run1", "resp2", "resp3", 1, call("call_0", "count", `{}`)).
		toolStart("run1", "call_0", "count").
		result("run1", "call_0", "count", "3").
		text("run1", "resp3", 2, "done").
		runEnd("run1", RunCompleted, "").
		input("m2", "run2", "again").
		runStart("run2", "resp4", "m2").
		calls("run2", "resp4", "resp5", 0, call("call_0", "count", `{}`)).
		build()
}

func toolScenario() []Event {
	return newBuilder().
		input("m1", "", "weather in Paris?").
		runStart("run1", "resp1", "m1").
		calls("run1", "resp1", "resp2", 0, call("c1", "weather", `{"city":"Paris"}`)).
		toolStart("run1", "c1", "weather").
		result("run1", "c1", "weather", "sunny, 21°C").
		text("run1", "resp2", 1, "It is sunny in Paris.").
		runEnd("run1", RunCompleted, "").
		build()
}

// crashScenario: the process died after run-start, before the first step.
func crashScenario() []Event {
	return newBuilder().
		input("m1", "", "hello").
		runStart("run1", "resp1", "m1").
		build()
}

// cancelledScenario: the user cancelled mid-pass; the partial pass is
// recorded.
func cancelledScenario() []Event {
	return newBuilder().
		input("m1", "", "write a poem").
		runStart("run1", "resp1", "m1").
		step("run1", Step{ResponseID: "resp1", Text: "Roses are", Partial: true, Usage: Usage{PromptTokens: 7}}).
		runEnd("run1", RunCancelled, "cancelled by the user").
		build()
}

func compactionScenario() []Event {
	b := newBuilder().
		input("m1", "", "first question").
		runStart("run1", "resp1", "m1").
		text("run1", "resp1", 0, "first answer").
		runEnd("run1", RunCompleted, "")
	through := b.lastID()
	return b.input("m2", "", "second question").
		runStart("run2", "resp2", "m2").
		compaction("run2", "SUMMARY: the user asked a first question.", through).
		poke("run2", "please continue").
		text("run2", "resp2", 0, "second answer").
		runEnd("run2", RunCompleted, "").
		build()
}

// readLedger decodes a JSON-lines ledger; the error names the line.
func readLedger(path string) ([]Event, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var events []Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		e, err := Decode(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

// marshalGolden renders v as indented JSON with a final newline.
func marshalGolden(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return append(b, '\n')
}

// golden compares got with the file at path, or writes it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// diff reports a mismatch of two values as indented JSON, which reads
// better than %#v for nested structs.
func diff(t *testing.T, what string, got, want any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	g, w := lines(got), lines(want)
	if bytes.Equal(g, w) {
		t.Errorf("%s: values differ but print alike:\ngot  %#v\nwant %#v", what, got, want)
		return
	}
	t.Errorf("%s:\n--- got\n%s\n--- want\n%s", what, g, w)
}

// lines renders a slice as one compact JSON line per element, anything
// else as indented JSON.
func lines(v any) []byte {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		b, _ := json.MarshalIndent(v, "", "  ")
		return b
	}
	var buf bytes.Buffer
	for i := range rv.Len() {
		buf.WriteString("  ")
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(rv.Index(i).Interface())
	}
	return buf.Bytes()
}

func ptr[T any](v T) *T { return &v }
