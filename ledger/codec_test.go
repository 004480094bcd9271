package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// junk is arbitrary bytes: NUL, 0xff, invalid UTF-8, a lone continuation
// byte, a truncated multi-byte sequence.
var junk = []byte{0x00, 0xff, 0xfe, 0xc3, 0x28, 0x80, 0xe2, 0x82, 0x00, '<', '&', '>'}

// fullEvents returns one event of every kind with every field set.
func fullEvents() []Event {
	tm := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	ev := func(id string, k Kind, run string) Event { return Event{ID: id, Kind: k, Time: tm, RunID: run} }
	usage := Usage{PromptTokens: 1200, CompletionTokens: 340, TotalTokens: 1540, CachedTokens: 1000,
		CacheWriteTokens: 200, ReasoningTokens: 64, Cost: 0.0123, IsBYOK: ptr(true), UpstreamCost: 0.0456, CostUnknown: true}

	in := ev("ev_in", KindInput, "run_1")
	in.Input = &Input{MessageID: "msg_1", RequestID: "req_1", Parts: []Part{
		TextPart("look <at> this & that"),
		{Type: PartImage, MIME: "image/png", Data: junk, Name: "a.png"},
		{Type: PartAudio, MIME: "audio/wav", Data: []byte{0xff, 0x00, 0xff, 0x00}},
		{Type: PartFile, URL: "https://example.com/f.pdf?a=1&b=2", Name: "f.pdf", MIME: "application/pdf"},
		{Type: PartImage, MIME: "image/jpeg", Name: "big.jpg", Blob: "sha256:" + strings.Repeat("ab", 32), Size: 5 << 20},
	}, Parent: &ParentCall{SessionID: "parent_1", RunID: "run_0", CallID: "call_9", Agent: "lead"}, Overlap: OverlapRollback}

	rs := ev("ev_rs", KindRunStart, "run_1")
	rs.RunStart = &RunStart{Inputs: []string{"msg_1", "msg_2"}, ResponseID: "resp_1", Agent: "coder",
		Model: "openai/gpt-5", MaxSteps: 25, Task: &TaskRun{Deliverable: "report", Description: "a <short> report",
			Schema: json.RawMessage(`{"type":"object","required":["title"]}`), Validator: "house-style", MaxPokes: 2}}

	st := ev("ev_st", KindStep, "run_1")
	st.Step = &Step{ResponseID: "resp_1", NextResponseID: "resp_2", Index: 3, Inputs: []string{"msg_q1"}, Text: "Let me check <that> & more.",
		Reasoning: "thinking…", ToolCalls: []ToolCall{
			{ID: "call_1", Name: "read_file", Arguments: `{"path":"a<b>.go"}`},
			{ID: "call_2", Name: "shell", Arguments: `{"cmd": "ls`},
		}, FinishReason: "tool_calls", Model: "openai/gpt-5-2025", GenerationID: "gen-123",
		Usage: usage, Partial: true, Raw: json.RawMessage(`{"reasoning_details":[{"type":"reasoning.encrypted","data":"<&>"}]}`)}

	ts := ev("ev_ts", KindToolStart, "run_1")
	ts.ToolStart = &ToolStart{CallID: "call_2", Name: "shell", Effect: "external", Idempotent: true}

	tr := ev("ev_tr", KindToolResult, "run_1")
	tr.ToolResult = &ToolResult{CallID: "call_2", Name: "shell", Output: "exit 1\n<stderr>", IsError: true,
		OutputBlob: "sha256:" + strings.Repeat("0f", 32), OutputSize: 1 << 20,
		Source: "sha256:abcdef", DurationMS: 1234, Fuel: 987654, PolicyFuel: 4321, Synthetic: true,
		Traffic: fullTraffic()}

	ar := ev("ev_ar", KindApprovalRequest, "run_1")
	ar.ApprovalRequest = &ApprovalRequest{ApprovalID: "appr_1", Kind: "custom", CallID: "call_3", Name: "deploy",
		Input: json.RawMessage(`{"env":"prod"}`), Summary: "deploy to prod", Effect: "external",
		InputDigest: "sha256:5d6c0a8b", Reason: "a deploy needs a person", Policy: "side_effects",
		PolicySource: "sha256:0123", PolicyFuel: 765, ExpiresAt: time.Date(2025, 3, 15, 9, 0, 0, 0, time.UTC)}

	ad := ev("ev_ad", KindApprovalDecision, "run_1")
	ad.ApprovalDecision = &ApprovalDecision{ApprovalID: "appr_1", Decision: "edit", Reason: "not on a Friday", By: "alice",
		Input: json.RawMessage(`{"title":"Monday <ok>"}`), InputDigest: InputDigest(`{"title":"Monday <ok>"}`), Response: "the post is up"}

	co := ev("ev_co", KindCompaction, "run_1")
	co.Compaction = &Compaction{Summary: "the story so far", Through: "ev_tr", PromptTokens: 120000, Usage: usage}

	po := ev("ev_po", KindPoke, "run_1")
	po.Poke = &Poke{Text: "please finish the task"}

	re := ev("ev_re", KindRunEnd, "run_1")
	re.RunEnd = &RunEnd{Status: RunTimedOut, Reason: "step 2 ran past its step timeout", Timeout: "step", Inputs: []string{"msg_q2"}, RestartedBy: "run_2",
		Deliverable: json.RawMessage(`{"title":"<&>"}`), RolledBack: true}

	ra := ev("ev_ra", KindResumeAttempt, "run_1")
	ra.ResumeAttempt = &ResumeAttempt{Attempt: 2, Host: "host-b"}

	rt := ev("ev_rt", KindRetry, "run_1")
	rt.Retry = &Retry{ResponseID: "resp_1", Attempt: 1, Reason: "HTTP 429: rate limited", DelayMS: 2000}

	fk := ev("ev_fk", KindFork, "run_1")
	fk.Fork = &Fork{Source: "sess_src", At: "ev_st", Item: "resp_1", Copied: 12, Agent: "reviewer", Model: "anthropic/claude-<x>"}

	tj := ev("ev_tj", KindToolJournal, "run_1")
	tj.ToolJournal = &ToolJournal{CallID: "call_2", Name: "http_steps", Source: "sha256:9f9f", At: 3, Entries: []JournalEntry{
		{Op: JournalHTTPSend, Request: "sha256:1a2b", What: "POST https://steps.example.com/a?<b>", Key: "agentic-0123", Answer: []byte{0, 1, 0xff, '"'}},
	}}

	return []Event{in, rs, st, ts, tr, ar, ad, co, po, re, ra, rt, fk, tj}
}

// fullTraffic returns a traffic record with every field of it and of its
// entries set, by a second entry of each list where one entry cannot
// hold them all (text and base64 bodies, keys and values).
func fullTraffic() *ToolTraffic {
	return &ToolTraffic{
		HTTP: []HTTPExchange{
			{Seq: 1, Method: "POST", URL: "https://blog.example.com/api/posts?draft=1&a=<b>", URLDigest: "sha256:0f0f",
				RequestHeaders: []string{"content-type", "idempotency-key"}, RequestBytes: 42, RequestDigest: "sha256:1a2b",
				Status: 201, ResponseHeaders: []string{"content-type: application/json", "x-note: <&>"}, ResponseBytes: 27,
				ResponseDigest: "sha256:3c4d", ResponseBody: `{"id":"p1","url":"/p/1"}` + "\n\u2028", Error: "request failed: EOF",
				Denied: true, DurationMS: 12},
			{Method: "GET", URL: "https://x.example.com/", Status: 200, ResponseBytes: 4, ResponseBodyBase64: junk, BodyOmitted: true},
		},
		KV: []KVAccess{
			{Seq: 2, Op: KVGet, Key: "publish_post/call_1", Found: true, ValueBytes: 9, ValueDigest: "sha256:5e6f",
				Value: `{"a":"<"}`, ValueOmitted: true, Error: "denied: the key-value store is not enabled"},
			{Op: KVSet, KeyBase64: junk, ValueBytes: 4, ValueBase64: junk},
		},
		Truncated: true,
		Dropped:   3,
	}
}

// checkFull reports zero fields in v (a struct, through pointers and
// nested structs), so that a field added to a body is added here too.
func checkFull(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			t.Errorf("%s is nil", path)
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type() == reflect.TypeFor[time.Time]() {
		if v.IsZero() {
			t.Errorf("%s is not set", path)
		}
		return
	}
	for i := range v.NumField() {
		checkFull(t, path+"."+v.Type().Field(i).Name, v.Field(i))
	}
}

// bodyOf returns the field of e whose JSON name is the body of e.Kind.
func bodyOf(e Event) reflect.Value {
	v := reflect.ValueOf(e)
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		if name == bodyField[e.Kind] {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

func TestFullEventsCoverEveryKind(t *testing.T) {
	var got []Kind
	for _, e := range fullEvents() {
		got = append(got, e.Kind)
		checkFull(t, bodyField[e.Kind], bodyOf(e))
		if err := Validate(e); err != nil {
			t.Errorf("Validate(%s): %v", e.Kind, err)
		}
	}
	diff(t, "kinds of fullEvents", got, Kinds())
	if len(bodyField) != len(Kinds()) {
		t.Errorf("bodyField has %d kinds, Kinds() %d", len(bodyField), len(Kinds()))
	}
}

func TestRoundTrip(t *testing.T) {
	for _, e := range fullEvents() {
		t.Run(string(e.Kind), func(t *testing.T) {
			b, err := Encode(e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if bytes.ContainsAny(b, "\n\r") {
				t.Errorf("encoded event holds a newline: %s", b)
			}
			if !bytes.HasPrefix(b, []byte(`{"v":1,`)) {
				t.Errorf("encoded event does not start with the version: %s", b)
			}
			if bytes.Contains(b, []byte(`\u003c`)) || bytes.Contains(b, []byte(`\u0026`)) || bytes.Contains(b, []byte(`\u003e`)) {
				t.Errorf("HTML characters are escaped: %s", b)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(got, e) {
				t.Errorf("Decode(Encode(e)) differs:\ngot  %#v\nwant %#v", got, e)
			}
			if got.Time.Location() != time.UTC || got.Time.Nanosecond() != 123456789 {
				t.Errorf("time = %v (%v), want nanoseconds in UTC", got.Time, got.Time.Location())
			}
			// Encoding is deterministic.
			b2, err := Encode(got)
			if err != nil || !bytes.Equal(b, b2) {
				t.Errorf("re-encoding differs (%v):\n%s\n%s", err, b, b2)
			}
		})
	}
}

func TestRoundTripBinaryParts(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for name, data := range map[string][]byte{
		"every byte":   all,
		"single NUL":   {0},
		"single 0xff":  {0xff},
		"invalid utf8": junk,
	} {
		t.Run(name, func(t *testing.T) {
			e := Event{ID: "ev", Kind: KindInput, Time: t0, Input: &Input{MessageID: "m", Parts: []Part{
				{Type: PartImage, MIME: "image/jpeg", Data: data},
				{Type: PartAudio, MIME: "audio/mpeg", Data: data},
			}}}
			b, err := Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range got.Input.Parts {
				if !bytes.Equal(p.Data, data) {
					t.Errorf("part %d: data %x, want %x", i, p.Data, data)
				}
			}
		})
	}
}

// Encode documents that an event it accepts decodes to an equal value, and
// storage documents that texts round-trip verbatim. A string that is not
// valid UTF-8 (e.g. raw tool output) must therefore either be refused by
// Encode or come back byte for byte; it must not be altered silently.
func TestEncodeInvalidUTF8Text(t *testing.T) {
	e := Event{ID: "ev", Kind: KindToolResult, Time: t0, RunID: "r",
		ToolResult: &ToolResult{CallID: "c", Name: "cat", Output: "bin: \xff\xfe\x00 end"}}
	b, err := Encode(e)
	if err != nil {
		return // refused: fine
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode(e)): %v", err)
	}
	if got.ToolResult.Output != e.ToolResult.Output {
		t.Errorf("Encode accepted invalid UTF-8 and altered it: got %q, want %q", got.ToolResult.Output, e.ToolResult.Output)
	}
}

// Decode must return canonical events: Decode(Encode(Decode(x))) equals
// Decode(x), and times are in UTC (storagetest checks that loaded times
// are UTC). Inputs here are valid, but not as Encode writes them.
func TestDecodeCanonical(t *testing.T) {
	const head = `{"v":1,"id":"e1","run_id":"r","time":"2025-01-01T10:00:00.5Z",`
	tests := []struct {
		name, in string
	}{
		{"time +00:00", `{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T10:00:00+00:00","run_id":"r","poke":{"text":"x"}}`},
		{"time +02:00", `{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T12:00:00+02:00","run_id":"r","poke":{"text":"x"}}`},
		{"empty tool_calls", head + `"kind":"step","step":{"response_id":"x","tool_calls":[],"usage":{}}}`},
		{"raw with spaces", head + `"kind":"step","step":{"response_id":"x","raw":{ "a" : [1, 2] },"usage":{}}}`},
		{"approval input with spaces", head + `"kind":"approval-request","approval_request":{"approval_id":"a","call_id":"c","name":"n","input":{ "x" : 1 }}}`},
		{"empty data with url", head + `"kind":"input","input":{"message_id":"m","parts":[{"type":"image","url":"https://x","data":""}]}}`},
		{"keys in other case", `{"V":1,"ID":"e1","Kind":"poke","Time":"2025-01-01T10:00:00Z","Run_ID":"r","Poke":{"Text":"x"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if x.Time.Location() != time.UTC {
				t.Errorf("decoded time %v is in %q, want UTC", x.Time, x.Time.Location())
			}
			b, err := Encode(x)
			if err != nil {
				t.Fatalf("Encode(Decode(in)): %v", err)
			}
			y, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode(Encode(Decode(in))): %v\n%s", err, b)
			}
			if !reflect.DeepEqual(x, y) {
				t.Errorf("Decode(Encode(x)) != x:\nx %#v\ny %#v", x, y)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	const env = `"v":1,"id":"e1","time":"2025-01-01T00:00:00Z","run_id":"r1"`
	obj := func(kind, body string) string {
		return `{` + env + `,"kind":"` + kind + `"` + body + `}`
	}
	step := func(s string) string { return obj("step", `,"step":{`+s+`}`) }
	input := func(s string) string {
		return `{"v":1,"id":"e1","time":"2025-01-01T00:00:00Z","kind":"input","input":{` + s + `}}`
	}

	tests := []struct {
		name  string
		in    string
		is    error  // errors.Is target; nil: neither ErrVersion nor ErrInvalid
		id    string // DecodeError.EventID
		kind  Kind   // DecodeError.Kind
		field string // DecodeError.Field
		msg   string // substring of Error()
	}{
		{name: "empty", in: ``},
		{name: "invalid JSON", in: `{"v":1,"id":"e1",`},
		{name: "not an object", in: `[1,2]`, msg: "cannot unmarshal array"},
		{name: "garbage", in: `hello`, msg: "invalid character"},
		{name: "missing v", in: `{"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r1","poke":{"text":"x"}}`,
			is: ErrVersion, id: "e1", kind: KindPoke, field: "v", msg: "missing"},
		{name: "v null", in: `{"v":null,"id":"e1","kind":"poke"}`, is: ErrVersion, id: "e1", kind: KindPoke, field: "v"},
		{name: "v 2", in: `{"v":2,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r1","poke":{"text":"x"}}`,
			is: ErrVersion, id: "e1", kind: KindPoke, field: "v", msg: "version 2"},
		{name: "v 2 with new fields", in: `{"v":2,"id":"e1","kind":"hologram","hologram":{}}`,
			is: ErrVersion, id: "e1", kind: "hologram", field: "v", msg: "version 2"},
		{name: "v 0", in: `{"v":0,"id":"e1","kind":"poke"}`, is: ErrVersion, id: "e1", kind: KindPoke, field: "v", msg: "version 0"},
		{name: "v string", in: `{"v":"1","id":"e1","kind":"poke"}`, id: "e1", kind: KindPoke, field: "v", msg: "cannot unmarshal string"},
		{name: "unknown kind", in: obj("hologram", ``), is: ErrInvalid, id: "e1", kind: "hologram", field: "kind", msg: `unknown kind "hologram"`},
		{name: "missing kind", in: `{` + env + `,"poke":{"text":"x"}}`, is: ErrInvalid, id: "e1", field: "kind", msg: "missing"},
		{name: "kind body mismatch", in: obj("step", `,"poke":{"text":"x"}`), is: ErrInvalid, id: "e1", kind: KindStep, field: "step", msg: "missing body"},
		{name: "two bodies", in: obj("poke", `,"poke":{"text":"x"},"run_end":{"status":"completed"}`),
			is: ErrInvalid, id: "e1", kind: KindPoke, field: "run_end", msg: "does not match"},
		{name: "missing id", in: `{"v":1,"kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r1","poke":{"text":"x"}}`,
			is: ErrInvalid, kind: KindPoke, field: "id", msg: "missing"},
		{name: "missing time", in: `{"v":1,"id":"e1","kind":"poke","run_id":"r1","poke":{"text":"x"}}`,
			is: ErrInvalid, id: "e1", kind: KindPoke, field: "time", msg: "missing"},
		{name: "zero time", in: `{"v":1,"id":"e1","kind":"poke","time":"0001-01-01T00:00:00Z","run_id":"r1","poke":{"text":"x"}}`,
			is: ErrInvalid, id: "e1", kind: KindPoke, field: "time"},
		{name: "bad time", in: `{"v":1,"id":"e1","kind":"poke","time":"yesterday","run_id":"r1","poke":{"text":"x"}}`,
			id: "e1", kind: KindPoke, msg: "yesterday"},
		{name: "missing run_id", in: `{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","poke":{"text":"x"}}`,
			is: ErrInvalid, id: "e1", kind: KindPoke, field: "run_id", msg: "missing"},

		// Required body fields, per kind, as Validate checks them.
		{name: "input.message_id", in: input(`"parts":[{"type":"text","text":"x"}]`), is: ErrInvalid, id: "e1", kind: KindInput, field: "input.message_id"},
		{name: "input.parts missing", in: input(`"message_id":"m"`), is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts"},
		{name: "input.parts empty", in: input(`"message_id":"m","parts":[]`), is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts"},
		{name: "part type missing", in: input(`"message_id":"m","parts":[{"text":"x"}]`), is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts[0]", msg: "missing type"},
		{name: "part type unknown", in: input(`"message_id":"m","parts":[{"type":"text","text":"a"},{"type":"video","url":"u"}]`),
			is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts[1]", msg: `unknown part type "video"`},
		{name: "image without data or url", in: input(`"message_id":"m","parts":[{"type":"image","mime":"image/png"}]`),
			is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts[0]", msg: "neither data nor url"},
		{name: "audio data without mime", in: input(`"message_id":"m","parts":[{"type":"audio","data":"AAE="}]`),
			is: ErrInvalid, id: "e1", kind: KindInput, field: "input.parts[0]", msg: "no mime"},
		{name: "part data not base64", in: input(`"message_id":"m","parts":[{"type":"audio","mime":"audio/wav","data":"!!"}]`),
			id: "e1", kind: KindInput, msg: "illegal base64"},
		{name: "run_start.inputs", in: obj("run-start", `,"run_start":{"response_id":"x"}`), is: ErrInvalid, id: "e1", kind: KindRunStart, field: "run_start.inputs"},
		{name: "run_start.response_id", in: obj("run-start", `,"run_start":{"inputs":["m"]}`), is: ErrInvalid, id: "e1", kind: KindRunStart, field: "run_start.response_id"},
		{name: "step.response_id", in: step(`"index":0,"usage":{}`), is: ErrInvalid, id: "e1", kind: KindStep, field: "step.response_id"},
		{name: "step.index negative", in: step(`"response_id":"x","index":-1`), is: ErrInvalid, id: "e1", kind: KindStep, field: "step.index"},
		{name: "tool call id", in: step(`"response_id":"x","tool_calls":[{"name":"n","arguments":"{}"}]`),
			is: ErrInvalid, id: "e1", kind: KindStep, field: "step.tool_calls[0].id"},
		{name: "tool call name", in: step(`"response_id":"x","tool_calls":[{"id":"a","name":"n"},{"id":"b"}]`),
			is: ErrInvalid, id: "e1", kind: KindStep, field: "step.tool_calls[1].name"},
		{name: "tool_start.call_id", in: obj("tool-start", `,"tool_start":{"name":"n"}`), is: ErrInvalid, id: "e1", kind: KindToolStart, field: "tool_start.call_id"},
		{name: "tool_start.name", in: obj("tool-start", `,"tool_start":{"call_id":"c"}`), is: ErrInvalid, id: "e1", kind: KindToolStart, field: "tool_start.name"},
		{name: "tool_result.call_id", in: obj("tool-result", `,"tool_result":{"name":"n","output":"o"}`), is: ErrInvalid, id: "e1", kind: KindToolResult, field: "tool_result.call_id"},
		{name: "approval_request.approval_id", in: obj("approval-request", `,"approval_request":{"call_id":"c","name":"n"}`),
			is: ErrInvalid, id: "e1", kind: KindApprovalRequest, field: "approval_request.approval_id"},
		{name: "approval_request.call_id", in: obj("approval-request", `,"approval_request":{"approval_id":"a","name":"n"}`),
			is: ErrInvalid, id: "e1", kind: KindApprovalRequest, field: "approval_request.call_id"},
		{name: "approval_decision.approval_id", in: obj("approval-decision", `,"approval_decision":{"decision":"approve"}`),
			is: ErrInvalid, id: "e1", kind: KindApprovalDecision, field: "approval_decision.approval_id"},
		{name: "approval_decision.decision", in: obj("approval-decision", `,"approval_decision":{"approval_id":"a","decision":"maybe"}`),
			is: ErrInvalid, id: "e1", kind: KindApprovalDecision, field: "approval_decision.decision", msg: `"maybe"`},
		{name: "compaction.summary", in: obj("compaction", `,"compaction":{"through":"e0","usage":{}}`), is: ErrInvalid, id: "e1", kind: KindCompaction, field: "compaction.summary"},
		{name: "compaction.through", in: obj("compaction", `,"compaction":{"summary":"s","usage":{}}`), is: ErrInvalid, id: "e1", kind: KindCompaction, field: "compaction.through"},
		{name: "poke.text", in: obj("poke", `,"poke":{}`), is: ErrInvalid, id: "e1", kind: KindPoke, field: "poke.text"},
		{name: "run_end.status missing", in: obj("run-end", `,"run_end":{}`), is: ErrInvalid, id: "e1", kind: KindRunEnd, field: "run_end.status"},
		{name: "run_end.status unknown", in: obj("run-end", `,"run_end":{"status":"exploded"}`), is: ErrInvalid, id: "e1", kind: KindRunEnd, field: "run_end.status", msg: `"exploded"`},
		{name: "run_end.timeout unknown", in: obj("run-end", `,"run_end":{"status":"timed_out","timeout":"lunch"}`), is: ErrInvalid, id: "e1", kind: KindRunEnd, field: "run_end.timeout", msg: `"lunch"`},
		{name: "run_end.timeout on a failed run", in: obj("run-end", `,"run_end":{"status":"failed","timeout":"step"}`), is: ErrInvalid, id: "e1", kind: KindRunEnd, field: "run_end.timeout", msg: "not timed_out"},
		{name: "resume_attempt.attempt", in: obj("resume-attempt", `,"resume_attempt":{"attempt":0}`), is: ErrInvalid, id: "e1", kind: KindResumeAttempt, field: "resume_attempt.attempt"},
		{name: "body null", in: obj("poke", `,"poke":null`), is: ErrInvalid, id: "e1", kind: KindPoke, field: "poke"},

		// Unknown fields, wrong types, trailing data.
		{name: "unknown field", in: obj("poke", `,"poke":{"text":"x"},"colour":"red"`), id: "e1", kind: KindPoke, field: "colour", msg: `"colour"`},
		// encoding/json does not report the path of an unknown field; the
		// field's name alone is accepted, the full path preferred.
		{name: "unknown body field", in: step(`"response_id":"x","temperature":0.5`), id: "e1", kind: KindStep, field: "step.temperature", msg: `"temperature"`},
		{name: "wrong type nested", in: step(`"response_id":"x","usage":{"prompt_tokens":"12"}`),
			id: "e1", kind: KindStep, field: "step.usage.prompt_tokens", msg: "step.usage.prompt_tokens"},
		{name: "wrong type body", in: obj("poke", `,"poke":{"text":42}`), id: "e1", kind: KindPoke, field: "poke.text", msg: "poke.text"},
		{name: "wrong type envelope", in: `{"v":1,"id":"e1","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":7,"poke":{"text":"x"}}`,
			id: "e1", kind: KindPoke, field: "run_id", msg: "run_id"},
		{name: "wrong type id", in: `{"v":1,"id":7,"kind":"poke"}`, kind: KindPoke, field: "id"},
		{name: "trailing object", in: obj("poke", `,"poke":{"text":"x"}`) + ` {"v":1}`, is: ErrInvalid, id: "e1", kind: KindPoke, msg: "trailing"},
		{name: "trailing brace", in: obj("poke", `,"poke":{"text":"x"}`) + `}`, is: ErrInvalid, id: "e1", kind: KindPoke, msg: "trailing"},
		{name: "trailing garbage", in: obj("poke", `,"poke":{"text":"x"}`) + `x`, is: ErrInvalid, id: "e1", kind: KindPoke, msg: "trailing"},
		{name: "two lines", in: obj("poke", `,"poke":{"text":"x"}`) + "\n" + obj("poke", `,"poke":{"text":"y"}`), is: ErrInvalid, id: "e1", kind: KindPoke, msg: "trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", e)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			switch tt.is {
			case nil:
				if errors.Is(err, ErrVersion) || errors.Is(err, ErrInvalid) {
					t.Errorf("error %v unexpectedly is ErrVersion or ErrInvalid", err)
				}
			default:
				if !errors.Is(err, tt.is) {
					t.Errorf("error %v: errors.Is(%v) = false", err, tt.is)
				}
			}
			fieldOK := de.Field == tt.field
			if tt.name == "unknown body field" {
				fieldOK = de.Field != "" && strings.HasSuffix(tt.field, de.Field)
			}
			if de.EventID != tt.id || de.Kind != tt.kind || !fieldOK {
				t.Errorf("DecodeError{EventID: %q, Kind: %q, Field: %q}, want {%q, %q, %q}",
					de.EventID, de.Kind, de.Field, tt.id, tt.kind, tt.field)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "ledger: event") {
				t.Errorf("Error() = %q, want the package prefix", msg)
			}
			for _, want := range []string{tt.id, string(tt.kind), de.Field, tt.msg} {
				if !strings.Contains(msg, want) {
					t.Errorf("Error() = %q, want it to contain %q", msg, want)
				}
			}
			if strings.Contains(msg, "ledger: ledger:") {
				t.Errorf("Error() = %q repeats the prefix", msg)
			}
		})
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	tests := []struct {
		err  DecodeError
		want string
	}{
		{DecodeError{EventID: "e1", Kind: KindStep, Field: "step.index", Err: ErrInvalid},
			`ledger: event "e1" (step): field "step.index": invalid event`},
		{DecodeError{Err: errors.New("boom")}, `ledger: event: boom`},
		{DecodeError{Kind: KindPoke, Err: ErrVersion}, `ledger: event (poke): unsupported schema version`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			if errors.Unwrap(&tt.err) != tt.err.Err {
				t.Errorf("Unwrap does not return Err")
			}
		})
	}
}

// Validate and Encode refuse, as *DecodeError, what Decode cannot read
// from JSON at all (invalid raw JSON) as well as the schema breaks above.
func TestValidateAndEncodeRefuse(t *testing.T) {
	full := fullEvents()
	tests := []struct {
		name  string
		mod   func(e *Event)
		base  int
		field string
	}{
		{"step raw not JSON", func(e *Event) { e.Step.Raw = json.RawMessage(`{"a":`) }, 2, "step.raw"},
		{"approval input not JSON", func(e *Event) { e.ApprovalRequest.Input = json.RawMessage(`nope`) }, 5, "approval_request.input"},
		{"no id", func(e *Event) { e.ID = "" }, 0, "id"},
		{"no time", func(e *Event) { e.Time = time.Time{} }, 8, "time"},
		{"step and poke", func(e *Event) { e.Poke = &Poke{Text: "x"} }, 2, "poke"},
		{"no body", func(e *Event) { e.RunEnd = nil }, 9, "run_end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := full[tt.base]
			// Copy the body so that other tests see the original.
			b, _ := Encode(e)
			e, _ = Decode(b)
			tt.mod(&e)
			for name, err := range map[string]error{"Validate": Validate(e), "Encode": func() error { _, err := Encode(e); return err }()} {
				var de *DecodeError
				if !errors.As(err, &de) || !errors.Is(err, ErrInvalid) {
					t.Errorf("%s: error %v, want a *DecodeError wrapping ErrInvalid", name, err)
					continue
				}
				if de.Field != tt.field || de.EventID != e.ID {
					t.Errorf("%s: Field %q EventID %q, want %q %q", name, de.Field, de.EventID, tt.field, e.ID)
				}
			}
		})
	}
}

func TestEncodeNoHTMLEscape(t *testing.T) {
	e := Event{ID: "e<1>", Kind: KindPoke, Time: t0, RunID: "r&1", Poke: &Poke{Text: "<script>alert('x & y')</script>"}}
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":"e<1>"`, `"run_id":"r&1"`, `<script>alert('x & y')</script>`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("encoded %s lacks %s", b, want)
		}
	}
}

func TestNewID(t *testing.T) {
	const n = 100_000
	seen := make(map[string]bool, n)
	for range n {
		id := NewID("ev")
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		if !strings.HasPrefix(id, "ev_") || len(id) != len("ev_")+26 {
			t.Fatalf("id %q: want prefix ev_ and 26 characters after it", id)
		}
		for _, c := range id[3:] {
			if !strings.ContainsRune(crockford, c) {
				t.Fatalf("id %q holds %q, not Crockford base32", id, c)
			}
		}
	}
}

func TestNewIDPrefixes(t *testing.T) {
	for _, prefix := range []string{"ev", "msg", "resp", "run", "call"} {
		t.Run(prefix, func(t *testing.T) {
			id := newID(prefix, t0)
			if !strings.HasPrefix(id, prefix+"_") || len(id) != len(prefix)+1+26 {
				t.Errorf("newID(%q) = %q", prefix, id)
			}
		})
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		t0,
		t0.Add(time.Millisecond),
		t0.Add(2 * time.Millisecond),
		t0.Add(time.Second),
		t0.Add(time.Hour),
		time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	var ids []string
	for _, tm := range times {
		// Several ids per time: the random part must never outweigh the
		// time.
		for range 50 {
			ids = append(ids, newID("ev", tm))
		}
	}
	if !sort.StringsAreSorted(ids) {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] && times[i/50] != times[(i-1)/50] {
				t.Errorf("id minted at %v sorts before one minted at %v: %s < %s", times[i/50], times[(i-1)/50], ids[i], ids[i-1])
			}
		}
	}
	// The time part is the same for one millisecond, whatever the random
	// part: the first 10 digits hold 50 bits, of which the top 48 are time.
	a, b := newID("", t0), newID("", t0.Add(999*time.Microsecond-time.Duration(t0.Nanosecond()%1e6)))
	if a[:9] != b[:9] {
		t.Errorf("ids of the same millisecond differ in the time digits: %s %s", a, b)
	}
}
