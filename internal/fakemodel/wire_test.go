package fakemodel

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/internal/fixtures"
)

// sseEvents splits an SSE body into its comment lines and data payloads.
func sseEvents(t *testing.T, body []byte) (comments []string, data []string) {
	t.Helper()
	for block := range strings.SplitSeq(strings.TrimRight(string(body), "\n"), "\n\n") {
		for line := range strings.SplitSeq(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments = append(comments, line)
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			default:
				t.Fatalf("unexpected SSE line %q", line)
			}
		}
	}
	return comments, data
}

// chunkKind classifies a streamed chunk.
func chunkKind(m map[string]any) string {
	if _, ok := m["error"]; ok {
		return "error"
	}
	choices := m["choices"].([]any)
	if len(choices) == 0 {
		return "usage"
	}
	ch := choices[0].(map[string]any)
	if ch["finish_reason"] != nil {
		return "finish"
	}
	d := ch["delta"].(map[string]any)
	if tcs, ok := d["tool_calls"].([]any); ok {
		if _, ok := tcs[0].(map[string]any)["id"]; ok {
			return "tool_first"
		}
		return "tool_args"
	}
	if _, ok := d["reasoning"]; ok {
		return "reasoning"
	}
	if d["content"] == "" {
		return "first"
	}
	return "content"
}

// shape replaces JSON values by their types, keeping object keys and the
// first element of arrays.
func shape(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = shape(e)
		}
		return m
	case []any:
		if len(x) == 0 {
			return "[]"
		}
		return []any{shape(x[0])}
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return "?"
}

// shapesByKind returns the shape of the first chunk of each kind.
func shapesByKind(t *testing.T, data []string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, d := range data {
		if d == "[DONE]" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("chunk %q: %v", d, err)
		}
		if k := chunkKind(m); out[k] == nil {
			out[k] = shape(m)
		}
	}
	return out
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

const streamBody = `{"model":"openai/gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestChunkShapesMatchFixtures compares, per chunk kind, the keys and value
// types of the fake's chunks with the captured fixtures.
func TestChunkShapesMatchFixtures(t *testing.T) {
	want := map[string]any{}
	for _, name := range []string{"stream_text.sse", "stream_tool_calls.sse"} {
		_, data := sseEvents(t, fixtures.Bytes(name))
		for k, v := range shapesByKind(t, data) {
			if want[k] == nil {
				want[k] = v
			}
		}
	}
	for _, name := range []string{"stream_midstream_error.sse", "stream_midstream_error_429.sse"} {
		_, data := sseEvents(t, fixtures.Bytes(name))
		want[name] = shapesByKind(t, data)["error"]
	}

	s := New(Options{Script: []Reply{
		{Text: "I'll read both files, then answer.", ToolCalls: []ToolCall{
			{Name: "read_file", Arguments: `{"path": "README.md"}`}, {Name: "read_file", Arguments: `{"path": "go.mod"}`}}},
	}})
	ts := httptest.NewServer(s)
	defer ts.Close()

	res, body := post(t, ts.URL+"/api/v1/chat/completions", streamBody)
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	comments, data := sseEvents(t, body)
	if len(comments) != 1 || comments[0] != ": OPENROUTER PROCESSING" || !bytes.HasPrefix(body, []byte(": OPENROUTER PROCESSING\n\n")) {
		t.Errorf("comments %q", comments)
	}
	if data[len(data)-1] != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", data[len(data)-1])
	}
	var first map[string]any
	_ = json.Unmarshal([]byte(data[0]), &first)
	if id, _ := first["id"].(string); !strings.HasPrefix(id, "gen-") || res.Header.Get("X-Generation-Id") != id {
		t.Errorf("id %q, X-Generation-Id %q", id, res.Header.Get("X-Generation-Id"))
	}
	if first["model"] != "openai/gpt-4o-mini" || first["provider"] != DefaultProvider {
		t.Errorf("model/provider %v/%v", first["model"], first["provider"])
	}
	got := shapesByKind(t, data)

	for name, status := range map[string]int{"stream_midstream_error.sse": 0, "stream_midstream_error_429.sse": 429} {
		s.Enqueue(Reply{Text: "The answer is", Fault: &Fault{Kind: FaultErrorChunk, Status: status}})
		_, body := post(t, ts.URL+"/v1/chat/completions", streamBody)
		_, _ = post(t, ts.URL+"/v1/chat/completions", streamBody) // the retry
		_, data := sseEvents(t, body)
		if data[len(data)-1] == "[DONE]" {
			t.Errorf("%s: [DONE] after an error chunk", name)
		}
		got[name] = shapesByKind(t, data)["error"]
	}

	for kind, w := range want {
		t.Run(kind, func(t *testing.T) {
			if !reflect.DeepEqual(got[kind], w) {
				gj, _ := json.Marshal(got[kind])
				wj, _ := json.Marshal(w)
				t.Errorf("shape differs\n got: %s\nwant: %s", gj, wj)
			}
		})
	}
}

// TestNoNullError: openai-go ends a stream on any top-level "error" key.
func TestNoNullError(t *testing.T) {
	ts := httptest.NewServer(New(Options{}))
	defer ts.Close()
	for _, body := range []string{streamBody, strings.Replace(streamBody, `"stream":true`, `"stream":false`, 1)} {
		_, b := post(t, ts.URL+"/chat/completions", body)
		if bytes.Contains(b, []byte(`"error"`)) {
			t.Errorf("body has an error key: %s", b)
		}
	}
}

func TestNonStreamingShape(t *testing.T) {
	ts := httptest.NewServer(New(Options{Script: []Reply{{Fault: &Fault{Kind: FaultErrorChunk}}}}))
	defer ts.Close()
	body := strings.Replace(streamBody, `"stream":true`, `"stream":false`, 1)
	_, b := post(t, ts.URL+"/v1/chat/completions", body)
	var got, want map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(fixtures.Bytes("nonstream_inband_error.json"), &want)
	// Every key of the fixture is present, with the same type.
	var sub func(path string, w, g any)
	sub = func(path string, w, g any) {
		switch wv := w.(type) {
		case map[string]any:
			gv, ok := g.(map[string]any)
			if !ok {
				t.Errorf("%s: got %T, want object", path, g)
				return
			}
			for k, e := range wv {
				if _, ok := gv[k]; !ok {
					t.Errorf("%s.%s missing", path, k)
					continue
				}
				sub(path+"."+k, e, gv[k])
			}
		case []any:
			gv, ok := g.([]any)
			if !ok || len(gv) == 0 {
				t.Errorf("%s: got %v, want a non-empty array", path, g)
				return
			}
			sub(path+"[0]", wv[0], gv[0])
		default:
			if reflect.TypeOf(w) != reflect.TypeOf(g) {
				t.Errorf("%s: got %T, want %T", path, g, w)
			}
		}
	}
	sub("", want, got)
}

func TestRouting(t *testing.T) {
	ts := httptest.NewServer(New(Options{}))
	defer ts.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/chat/completions", body, 200},
		{"POST", "/v1/chat/completions", body, 200},
		{"POST", "/api/v1/chat/completions", body, 200},
		{"GET", "/models", "", 200},
		{"GET", "/v1/models", "", 200},
		{"GET", "/api/v1/models", "", 200},
		{"GET", "/v1/chat/completions", "", 405},
		{"POST", "/v1/embeddings", body, 404},
		{"POST", "/v1/chat/completions", "{not json", 400},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Errorf("status %d, want %d: %s", res.StatusCode, tt.status, b)
			}
			if tt.status != 200 && (!json.Valid(b) || !bytes.Contains(b, []byte(`"error":{`))) {
				t.Errorf("error body is not JSON: %s", b)
			}
		})
	}
}

func TestModelsShapeMatchesFixture(t *testing.T) {
	ts := httptest.NewServer(New(Options{}))
	defer ts.Close()
	res, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got, want struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(fixtures.Bytes("models_list.json"), &want)
	if len(got.Data) != 1 || got.Data[0]["id"] != DefaultModel || got.Data[0]["context_length"] != float64(DefaultContextLength) {
		t.Fatalf("models %v", got.Data)
	}
	for k := range want.Data[1] {
		if _, ok := got.Data[0][k]; !ok {
			t.Errorf("model entry lacks %q", k)
		}
	}
}

func TestRequestParsing(t *testing.T) {
	s := New(Options{})
	ts := httptest.NewServer(s)
	defer ts.Close()
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"usage":{"include":true},"max_tokens":100,
	"tools":[{"type":"function","function":{"name":"get_account","description":"d","parameters":{"type":"object"}}}],
	"messages":[
	 {"role":"system","content":"be brief"},
	 {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},{"type":"text","text":"and listen"}]},
	 {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_account","arguments":"{\"account_id\":\"42\"}"}}]},
	 {"role":"tool","tool_call_id":"call_1","content":"{\"plan\":\"pro\"}"}
	]}`
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Title", "test")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Model != "m" || !r.Stream || !r.IncludeUsage || !r.UsageInclude || r.MaxTokens != 100 || r.Header.Get("X-Title") != "test" || !json.Valid(r.Raw) {
		t.Errorf("request %+v", r)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "get_account" || r.Tools[0].Description != "d" || string(r.Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("tools %+v", r.Tools)
	}
	m := r.Messages
	if len(m) != 4 || m[0].Text != "be brief" || m[1].Text != "look\nand listen" || len(m[1].Parts) != 4 {
		t.Fatalf("messages %+v", m)
	}
	if p := m[1].Parts; p[1].Type != "image_url" || p[1].ImageURL != "data:image/png;base64,AAAA" || p[2].AudioData != "UklG" || p[2].AudioFormat != "wav" {
		t.Errorf("parts %+v", p)
	}
	if tc := m[2].ToolCalls; len(tc) != 1 || tc[0] != (ToolCall{ID: "call_1", Name: "get_account", Arguments: `{"account_id":"42"}`}) {
		t.Errorf("tool calls %+v", tc)
	}
	if m[3].Role != "tool" || m[3].ToolCallID != "call_1" || m[3].Text != `{"plan":"pro"}` {
		t.Errorf("tool message %+v", m[3])
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want []string
	}{
		{"", 3, nil},
		{"one", 3, []string{"one"}},
		{"one two three four five", 2, []string{"one two ", "three four ", "five"}},
		{"  lead\nline two", 1, []string{"  lead\n", "line ", "two"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := splitWords(tt.in, tt.n); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	args := `{"note":"héllo wörld ünïcode ✓✓✓✓✓✓✓✓✓✓"}`
	frags := splitFragments(args)
	if strings.Join(frags, "") != args || len(frags) < 2 {
		t.Errorf("fragments %q", frags)
	}
	for _, f := range frags {
		if !utf8.ValidString(f) {
			t.Errorf("fragment %q splits a rune", f)
		}
	}
}

func TestStreamOptions(t *testing.T) {
	tests := []struct {
		name          string
		opts          Options
		wantComment   bool
		contentChunks int
		minDuration   time.Duration
	}{
		{"defaults", Options{}, true, 3, 0}, // 7 words, 3 a chunk
		{"one word a chunk, no comment", Options{ChunkSize: 1, NoKeepAliveComment: true}, false, 7, 0},
		{"latency", Options{Latency: 5 * time.Millisecond, Provider: "Slow"}, true, 3, 30 * time.Millisecond}, // 8 data events
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Script = []Reply{{Text: "one two three four five six seven"}}
			ts := httptest.NewServer(New(tt.opts))
			defer ts.Close()
			t0 := time.Now()
			_, body := post(t, ts.URL+"/v1/chat/completions", streamBody)
			if d := time.Since(t0); d < tt.minDuration {
				t.Errorf("took %v, want at least %v", d, tt.minDuration)
			}
			comments, data := sseEvents(t, body)
			if (len(comments) > 0) != tt.wantComment {
				t.Errorf("comments %q", comments)
			}
			n := 0
			for _, d := range data {
				var m map[string]any
				if json.Unmarshal([]byte(d), &m) == nil && chunkKind(m) == "content" {
					n++
					if tt.opts.Provider != "" && m["provider"] != tt.opts.Provider {
						t.Errorf("provider %v", m["provider"])
					}
				}
			}
			if n != tt.contentChunks {
				t.Errorf("%d content chunks, want %d", n, tt.contentChunks)
			}
		})
	}
}

// TestCloseReleasesStall: Server.Close ends stalled streams, so an
// httptest.Server wrapping it can close.
func TestCloseReleasesStall(t *testing.T) {
	s := New(Options{Script: []Reply{{Text: "a b c d", Fault: &Fault{Kind: FaultStall}}}})
	ts := httptest.NewServer(s)
	got := make(chan error, 1)
	go func() {
		res, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		got <- err
	}()
	for s.RequestCount() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err == nil {
			t.Error("stalled stream ended cleanly, want an unexpected EOF")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("stall not released by Close")
	}
	ts.Close()
}
