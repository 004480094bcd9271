package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

func TestStreamText(t *testing.T) {
	fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
	c := newClient(t, fs, Config{})
	var rec recorder
	res, err := c.Stream(context.Background(), userRequest("hi"), rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if res.Text != "Hello, world!" {
		t.Errorf("Text = %q, want %q", res.Text, "Hello, world!")
	}
	var kinds []model.DeltaKind
	var texts []string
	for _, d := range rec.deltas {
		kinds = append(kinds, d.Kind)
		texts = append(texts, d.Text)
	}
	if want := []string{"Hello", ", world", "!"}; !reflect.DeepEqual(texts, want) {
		t.Errorf("delta texts = %q, want %q (kinds %v)", texts, want, kinds)
	}
	if got := rec.text(model.DeltaText); got != res.Text {
		t.Errorf("deltas join to %q, model.Result.Text is %q", got, res.Text)
	}
	if res.FinishReason != "stop" || res.Model != "openai/gpt-4o-mini" || res.GenerationID != "gen-1767225600-Qx7TfakeStreamText01" {
		t.Errorf("FinishReason, Model, GenerationID = %q, %q, %q", res.FinishReason, res.Model, res.GenerationID)
	}
	f := false
	want := ledger.Usage{PromptTokens: 24, CompletionTokens: 9, TotalTokens: 33, Cost: 0.000009, IsBYOK: &f, UpstreamCost: 0.000009}
	if !reflect.DeepEqual(res.Usage, want) {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
	if got := res.Usage.Billed(); got != 0.000009 {
		t.Errorf("Billed = %v, want 0.000009 (credits: upstream is part of cost)", got)
	}
	if res.Raw != nil || res.Reasoning != "" || res.ToolCalls != nil {
		t.Errorf("unexpected Raw %s, Reasoning %q, ToolCalls %v", res.Raw, res.Reasoning, res.ToolCalls)
	}
	if fs.count() != 1 {
		t.Errorf("requests = %d, want 1", fs.count())
	}
}

func TestStreamToolCalls(t *testing.T) {
	fs := serve(t, reply{body: fixtures.Bytes("stream_tool_calls.sse")})
	c := newClient(t, fs, Config{})
	var rec recorder
	res, err := c.Stream(context.Background(), userRequest("read"), rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	wantCalls := []ledger.ToolCall{
		{ID: "toolu_01FakeReadFileAAAA", Name: "read_file", Arguments: `{"path": "README.md"}`},
		{ID: "toolu_01FakeReadFileBBBB", Name: "read_file", Arguments: `{"path": "go.mod"}`},
	}
	if !reflect.DeepEqual(res.ToolCalls, wantCalls) {
		t.Errorf("ToolCalls = %+v\nwant %+v", res.ToolCalls, wantCalls)
	}
	if res.Text != "I'll read both files." || rec.text(model.DeltaText) != res.Text {
		t.Errorf("Text = %q, deltas %q", res.Text, rec.text(model.DeltaText))
	}
	if res.FinishReason != "tool_calls" || res.Model != "anthropic/claude-sonnet-4.6" {
		t.Errorf("FinishReason, Model = %q, %q", res.FinishReason, res.Model)
	}
	f := false
	wantUsage := ledger.Usage{PromptTokens: 12000, CompletionTokens: 800, TotalTokens: 12800, CachedTokens: 8000,
		ReasoningTokens: 200, Cost: 0.0264, IsBYOK: &f, UpstreamCost: 0.0264}
	if !reflect.DeepEqual(res.Usage, wantUsage) {
		t.Errorf("Usage = %+v, want %+v", res.Usage, wantUsage)
	}
	// Deltas: the text first, then each call's name as soon as known and
	// its argument fragments, in order.
	var calls []model.Delta
	for _, d := range rec.deltas {
		if d.Kind == model.DeltaToolCall {
			calls = append(calls, d)
		}
	}
	if len(calls) < 2 || rec.deltas[0].Kind != model.DeltaText {
		t.Fatalf("deltas = %+v", rec.deltas)
	}
	first := calls[0]
	if first.ToolIndex != 0 || first.ToolCallID != wantCalls[0].ID || first.ToolName != "read_file" {
		t.Errorf("first tool delta = %+v", first)
	}
	last := -1
	for _, d := range calls {
		if d.ToolIndex < last {
			t.Errorf("tool deltas out of order: %+v", calls)
		}
		last = d.ToolIndex
		if d.ToolCallID != wantCalls[d.ToolIndex].ID || d.ToolName != "read_file" {
			t.Errorf("tool delta %+v lacks its call's id or name", d)
		}
	}
	for i, wc := range wantCalls {
		if got := rec.args(i); got != wc.Arguments {
			t.Errorf("call %d: argument fragments join to %q, want %q", i, got, wc.Arguments)
		}
	}
}

func TestStreamMidStreamError(t *testing.T) {
	tests := []struct {
		fixture    string
		text       string
		status     int
		code       string
		message    string
		metadataIn string
	}{
		{"stream_midstream_error.sse", "The answer is", 0, "server_error", "Provider disconnected", ""},
		{"stream_midstream_error_429.sse", "Partial", 429, "429", "google/gemini-2.5-flash is temporarily rate-limited upstream.", "rate_limit_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			fs := serve(t, reply{body: fixtures.Bytes(tt.fixture)})
			c := newClient(t, fs, Config{})
			var rec recorder
			res, err := c.Stream(context.Background(), userRequest("q"), rec.on)
			var pe *model.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want *model.Error", err, err)
			}
			if !pe.MidStream || pe.StatusCode != tt.status || pe.Code != tt.code || pe.Message != tt.message {
				t.Errorf("Error = %+v", pe)
			}
			if tt.metadataIn != "" && !strings.Contains(string(pe.Metadata), tt.metadataIn) {
				t.Errorf("Metadata = %s, want it to contain %q", pe.Metadata, tt.metadataIn)
			}
			var se *ssestream.StreamError
			if !errors.As(err, &se) {
				t.Errorf("err does not unwrap to *ssestream.StreamError")
			}
			if !json.Valid(pe.Body) || !strings.Contains(string(pe.Body), `"error"`) {
				t.Errorf("Body = %s, want the error chunk", pe.Body)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("model.Error() = %q lacks the message", err.Error())
			}
			if res.Text != tt.text || rec.text(model.DeltaText) != tt.text {
				t.Errorf("partial Text = %q (deltas %q), want %q", res.Text, rec.text(model.DeltaText), tt.text)
			}
			if res.GenerationID == "" || res.Model == "" {
				t.Errorf("partial result lacks GenerationID/Model: %+v", res)
			}
		})
	}
}

func TestStreamHTTPErrors(t *testing.T) {
	tests := []struct {
		fixture    string
		status     int
		header     http.Header
		code       string
		typ        string
		message    string // prefix
		raw        string // substring of RawMetadata
		metadataIn string
		retryAfter time.Duration
	}{
		{fixture: "error_401.json", status: 401, code: "401", message: "No auth credentials found"},
		{fixture: "error_402.json", status: 402, code: "402", message: "Insufficient credits"},
		{fixture: "error_402_max_tokens.json", status: 402, code: "402", message: "This request requires more credits, or fewer max_tokens"},
		{fixture: "error_403_moderation.json", status: 403, code: "403", message: "openai/gpt-4o requires moderation", metadataIn: `"reasons":["harassment"]`},
		{fixture: "error_429.json", status: 429, header: fixtureHeaders(t, "error_429.headers"), code: "429", message: "Provider returned error",
			raw: "temporarily rate-limited upstream", retryAfter: 2 * time.Second},
		{fixture: "error_429_free_daily.json", status: 429, code: "429", message: "Rate limit exceeded: free-models-per-day"},
		{fixture: "error_502_provider.json", status: 502, code: "502", message: "Provider returned error", raw: "upstream connect error"},
		{fixture: "error_503_no_provider.json", status: 503, code: "503", message: "No allowed providers"},
		{fixture: "error_context_overflow_openrouter.json", status: 400, code: "400", message: "This endpoint's maximum context length is 131072 tokens", metadataIn: `"provider_name":null`},
		{fixture: "error_context_overflow_openrouter_plugin.json", status: 400, code: "400", message: "This endpoint's maximum context length is 16384 tokens"},
		{fixture: "error_context_overflow_openai.json", status: 400, code: "context_length_exceeded", typ: "invalid_request_error", message: "This model's maximum context length is 128000 tokens"},
		{fixture: "error_context_overflow_openai_window.json", status: 400, code: "context_length_exceeded", typ: "invalid_request_error", message: "Your input exceeds the context window"},
		{fixture: "error_context_overflow_anthropic.json", status: 400, typ: "invalid_request_error", message: "prompt is too long: 213462 tokens > 200000 maximum"},
		{fixture: "error_context_overflow_gemini.json", status: 400, code: "400", message: "The input token count (1196265) exceeds the maximum"},
		{fixture: "error_context_overflow_anthropic_via_openrouter.json", status: 400, code: "400", message: "Provider returned error", raw: "prompt is too long: 213462 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			body := fixtures.Bytes(tt.fixture)
			fs := serve(t, reply{status: tt.status, header: tt.header, body: body})
			c := newClient(t, fs, Config{})
			called := false
			res, err := c.Stream(context.Background(), userRequest("q"), func(model.Delta) { called = true })
			var pe *model.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want *model.Error", err, err)
			}
			if pe.StatusCode != tt.status || pe.MidStream {
				t.Errorf("StatusCode, MidStream = %d, %v", pe.StatusCode, pe.MidStream)
			}
			if pe.Code != tt.code || pe.Type != tt.typ {
				t.Errorf("Code, Type = %q, %q; want %q, %q", pe.Code, pe.Type, tt.code, tt.typ)
			}
			if !strings.HasPrefix(pe.Message, tt.message) {
				t.Errorf("Message = %q, want prefix %q", pe.Message, tt.message)
			}
			if got := pe.RawMetadata(); !strings.Contains(got, tt.raw) || (tt.raw == "" && got != "") {
				t.Errorf("RawMetadata = %q, want %q in it", got, tt.raw)
			}
			if tt.metadataIn != "" && !strings.Contains(string(pe.Metadata), tt.metadataIn) {
				t.Errorf("Metadata = %s, want %s in it", pe.Metadata, tt.metadataIn)
			}
			if pe.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", pe.RetryAfter, tt.retryAfter)
			}
			if string(pe.Body) != string(body) {
				t.Errorf("Body = %s, want the fixture verbatim", pe.Body)
			}
			if pe.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Header = %v", pe.Header)
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status {
				t.Errorf("err does not unwrap to the *openai.Error")
			}
			if !strings.Contains(err.Error(), pe.Message) || !strings.Contains(err.Error(), "HTTP ") {
				t.Errorf("model.Error() = %q", err.Error())
			}
			if called || res.Text != "" || res.ToolCalls != nil {
				t.Errorf("a pre-stream error produced output: %+v", res)
			}
			if n := fs.count(); n != 1 {
				t.Errorf("requests = %d, want exactly 1 (openai-go retries must be off)", n)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		header   http.Header
		body     string
		min, max time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"7"}}, "", 7 * time.Second, 7 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, "", 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"HTTP date", http.Header{"Retry-After": {now.Add(30 * time.Second).UTC().Format(http.TimeFormat)}}, "", 25 * time.Second, 31 * time.Second},
		{"HTTP date in the past", http.Header{"Retry-After": {now.Add(-time.Hour).UTC().Format(http.TimeFormat)}}, "", 0, 0},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, "", 250 * time.Millisecond, 250 * time.Millisecond},
		{"garbage", http.Header{"Retry-After": {"soon"}}, "", 0, 0},
		{"negative", http.Header{"Retry-After": {"-3"}}, "", 0, 0},
		{"none", nil, "", 0, 0},
		{"metadata seconds", nil, `{"error":{"message":"m","code":429,"metadata":{"retry_after_seconds":17}}}`, 17 * time.Second, 17 * time.Second},
		{"metadata headers", nil, `{"error":{"message":"m","code":429,"metadata":{"headers":{"Retry-After":"12"}}}}`, 12 * time.Second, 12 * time.Second},
		{"header beats metadata", http.Header{"Retry-After": {"3"}}, `{"error":{"message":"m","code":429,"metadata":{"retry_after_seconds":17}}}`, 3 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if body == "" {
				body = string(fixtures.Bytes("error_429_free_daily.json"))
			}
			fs := serve(t, reply{status: 429, header: tt.header, body: []byte(body)})
			_, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
			var pe *model.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *model.Error", err)
			}
			if pe.RetryAfter < tt.min || pe.RetryAfter > tt.max {
				t.Errorf("RetryAfter = %v, want in [%v, %v]", pe.RetryAfter, tt.min, tt.max)
			}
			if fs.count() != 1 {
				t.Errorf("requests = %d, want 1", fs.count())
			}
		})
	}
}

func TestStreamRequestsOnce(t *testing.T) {
	tests := []struct {
		name string
		r    reply
	}{
		{"500 JSON", reply{status: 500, body: []byte(`{"error":{"message":"boom","code":500}}`)}},
		{"500 with x-should-retry", reply{status: 500, header: http.Header{"X-Should-Retry": {"true"}}, body: []byte(`{"error":{"message":"boom"}}`)}},
		{"429 Retry-After 0", reply{status: 429, header: http.Header{"Retry-After": {"0"}}, body: fixtures.Bytes("error_429_free_daily.json")}},
		{"502 HTML", reply{status: 502, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<html>Bad gateway</html>\n")}},
		{"408 empty", reply{status: 408}},
		{"404 without an error member", reply{status: 404, body: []byte(`{"detail":"Not Found"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := serve(t, tt.r)
			_, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
			var pe *model.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want *model.Error", err, err)
			}
			if pe.StatusCode != tt.r.status {
				t.Errorf("StatusCode = %d, want %d", pe.StatusCode, tt.r.status)
			}
			if pe.Message == "" {
				t.Errorf("empty Message: %+v", pe)
			}
			if fs.count() != 1 {
				t.Errorf("requests = %d, want exactly 1", fs.count())
			}
		})
	}
}

func TestStreamHTMLErrorBody(t *testing.T) {
	fs := serve(t, reply{status: 502, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<html>Bad gateway</html>\n")})
	_, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	var pe *model.Error
	if !errors.As(err, &pe) || pe.StatusCode != 502 || pe.Message != "<html>Bad gateway</html>" || string(pe.Body) != "<html>Bad gateway</html>\n" {
		t.Fatalf("err = %#v", err)
	}
}

func TestStreamIncomplete(t *testing.T) {
	text := events(fixtures.Bytes("stream_text.sse"))
	tools := events(fixtures.Bytes("stream_tool_calls.sse"))
	tests := []struct {
		name      string
		body      []byte
		text      string
		toolCalls []ledger.ToolCall
	}{
		// Everything up to the finish chunk: no finish reason, no [DONE].
		{"text cut", sse(text[:len(text)-3]...), "Hello, world!", nil},
		// [DONE] without a finish reason is no better.
		{"done without finish", sse(append(text[:len(text)-3:len(text)-3], "data: [DONE]")...), "Hello, world!", nil},
		// Cut inside the second call's arguments: only the first is complete.
		{"tool call cut", sse(tools[:7]...), "I'll read both files.", []ledger.ToolCall{
			{ID: "toolu_01FakeReadFileAAAA", Name: "read_file", Arguments: `{"path": "README.md"}`}}},
		{"empty body", nil, "", nil},
		{"comments only", []byte(": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n"), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := serve(t, reply{body: tt.body})
			var rec recorder
			res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), rec.on)
			if !errors.Is(err, model.ErrIncompleteStream) {
				t.Fatalf("err = %v, want model.ErrIncompleteStream", err)
			}
			if res.Text != tt.text || rec.text(model.DeltaText) != tt.text {
				t.Errorf("partial Text = %q (deltas %q), want %q", res.Text, rec.text(model.DeltaText), tt.text)
			}
			if !reflect.DeepEqual(res.ToolCalls, tt.toolCalls) {
				t.Errorf("partial ToolCalls = %+v, want %+v", res.ToolCalls, tt.toolCalls)
			}
		})
	}
}

func TestStreamFinishReasonError(t *testing.T) {
	body := sse(
		data(`{"id":"gen-1","model":"m/x","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":"so far"},"finish_reason":null}]}`),
		data(`{"id":"gen-1","model":"m/x","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","native_finish_reason":"error"}]}`),
		"data: [DONE]",
	)
	fs := serve(t, reply{body: body})
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	var pe *model.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *model.Error", err)
	}
	if !pe.MidStream || pe.StatusCode != 0 || !strings.Contains(pe.Message, `finish_reason "error"`) {
		t.Errorf("Error = %+v", pe)
	}
	if res.Text != "so far" || res.FinishReason != "error" {
		t.Errorf("partial result = %+v", res)
	}
}

func TestStreamJSONInsteadOfStream(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int // of the *model.Error; -1: want model.ErrMalformedStream
	}{
		{"error object", `{"error":{"message":"Upstream overloaded","code":503}}`, 503},
		{"error with string code", `{"error":{"message":"nope","code":"server_error"}}`, 0},
		{"non-stream completion", string(fixtures.Bytes("nonstream_inband_error.json")), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := serve(t, reply{header: http.Header{"Content-Type": {"application/json"}}, body: []byte(tt.body)})
			_, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
			if tt.status < 0 {
				if !errors.Is(err, model.ErrMalformedStream) {
					t.Fatalf("err = %v, want model.ErrMalformedStream", err)
				}
				return
			}
			var pe *model.Error
			if !errors.As(err, &pe) || pe.StatusCode != tt.status || pe.MidStream || pe.Message == "" {
				t.Fatalf("err = %#v", err)
			}
		})
	}
}

func TestStreamMalformedChunk(t *testing.T) {
	text := events(fixtures.Bytes("stream_text.sse"))
	body := sse(append(text[:4:4], "data: {not json")...)
	fs := serve(t, reply{body: body})
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	if !errors.Is(err, model.ErrMalformedStream) {
		t.Fatalf("err = %v, want model.ErrMalformedStream", err)
	}
	if res.Text != "Hello" {
		t.Errorf("partial Text = %q, want %q", res.Text, "Hello")
	}
}

func TestStreamErrorNull(t *testing.T) {
	// openai-go ends a stream at any "error" key, even null (FACTS §5.1).
	body := sse(
		data(`{"id":"g","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`),
		data(`{"id":"g","model":"m","error":null,"choices":[{"index":0,"delta":{"content":"b"}}]}`),
	)
	fs := serve(t, reply{body: body})
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	var pe *model.Error
	if !errors.As(err, &pe) || !pe.MidStream || !strings.Contains(pe.Message, "empty") {
		t.Fatalf("err = %#v", err)
	}
	if res.Text != "a" {
		t.Errorf("partial Text = %q", res.Text)
	}
}

func TestStreamReasoning(t *testing.T) {
	body := sse(
		": OPENROUTER PROCESSING",
		data(`{"id":"gen-r","model":"anthropic/claude-sonnet-4.6","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Let me ","reasoning_details":[{"type":"reasoning.text","text":"Let me ","index":0,"format":"anthropic-claude-v1"}]},"finish_reason":null}]}`),
		data(`{"id":"gen-r","model":"anthropic/claude-sonnet-4.6","choices":[{"index":0,"delta":{"content":"","reasoning":"think.","reasoning_details":[{"type":"reasoning.text","text":"think.","index":0,"signature":"sig=="}]},"finish_reason":null}]}`),
		data(`{"id":"gen-r","model":"anthropic/claude-sonnet-4.6","choices":[{"index":0,"delta":{"content":"Done.","reasoning":null},"finish_reason":null}]}`),
		data(`{"id":"gen-r","model":"anthropic/claude-sonnet-4.6","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`),
		data(`{"id":"gen-r","model":"anthropic/claude-sonnet-4.6","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30,"completion_tokens_details":{"reasoning_tokens":12}}}`),
		"data: [DONE]",
	)
	fs := serve(t, reply{body: body})
	var rec recorder
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), rec.on)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []model.DeltaKind
	for _, d := range rec.deltas {
		kinds = append(kinds, d.Kind)
	}
	if want := []model.DeltaKind{model.DeltaReasoning, model.DeltaReasoning, model.DeltaText}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("delta kinds = %v, want %v", kinds, want)
	}
	if res.Reasoning != "Let me think." || rec.text(model.DeltaReasoning) != res.Reasoning || res.Text != "Done." {
		t.Errorf("Reasoning, Text = %q, %q", res.Reasoning, res.Text)
	}
	want := `{"reasoning_details":[{"type":"reasoning.text","text":"Let me think.","index":0,"format":"anthropic-claude-v1","signature":"sig=="}]}`
	if !jsonEqual(t, res.Raw, want) {
		t.Errorf("Raw = %s\nwant %s", res.Raw, want)
	}
	if res.Usage.ReasoningTokens != 12 || res.Usage.IsBYOK != nil || res.Usage.Cost != 0 {
		t.Errorf("Usage = %+v", res.Usage)
	}
}

func TestStreamReasoningContent(t *testing.T) {
	// DeepSeek- and vLLM-style servers name the field reasoning_content.
	body := sse(
		data(`{"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`),
		data(`{"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`),
	)
	fs := serve(t, reply{body: body})
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	if err != nil || res.Reasoning != "hmm" || res.Text != "ok" || res.Raw != nil {
		t.Fatalf("res, err = %+v, %v", res, err)
	}
}

func TestStreamLooseServers(t *testing.T) {
	// Quirks of OpenAI-compatible servers: a new id on every chunk (which
	// openai-go's accumulator would refuse), every call at index 0 told
	// apart by its id, a name repeated on every fragment, calls without
	// ids, and no [DONE].
	body := sse(
		data(`{"id":"c1","model":"local","choices":[{"index":0,"delta":{"role":"assistant","content":"Two calls."}}]}`),
		data(`{"id":"c2","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"k\":"}}]}}]}`),
		data(`{"id":"c3","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"get","arguments":"1}"}}]}}]}`),
		data(`{"id":"c4","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"put","arguments":"{}"}}]}}]}`),
		data(`{"id":"c5","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"call_b","function":{"arguments":""}}]}}]}`),
		data(`{"id":"c6","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"type":"function","function":{"name":"noid","arguments":"[]"}}]}}]}`),
		data(`{"id":"c7","model":"local","choices":[{"index":1,"delta":{"content":"other choice"}}]}`),
		data(`{"id":"c8","model":"local","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`),
	)
	fs := serve(t, reply{body: body})
	var rec recorder
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), rec.on)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.ToolCall{
		{ID: "call_a", Name: "get", Arguments: `{"k":1}`},
		{ID: "call_b", Name: "put", Arguments: `{}`},
		{ID: "call_2_c1", Name: "noid", Arguments: `[]`},
	}
	if !reflect.DeepEqual(res.ToolCalls, want) {
		t.Errorf("ToolCalls = %+v\nwant %+v", res.ToolCalls, want)
	}
	if res.Text != "Two calls." || res.GenerationID != "c1" || res.FinishReason != "tool_calls" {
		t.Errorf("res = %+v", res)
	}
	// No usage came: its cost is unknown, never free.
	if !res.Usage.CostUnknown {
		t.Errorf("a stream without a usage: Usage = %+v, want CostUnknown", res.Usage)
	}
	for i, w := range want {
		if got := rec.args(i); got != w.Arguments {
			t.Errorf("call %d fragments = %q, want %q", i, got, w.Arguments)
		}
	}
}

func TestStreamGenerationIDHeader(t *testing.T) {
	body := sse(data(`{"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`))
	fs := serve(t, reply{header: http.Header{"X-Generation-Id": {"gen-from-header"}}, body: body})
	res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
	if err != nil || res.GenerationID != "gen-from-header" {
		t.Fatalf("res, err = %+v, %v", res, err)
	}
}

func TestUsageCost(t *testing.T) {
	tests := []struct {
		fixture  string
		byok     *bool
		cost     float64
		upstream float64
		billed   float64
	}{
		{"usage_byok.json", ptr(true), 0.00132, 0.0264, 0.02772},
		{"usage_byok_fee_waived.json", ptr(true), 0, 0.0002011, 0.0002011},
		{"usage_credits.json", ptr(false), 0.0264, 0.0264, 0.0264},
		{"usage_minimal_legacy.json", nil, 0.95, 19, 0.95}, // no is_byok: credits, never summed
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			var usage map[string]any
			if err := json.Unmarshal(fixtures.Bytes(tt.fixture), &usage); err != nil {
				t.Fatal(err)
			}
			chunk := map[string]any{"id": "gen-u", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []any{}, "usage": usage}
			last, _ := json.Marshal(chunk)
			body := sse(
				data(`{"id":"gen-u","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"usage":null}`),
				data(string(last)),
				"data: [DONE]",
			)
			fs := serve(t, reply{body: body})
			res, err := newClient(t, fs, Config{}).Stream(context.Background(), userRequest("q"), nil)
			if err != nil {
				t.Fatal(err)
			}
			u := res.Usage
			if !reflect.DeepEqual(u.IsBYOK, tt.byok) || u.Cost != tt.cost || u.UpstreamCost != tt.upstream {
				t.Errorf("Usage = %+v (IsBYOK %v)", u, deref(u.IsBYOK))
			}
			if got := u.Billed(); math.Abs(got-tt.billed) > 1e-12 {
				t.Errorf("Billed = %v, want %v", got, tt.billed)
			}
			if u.PromptTokens != int64(usage["prompt_tokens"].(float64)) || u.TotalTokens != int64(usage["total_tokens"].(float64)) {
				t.Errorf("tokens = %+v", u)
			}
		})
	}
}

func TestParseUsageLenient(t *testing.T) {
	tests := []struct {
		raw  string
		want ledger.Usage
	}{
		{`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"is_byok":"true","cost":"0.5"}`,
			ledger.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3, CostUnknown: true}},
		{`{"prompt_tokens":1.0,"is_byok":null,"cost_details":null,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":5}}`,
			ledger.Usage{PromptTokens: 1, CachedTokens: 4, CacheWriteTokens: 5, CostUnknown: true}},
		{`{"prompt_tokens":"x","completion_tokens_details":"y","is_byok":false,"cost":0}`,
			ledger.Usage{IsBYOK: ptr(false)}},
		{`[]`, ledger.Usage{CostUnknown: true}},
		// An endpoint that does not price its calls: the tokens, and no cost.
		{`{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}`, ledger.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, CostUnknown: true}},
	}
	for _, tt := range tests {
		if got := parseUsage(tt.raw); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseUsage(%s) = %+v, want %+v", tt.raw, got, tt.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestStreamReusesConnection: a stream whose body ends a little after
// "[DONE]", in a write of its own, leaves its connection to the next pass;
// one that stays open after "[DONE]" still returns its pass, its
// connection cut.
func TestStreamReusesConnection(t *testing.T) {
	hold := make(chan struct{})
	var holdOpen atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range events(fixtures.Bytes("stream_text.sse")) {
			_, _ = io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
		if holdOpen.Load() {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		time.Sleep(2 * time.Millisecond) // the end of the body comes later than [DONE]
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer close(hold)
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { drainWait = d }(drainWait)
	drainWait = time.Minute // however slow the machine
	for range 3 {
		if _, err := c.Stream(context.Background(), userRequest("hi"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("3 passes used %d connections, want 1", n)
	}
	holdOpen.Store(true)
	drainWait = 10 * time.Millisecond
	res, err := c.Stream(context.Background(), userRequest("hi"), nil)
	if err != nil || res.Text != "Hello, world!" || res.FinishReason != "stop" {
		t.Errorf("a body held open after [DONE]: %q, %q, %v", res.Text, res.FinishReason, err)
	}
}
