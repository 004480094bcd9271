package fakemodel

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/pagination"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// start runs a server for one test.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func client(s *Server, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(s.URL()),
		option.WithAPIKey("x"), option.WithMaxRetries(0)}, opts...)...)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func userParams(text string, tools ...openai.ChatCompletionToolUnionParam) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "fake/echo",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		Tools:    tools,
	}
}

// streamed is the outcome of one streaming call.
type streamed struct {
	acc    openai.ChatCompletionAccumulator
	chunks []openai.ChatCompletionChunk
	err    error
}

func (r streamed) finishReason() string {
	for _, c := range r.chunks {
		for _, ch := range c.Choices {
			if ch.FinishReason != "" {
				return ch.FinishReason
			}
		}
	}
	return ""
}

func (r streamed) usageChunk() (openai.ChatCompletionChunk, bool) {
	for _, c := range r.chunks {
		if len(c.Choices) == 0 && c.JSON.Usage.Valid() {
			return c, true
		}
	}
	return openai.ChatCompletionChunk{}, false
}

func stream(t *testing.T, c openai.Client, params openai.ChatCompletionNewParams, opts ...option.RequestOption) streamed {
	t.Helper()
	st := c.Chat.Completions.NewStreaming(ctx(t), params, opts...)
	defer st.Close()
	var r streamed
	for st.Next() {
		ch := st.Current()
		r.chunks = append(r.chunks, ch)
		if !r.acc.AddChunk(ch) {
			t.Fatalf("accumulator rejected chunk %s", ch.RawJSON())
		}
	}
	r.err = st.Err()
	return r
}

func TestStreamText(t *testing.T) {
	const text = "Hello, world! This is the fake model streaming a reply in several chunks."
	s := start(t, Options{Script: []Reply{{Text: text}}})
	r := stream(t, client(s), userParams("hi"))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.acc.Choices[0].Message.Content; got != text {
		t.Errorf("content = %q, want %q", got, text)
	}
	contentChunks := 0
	for _, c := range r.chunks {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			contentChunks++
		}
		if !strings.HasPrefix(c.ID, "gen-") || c.Model != "fake/echo" || c.Object != "chat.completion.chunk" {
			t.Errorf("chunk id/model/object = %q/%q/%q", c.ID, c.Model, c.Object)
		}
	}
	if contentChunks < 3 {
		t.Errorf("%d content chunks, want several", contentChunks)
	}
	if fr := r.finishReason(); fr != "stop" {
		t.Errorf("finish reason %q, want stop", fr)
	}
	u, ok := r.usageChunk()
	if !ok {
		t.Fatal("no usage chunk")
	}
	if u.Usage.PromptTokens < 1 || u.Usage.CompletionTokens < 1 || u.Usage.TotalTokens != u.Usage.PromptTokens+u.Usage.CompletionTokens {
		t.Errorf("usage %+v", u.Usage)
	}
	if cost := u.Usage.JSON.ExtraFields["cost"].Raw(); cost != "0" {
		t.Errorf("cost = %s, want 0", cost)
	}
	if byok := u.Usage.JSON.ExtraFields["is_byok"].Raw(); byok != "false" {
		t.Errorf("is_byok = %s, want false", byok)
	}
	if got := s.RequestCount(); got != 1 {
		t.Errorf("RequestCount = %d", got)
	}
}

func TestStreamToolCallsAndReasoning(t *testing.T) {
	reply := Reply{
		Reasoning: "The user wants two files, so I will read both at once.",
		Text:      "I'll read both files.",
		ToolCalls: []ToolCall{
			{Name: "read_file", Arguments: `{"path": "README.md"}`},
			{ID: "call_fixed", Name: "read_file", Arguments: `{"path": "go.mod", "note": "héllo wörld ünïcode"}`},
		},
	}
	s := start(t, Options{Script: []Reply{reply}})
	r := stream(t, client(s), userParams("read README.md and go.mod"))
	if r.err != nil {
		t.Fatal(r.err)
	}
	msg := r.acc.Choices[0].Message
	if msg.Content != reply.Text {
		t.Errorf("content %q", msg.Content)
	}
	if len(msg.ToolCalls) != 2 {
		t.Fatalf("%d tool calls, want 2", len(msg.ToolCalls))
	}
	for i, tc := range msg.ToolCalls {
		if tc.Function.Name != "read_file" || tc.Function.Arguments != reply.ToolCalls[i].Arguments || tc.Type != "function" {
			t.Errorf("call %d = %+v", i, tc.Function)
		}
		if !strings.HasPrefix(tc.ID, "call_") {
			t.Errorf("call %d id %q", i, tc.ID)
		}
	}
	if msg.ToolCalls[1].ID != "call_fixed" {
		t.Errorf("explicit id lost: %q", msg.ToolCalls[1].ID)
	}
	if fr := r.finishReason(); fr != "tool_calls" {
		t.Errorf("finish reason %q", fr)
	}
	var reasoning strings.Builder
	for _, c := range r.chunks {
		if len(c.Choices) > 0 {
			if f, ok := c.Choices[0].Delta.JSON.ExtraFields["reasoning"]; ok {
				var s string
				_ = json.Unmarshal([]byte(f.Raw()), &s)
				reasoning.WriteString(s)
			}
		}
	}
	if reasoning.String() != reply.Reasoning {
		t.Errorf("reasoning %q", reasoning.String())
	}
}

func TestExplicitUsage(t *testing.T) {
	tests := []struct {
		name                 string
		usage                Usage
		cost, byok, upstream string
	}{
		{"byok", Usage{PromptTokens: 12000, CompletionTokens: 800, Cost: 0.00132, IsBYOK: Bool(true), UpstreamCost: 0.0264}, "0.00132", "true", "0.0264"},
		{"credits copies cost upstream", Usage{PromptTokens: 10, CompletionTokens: 5, Cost: 0.0264, IsBYOK: Bool(false)}, "0.0264", "false", "0.0264"},
		{"legacy omits is_byok", Usage{PromptTokens: 10, CompletionTokens: 5, Cost: 0.95}, "0.95", "", "0.95"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Script: []Reply{{Text: "ok", Usage: &tt.usage}}})
			r := stream(t, client(s), userParams("hi"))
			u, ok := r.usageChunk()
			if r.err != nil || !ok {
				t.Fatalf("err %v, usage chunk %v", r.err, ok)
			}
			if u.Usage.PromptTokens != int64(tt.usage.PromptTokens) || u.Usage.TotalTokens != int64(tt.usage.PromptTokens+tt.usage.CompletionTokens) {
				t.Errorf("usage %+v", u.Usage)
			}
			ex := u.Usage.JSON.ExtraFields
			if got := ex["cost"].Raw(); got != tt.cost {
				t.Errorf("cost %s, want %s", got, tt.cost)
			}
			if got := ex["is_byok"].Raw(); got != tt.byok {
				t.Errorf("is_byok %q, want %q", got, tt.byok)
			}
			var cd struct {
				Upstream json.Number `json:"upstream_inference_cost"`
			}
			_ = json.Unmarshal([]byte(ex["cost_details"].Raw()), &cd)
			if string(cd.Upstream) != tt.upstream {
				t.Errorf("upstream %s, want %s", cd.Upstream, tt.upstream)
			}
		})
	}
}

func TestNonStreaming(t *testing.T) {
	s := start(t, Options{Script: []Reply{
		{Text: "plain answer", Reasoning: "thinking"},
		{Text: "calling", ToolCalls: []ToolCall{{Name: "a", Arguments: `{"x":1}`}, {Name: "b"}}},
	}})
	c := client(s)
	res, err := c.Chat.Completions.New(ctx(t), userParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Choices[0].Message.Content; got != "plain answer" || res.Choices[0].FinishReason != "stop" {
		t.Errorf("got %q / %q", got, res.Choices[0].FinishReason)
	}
	if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "gen-") || res.Usage.TotalTokens == 0 {
		t.Errorf("res %s", res.RawJSON())
	}
	if cost := res.Usage.JSON.ExtraFields["cost"].Raw(); cost != "0" {
		t.Errorf("cost %s", cost)
	}
	res, err = c.Chat.Completions.New(ctx(t), userParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	calls := res.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].Function.Name != "a" || calls[0].Function.Arguments != `{"x":1}` ||
		calls[1].Function.Arguments != "{}" || res.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool calls: %s", res.RawJSON())
	}
}

func TestModels(t *testing.T) {
	s := start(t, Options{Models: map[string]int{"fake/small": 4096, "fake/big": 1000000}})
	page, err := listModels(t, s)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.ID == "fake/small" {
			if got := m.JSON.ExtraFields["context_length"].Raw(); got != "4096" {
				t.Errorf("context_length %s", got)
			}
		}
	}
	if strings.Join(ids, ",") != "fake/big,fake/small" {
		t.Errorf("ids %v", ids)
	}

	def := start(t, Options{})
	page, err = listModels(t, def)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != DefaultModel {
		t.Fatalf("default models: %v %+v", err, page)
	}
}

// TestHTTPFaults: every HTTP fault surfaces as *openai.Error with its status,
// streaming or not.
func TestHTTPFaults(t *testing.T) {
	tests := []struct {
		fault      Fault
		status     int
		message    string
		retryAfter string
	}{
		{Fault{Kind: FaultRateLimit}, 429, "Provider returned error", "2"},
		{Fault{Kind: FaultRateLimit, RetryAfter: "0"}, 429, "Provider returned error", "0"},
		{Fault{Kind: FaultServerError}, 500, "Internal Server Error", ""},
		{Fault{Kind: FaultBadGateway}, 502, "Provider returned error", ""},
		{Fault{Kind: FaultNoProvider, RetryAfter: "5"}, 503, "No allowed providers are available for the selected model.", "5"},
		{Fault{Kind: FaultNoCredits}, 402, "Insufficient credits. Add more using https://openrouter.ai/settings/credits", ""},
		{Fault{Kind: FaultUnauthorized}, 401, "No auth credentials found", ""},
		{Fault{Kind: FaultContextOverflow}, 400, "This endpoint's maximum context length is 131072 tokens", ""},
		{Fault{Kind: FaultStatus, Status: 403}, 403, "Your input was flagged", ""},
		{Fault{Status: 418, Body: []byte(`{"error":{"message":"teapot","code":418}}`)}, 418, "teapot", ""},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{true, false} {
			name := tt.fault.Kind.String() + "/" + strconv.Itoa(tt.status)
			if streaming {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				f := tt.fault
				s := start(t, Options{Script: []Reply{{Text: "after the fault", Fault: &f}}})
				c := client(s)
				var err error
				if streaming {
					err = stream(t, c, userParams("hi")).err
				} else {
					_, err = c.Chat.Completions.New(ctx(t), userParams("hi"))
				}
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("err = %v (%T), want *openai.Error", err, err)
				}
				if apiErr.StatusCode != tt.status || !strings.Contains(apiErr.Message, tt.message) {
					t.Errorf("status %d message %q", apiErr.StatusCode, apiErr.Message)
				}
				if apiErr.Code != strconv.Itoa(tt.status) {
					t.Errorf("code %q", apiErr.Code)
				}
				if got := apiErr.Response.Header.Get("Retry-After"); got != tt.retryAfter {
					t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
				}
				if ct := apiErr.Response.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				// The retry gets the scripted reply.
				res, err := c.Chat.Completions.New(ctx(t), userParams("hi"))
				if err != nil || res.Choices[0].Message.Content != "after the fault" {
					t.Errorf("retry: %v %v", err, res)
				}
			})
		}
	}
}

// TestStreamFaults: connection and mid-stream faults as openai-go sees them.
func TestStreamFaults(t *testing.T) {
	const text = "one two three four five six seven eight nine ten"
	tests := []struct {
		name        string
		fault       Fault
		wantErr     func(error) bool
		wantContent string
		wantFinish  string
		wantUsage   bool
	}{
		{"drop", Fault{Kind: FaultDrop}, isTransportErr, "", "", false},
		{"sever", Fault{Kind: FaultSever}, isTransportErr, "one two three ", "", false},
		{"sever after 3", Fault{Kind: FaultSever, After: 3}, isTransportErr, "one two three four five six ", "", false},
		{"sever before data", Fault{Kind: FaultSever, After: -1}, isTransportErr, "", "", false},
		{"stall", Fault{Kind: FaultStall, Stall: 30 * time.Millisecond}, isTransportErr, "one two three ", "", false},
		{"errorchunk", Fault{Kind: FaultErrorChunk}, isStreamErr("Provider disconnected"), "one two three ", "", false},
		{"errorchunk 429", Fault{Kind: FaultErrorChunk, Status: 429}, isStreamErr("rate-limited upstream"), "one two three ", "", false},
		{"nofinish", Fault{Kind: FaultNoFinish}, isNil, text, "", false},
		{"finisherror", Fault{Kind: FaultFinishError}, isNil, text, "error", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fault
			s := start(t, Options{Script: []Reply{{Text: text, Fault: &f}}})
			c := client(s)
			r := stream(t, c, userParams("hi"))
			if !tt.wantErr(r.err) {
				t.Errorf("err = %v (%T)", r.err, r.err)
			}
			if len(r.acc.Choices) > 0 || tt.wantContent != "" {
				if got := r.acc.Choices[0].Message.Content; got != tt.wantContent {
					t.Errorf("content %q, want %q", got, tt.wantContent)
				}
			}
			if got := r.finishReason(); got != tt.wantFinish {
				t.Errorf("finish %q, want %q", got, tt.wantFinish)
			}
			if _, ok := r.usageChunk(); ok != tt.wantUsage {
				t.Errorf("usage chunk %v, want %v", ok, tt.wantUsage)
			}
			// The retry streams the whole reply.
			r = stream(t, c, userParams("hi"))
			if r.err != nil || r.acc.Choices[0].Message.Content != text || r.finishReason() != "stop" {
				t.Errorf("retry: %v %q %q", r.err, r.acc.Choices[0].Message.Content, r.finishReason())
			}
		})
	}
}

func isNil(err error) bool { return err == nil }

func isTransportErr(err error) bool {
	var apiErr *openai.Error
	var se *ssestream.StreamError
	return err != nil && !errors.As(err, &apiErr) && !errors.As(err, &se)
}

func isStreamErr(substr string) func(error) bool {
	return func(err error) bool {
		var se *ssestream.StreamError
		return errors.As(err, &se) && strings.Contains(se.Message, substr) && strings.Contains(string(se.Event.Data), `"finish_reason":"error"`)
	}
}

func TestStallUntilClientGivesUp(t *testing.T) {
	s := start(t, Options{Script: []Reply{{Text: "a b c d e f", Fault: &Fault{Kind: FaultStall}}}})
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	oc := client(s)
	st := oc.Chat.Completions.NewStreaming(c, userParams("hi"))
	n := 0
	for st.Next() {
		n++
	}
	if st.Err() == nil || n != 2 {
		t.Errorf("err %v after %d chunks, want an error after 2", st.Err(), n)
	}
}

func TestNonStreamingFaults(t *testing.T) {
	tests := []struct {
		name  string
		fault Fault
		check func(*openai.ChatCompletion, error) bool
	}{
		{"drop", Fault{Kind: FaultDrop}, func(_ *openai.ChatCompletion, err error) bool { return isTransportErr(err) }},
		{"sever", Fault{Kind: FaultSever}, func(_ *openai.ChatCompletion, err error) bool { return err != nil }},
		{"stall", Fault{Kind: FaultStall, Stall: 20 * time.Millisecond}, func(_ *openai.ChatCompletion, err error) bool { return err != nil }},
		{"inband error", Fault{Kind: FaultErrorChunk}, func(r *openai.ChatCompletion, err error) bool {
			return err == nil && r.Choices[0].FinishReason == "error" && strings.Contains(r.Choices[0].JSON.ExtraFields["error"].Raw(), "provider_unavailable")
		}},
		{"nofinish", Fault{Kind: FaultNoFinish}, func(r *openai.ChatCompletion, err error) bool {
			return err == nil && r.Choices[0].FinishReason == "" && r.Choices[0].Message.Content == "fine"
		}},
		{"finisherror", Fault{Kind: FaultFinishError}, func(r *openai.ChatCompletion, err error) bool {
			_, hasErr := r.Choices[0].JSON.ExtraFields["error"]
			return err == nil && r.Choices[0].FinishReason == "error" && !hasErr
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fault
			s := start(t, Options{Script: []Reply{{Text: "fine", Fault: &f}}})
			c := client(s)
			res, err := c.Chat.Completions.New(ctx(t), userParams("hi"))
			if !tt.check(res, err) {
				t.Errorf("got %v, %v", res, err)
			}
		})
	}
}

// TestRetryGetsScriptedReply: openai-go's own retry (Retry-After: 0) lands on
// the reply whose fault the first attempt consumed.
func TestRetryGetsScriptedReply(t *testing.T) {
	s := start(t, Options{})
	s.Enqueue(
		Reply{Text: "first", Fault: &Fault{Kind: FaultRateLimit, RetryAfter: "0"}},
		Reply{Text: "second", Fault: &Fault{Kind: FaultServerError, RetryAfter: "0"}},
	)
	c := client(s, option.WithMaxRetries(2))
	for _, want := range []string{"first", "second"} {
		r := stream(t, c, userParams("hi"))
		if r.err != nil || r.acc.Choices[0].Message.Content != want {
			t.Fatalf("err %v content %q, want %q", r.err, r.acc.Choices[0].Message.Content, want)
		}
	}
	if s.RequestCount() != 4 || s.Pending() != 0 {
		t.Errorf("requests %d pending %d", s.RequestCount(), s.Pending())
	}
}

func TestContextOverflowFromModelWindow(t *testing.T) {
	s := start(t, Options{Models: map[string]int{"fake/tiny": 10}})
	p := userParams(strings.Repeat("long prompt ", 20))
	p.Model = "fake/tiny"
	oc := client(s)
	_, err := oc.Chat.Completions.New(ctx(t), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "maximum context length is 10 tokens") {
		t.Fatalf("err %v", err)
	}
	p.Model = "some/other-model" // unknown models are not checked
	if _, err := oc.Chat.Completions.New(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	strict := start(t, Options{StrictModels: true})
	sc := client(strict)
	if _, err := sc.Chat.Completions.New(ctx(t), p); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("strict: %v", err)
	}
}

// TestModelsRouting: a request with OpenRouter's "models" parameter is
// answered by the first of its model and models that is served, which the
// response names; the server's record keeps what was asked; none served
// is refused.
func TestModelsRouting(t *testing.T) {
	s := start(t, Options{StrictModels: true, Models: map[string]int{"b": 0, "c": 0}})
	c := client(s)
	p := userParams("hi")
	p.Model = "a"
	p.SetExtraFields(map[string]any{"models": []string{"b", "c"}})
	res, err := c.Chat.Completions.New(ctx(t), p)
	if err != nil || res.Model != "b" {
		t.Fatalf("routed: %v %+v", err, res)
	}
	if got := s.Requests()[0]; got.Model != "a" || !slices.Equal(got.Models, []string{"b", "c"}) {
		t.Errorf("the request as asked: %q %q", got.Model, got.Models)
	}
	// The stream names the routed model too.
	if r := stream(t, c, p); r.err != nil || r.acc.Model != "b" {
		t.Errorf("streamed: %v %q", r.err, r.acc.Model)
	}
	p.SetExtraFields(map[string]any{"models": []string{"x", "y"}})
	var apiErr *openai.Error
	if _, err := c.Chat.Completions.New(ctx(t), p); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "y is not a valid model ID") {
		t.Errorf("none served: %v", err)
	}
}

func listModels(t *testing.T, s *Server) (*pagination.Page[openai.Model], error) {
	c := client(s)
	return c.Models.List(ctx(t))
}

// TestConcurrentRequests: parallel clients, random faults and a shared
// scripted reply with tool calls, under the race detector.
func TestConcurrentRequests(t *testing.T) {
	reply := Reply{Text: "x y z", ToolCalls: []ToolCall{{Name: "t"}}}
	s := start(t, Options{FaultRate: 0.3, FaultKinds: []FaultKind{FaultSever, FaultServerError}, Seed: 3,
		Respond: func(Request) Reply { return reply }})
	c := client(s)
	done := make(chan string, 16)
	for range 16 {
		go func() {
			r := stream(t, c, userParams("hi"))
			if r.err != nil {
				done <- "fault"
				return
			}
			done <- r.acc.Choices[0].Message.ToolCalls[0].ID
		}()
	}
	ids := map[string]bool{}
	for range 16 {
		if id := <-done; id != "fault" {
			if ids[id] {
				t.Errorf("tool call id %s served twice", id)
			}
			ids[id] = true
		}
	}
	if s.RequestCount() != 16 || reply.ToolCalls[0].ID != "" {
		t.Errorf("requests %d, reply mutated: %+v", s.RequestCount(), reply.ToolCalls)
	}
}

// TestStreamHold: a reply with Hold streams HoldAfter chunks of its text,
// then nothing until Hold is closed; then the rest, and the end.
func TestStreamHold(t *testing.T) {
	hold := make(chan struct{})
	s := start(t, Options{ChunkSize: 1, Script: []Reply{{Text: "one two three four five six", Hold: hold, HoldAfter: 2}}})
	c := client(s)
	st := c.Chat.Completions.NewStreaming(ctx(t), userParams("hi"))
	defer st.Close()
	var got strings.Builder
	for got.String() != "one two " {
		if !st.Next() {
			t.Fatalf("the stream ended before the hold, after %q: %v", got.String(), st.Err())
		}
		if c := st.Current(); len(c.Choices) > 0 {
			got.WriteString(c.Choices[0].Delta.Content)
		}
	}
	// Held: the next chunk waits for the release (a chunk arriving
	// first would fail the test).
	next := make(chan string, 1)
	go func() {
		for st.Next() {
			if c := st.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				next <- c.Choices[0].Delta.Content
				break
			}
		}
		close(next)
	}()
	select {
	case chunk := <-next:
		t.Fatalf("a chunk (%q) came through the hold", chunk)
	case <-time.After(100 * time.Millisecond):
	}
	close(hold)
	got.WriteString(<-next)
	for st.Next() {
		if c := st.Current(); len(c.Choices) > 0 {
			got.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := st.Err(); err != nil || got.String() != "one two three four five six" {
		t.Fatalf("after the release: %q, %v", got.String(), err)
	}
}
