package ledger

import (
	"fmt"
	"strings"
	"testing"
)

// benchSession builds a realistic session of about n events: runs of
// input → run-start → step with two tool calls → tool-start → two
// tool-results → final step → run-end, with texts of a few hundred bytes.
func benchSession(n int) []Event {
	para := strings.Repeat("The quick brown fox jumps over the lazy dog; ", 8) // ~360 bytes
	b := newBuilder()
	for r := 0; len(b.events) < n; r++ {
		run, msg := fmt.Sprintf("run_%05d", r), fmt.Sprintf("msg_%05d", r)
		r1, r2 := fmt.Sprintf("resp_%05d_a", r), fmt.Sprintf("resp_%05d_b", r)
		c1, c2 := fmt.Sprintf("call_%05d_1", r), fmt.Sprintf("call_%05d_2", r)
		b.input(msg, "", "Question "+msg+": "+para[:200]).
			runStart(run, r1, msg).
			step(run, Step{ResponseID: r1, NextResponseID: r2, Text: para[:120], Reasoning: para[:240],
				ToolCalls:    []ToolCall{call(c1, "read_file", `{"path":"src/main.go","lines":[1,200]}`), call(c2, "grep", `{"pattern":"func main"`)},
				FinishReason: "tool_calls", Model: "openai/gpt-5", GenerationID: "gen-" + r1,
				Usage: Usage{PromptTokens: 4000, CompletionTokens: 150, TotalTokens: 4150, CachedTokens: 3000, Cost: 0.004, IsBYOK: ptr(r%2 == 0), UpstreamCost: 0.01},
				Raw:   []byte(`{"reasoning_details":[{"type":"reasoning.encrypted","data":"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="}]}`)}).
			toolStart(run, c1, "read_file").
			result(run, c1, "read_file", para).
			errResult(run, c2, "grep", "invalid arguments: unexpected end of JSON input").
			step(run, Step{ResponseID: r2, Index: 1, Text: para, FinishReason: "stop", Model: "openai/gpt-5",
				Usage: Usage{PromptTokens: 4500, CompletionTokens: 300, TotalTokens: 4800, Cost: 0.005}}).
			runEnd(run, RunCompleted, "")
	}
	return b.events[:n]
}

func BenchmarkProjectSession10k(b *testing.B) {
	events := benchSession(10_000)
	b.ReportAllocs()
	for b.Loop() {
		t := ProjectSession("sess", events)
		if len(t.Items) == 0 {
			b.Fatal("no items")
		}
	}
}

func BenchmarkReplayMessages10k(b *testing.B) {
	events := benchSession(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if len(ReplayMessages(events)) == 0 {
			b.Fatal("no messages")
		}
	}
}

// benchStep is a typical step event: text, reasoning, two tool calls,
// usage and a raw payload.
func benchStep() Event {
	return benchSession(3)[2]
}

// BenchmarkEncode encodes one step event: Encode (its fast path), and
// encoding/json, which it matches byte for byte and falls back to, both
// after the same validation.
func BenchmarkEncode(b *testing.B) {
	e := benchStep()
	line, err := Encode(e)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		encode func(Event) ([]byte, error)
	}{{"fast", Encode}, {"json", encodeJSON}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.encode(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// encodeJSON is Encode without its fast path.
func encodeJSON(e Event) ([]byte, error) {
	if err := Validate(e); err != nil {
		return nil, err
	}
	return slowEncode(e)
}

// BenchmarkDecode decodes one step event: Decode (its fast path), and the
// strict encoding/json decoder it falls back to, its floor of old.
func BenchmarkDecode(b *testing.B) {
	line, err := Encode(benchStep())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (Event, error)
	}{{"fast", Decode}, {"strict", decodeStrict}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTrafficCodec encodes and decodes a plugin's tool result with
// its traffic (publish_post's: a key-value read, a POST, a key-value
// write), by the fast paths and by encoding/json.
func BenchmarkTrafficCodec(b *testing.B) {
	tr := fullTraffic()
	tr.HTTP, tr.KV, tr.Truncated, tr.Dropped = tr.HTTP[:1], tr.KV[:1], false, 0
	tr.HTTP[0].Denied, tr.HTTP[0].Error = false, ""
	tr.KV = append(tr.KV, KVAccess{Seq: 2, Op: KVSet, Key: "publish_post/call_1", ValueBytes: 74, ValueDigest: tr.HTTP[0].ResponseDigest})
	e := trafficEvent(tr)
	line, err := Encode(e)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"encode/fast", func() error { _, err := Encode(e); return err }},
		{"encode/json", func() error { _, err := encodeJSON(e); return err }},
		{"decode/fast", func() error { _, err := Decode(line); return err }},
		{"decode/strict", func() error { _, err := decodeStrict(line); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The benchmark session is itself a sane session.
func TestBenchSession(t *testing.T) {
	events := benchSession(10_000)
	if len(events) != 10_000 {
		t.Fatalf("%d events", len(events))
	}
	for _, e := range events {
		if err := Validate(e); err != nil {
			t.Fatal(err)
		}
	}
	checkConversation(t, ReplayMessages(events))
	checkUniqueIDs(t, ProjectSession("s", events).Items)
	if s := benchStep(); s.Kind != KindStep || len(s.Step.ToolCalls) != 2 {
		t.Fatalf("benchStep = %+v", s)
	}
}

// compactedSession is benchSession(n) with a compaction after every 50
// runs, as a long chat that survived many compactions has.
func compactedSession(n int) []Event {
	var out []Event
	runs := 0
	for _, e := range benchSession(n) {
		out = append(out, e)
		if e.Kind == KindRunEnd {
			if runs++; runs%50 == 25 { // so that runs follow the last note
				out = append(out, Event{ID: fmt.Sprintf("cmp-%d", runs), Kind: KindCompaction, Time: e.Time, RunID: e.RunID,
					Compaction: &Compaction{Summary: strings.Repeat("The story so far. ", 100), Through: e.ID, PromptTokens: 120000}})
			}
		}
	}
	return out
}

// BenchmarkProjectSessionCompacted10k projects a 10,000-event session that
// holds a compaction every 50 runs (the transcript skips the notes).
func BenchmarkProjectSessionCompacted10k(b *testing.B) {
	events := compactedSession(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if len(ProjectSession("sess", events).Items) == 0 {
			b.Fatal("no items")
		}
	}
}

// BenchmarkReplayMessagesCompacted10k builds the model's messages of the
// same session: the last note, then only what follows it.
func BenchmarkReplayMessagesCompacted10k(b *testing.B) {
	events := compactedSession(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if len(ReplayMessages(events)) == 0 {
			b.Fatal("no messages")
		}
	}
}
