package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

func TestRequestUsageFields(t *testing.T) {
	tests := []struct {
		name      string
		baseURL   string // "" means the fake server's own URL
		mode      UsageMode
		wantUsage bool
		maxField  string
	}{
		{"OpenRouter-like", "", UsageAuto, true, "max_tokens"},
		{"api.openai.com", "https://api.openai.com/v1", UsageAuto, false, "max_completion_tokens"},
		{"api.openai.com forced on", "https://API.openai.com/v1/", UsageOn, true, "max_completion_tokens"},
		{"OpenRouter off", "https://openrouter.ai/api/v1", UsageOff, false, "max_tokens"},
		{"OpenRouter via redirect", "https://openrouter.ai/api/v1", UsageAuto, true, "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
			target, _ := url.Parse(fs.URL)
			rt := &redirectTransport{target: target}
			cfg := Config{BaseURL: tt.baseURL, UsageAccounting: tt.mode, HTTPClient: &http.Client{Transport: rt}}
			c := newClient(t, fs, cfg)
			req := userRequest("hi")
			req.MaxTokens = 64
			if _, err := c.Stream(context.Background(), req, nil); err != nil {
				t.Fatalf("Stream: %v", err)
			}
			body := fs.lastBody(t)
			if body["stream"] != true {
				t.Errorf("stream = %v, want true", body["stream"])
			}
			if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Errorf("stream_options = %v, want include_usage true", body["stream_options"])
			}
			usage, has := body["usage"]
			if has != tt.wantUsage {
				t.Errorf("usage present = %v, want %v (body %v)", has, tt.wantUsage, body)
			}
			if tt.wantUsage && !jsonEqual(t, usage, `{"include":true}`) {
				t.Errorf("usage = %v, want {include: true}", usage)
			}
			if body[tt.maxField] != float64(64) {
				t.Errorf("%s = %v, want 64 (body %v)", tt.maxField, body[tt.maxField], body)
			}
			for _, other := range []string{"max_tokens", "max_completion_tokens"} {
				if _, ok := body[other]; ok && other != tt.maxField {
					t.Errorf("%s sent as well", other)
				}
			}
			want := strings.TrimSuffix(tt.baseURL, "/")
			if want == "" {
				want = fs.URL + "/api/v1"
			}
			if got := rt.urls[len(rt.urls)-1]; !strings.EqualFold(got, want+"/chat/completions") {
				t.Errorf("request URL = %s, want %s/chat/completions", got, want)
			}
		})
	}
}

func TestRequestHeaders(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	t.Setenv("OPENAI_ORG_ID", "org-must-not-leak")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	tests := []struct {
		name    string
		key     string
		envKey  string
		headers map[string]string
		auth    string
	}{
		{"key", "sk-or-1", "", nil, "Bearer sk-or-1"},
		{"no key", "", "", nil, ""},
		{"key from env", "", "sk-or-env", nil, "Bearer sk-or-env"},
		{"attribution", "k", "", map[string]string{"HTTP-Referer": "https://example.com", "X-Title": "agentic"}, "Bearer k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvAPIKey, tt.envKey)
			fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
			c, err := New(Config{BaseURL: fs.URL, APIKey: tt.key, Headers: tt.headers})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Stream(context.Background(), userRequest("hi"), nil); err != nil {
				t.Fatal(err)
			}
			h := fs.lastHeader()
			if got := h.Get("Authorization"); got != tt.auth {
				t.Errorf("Authorization = %q, want %q", got, tt.auth)
			}
			for k, v := range tt.headers {
				if h.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
				}
			}
			for _, k := range []string{"OpenAI-Organization", "X-Leak"} {
				if h.Get(k) != "" {
					t.Errorf("ambient OPENAI_* configuration leaked: %s: %s", k, h.Get(k))
				}
			}
		})
	}
}

func TestRequestMessages(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	wav := []byte("RIFF....WAVEfmt ")
	mp3 := []byte("ID3fake")
	pdf := []byte("%PDF-1.4 fake")
	temp := 0.2
	req := model.Request{
		Model:  "anthropic/claude-sonnet-4.6",
		System: "Be brief.",
		Messages: []ledger.Message{
			{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("Hello")}},
			{Role: ledger.RoleUser, Parts: []ledger.Part{
				ledger.TextPart("What is in these?"),
				{Type: ledger.PartImage, MIME: "image/png", Data: png},
				{Type: ledger.PartImage, URL: "https://example.com/cat.jpg"},
				{Type: ledger.PartAudio, MIME: "audio/wav", Data: wav},
				{Type: ledger.PartAudio, MIME: "audio/mpeg", Data: mp3},
				{Type: ledger.PartFile, MIME: "application/pdf", Data: pdf, Name: "report.pdf"},
				{Type: ledger.PartFile, URL: "https://example.com/paper.pdf", Name: "paper.pdf"},
			}},
			{Role: ledger.RoleAssistant, Parts: []ledger.Part{ledger.TextPart("Reading both.")}, ToolCalls: []ledger.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.txt"}`},
				{ID: "call_2", Name: "list", Arguments: ""},
			}},
			{Role: ledger.RoleTool, ToolCallID: "call_1", Name: "read_file", Parts: []ledger.Part{ledger.TextPart("contents of a")}},
			{Role: ledger.RoleTool, ToolCallID: "call_2", Name: "list", Parts: []ledger.Part{ledger.TextPart(ledger.MissingResult)}},
			{Role: ledger.RoleAssistant, ToolCalls: []ledger.ToolCall{{ID: "call_3", Name: "list", Arguments: "{}"}}},
			{Role: ledger.RoleTool, ToolCallID: "call_3", Parts: []ledger.Part{ledger.TextPart("[]")}},
			{Role: ledger.RoleAssistant, Parts: []ledger.Part{ledger.TextPart("Done.")}},
		},
		Tools: []model.ToolSpec{
			{Name: "read_file", Description: "Reads a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","maxLength":4096}},"required":["path"]}`)},
			{Name: "list"},
		},
		MaxTokens:   1000,
		Temperature: &temp,
		Extra: map[string]any{
			"provider":  map[string]any{"order": []string{"anthropic"}, "allow_fallbacks": false},
			"reasoning": map[string]any{"effort": "low"},
		},
	}
	fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
	if _, err := newClient(t, fs, Config{}).Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := fs.lastBody(t)
	b64 := base64.StdEncoding.EncodeToString
	wantMessages := `[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":"Hello"},
		{"role":"user","content":[
			{"type":"text","text":"What is in these?"},
			{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64(png) + `"}},
			{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}},
			{"type":"input_audio","input_audio":{"data":"` + b64(wav) + `","format":"wav"}},
			{"type":"input_audio","input_audio":{"data":"` + b64(mp3) + `","format":"mp3"}},
			{"type":"file","file":{"filename":"report.pdf","file_data":"data:application/pdf;base64,` + b64(pdf) + `"}},
			{"type":"file","file":{"filename":"paper.pdf","file_data":"https://example.com/paper.pdf"}}
		]},
		{"role":"assistant","content":"Reading both.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}},
			{"id":"call_2","type":"function","function":{"name":"list","arguments":"{}"}}
		]},
		{"role":"tool","tool_call_id":"call_1","content":"contents of a"},
		{"role":"tool","tool_call_id":"call_2","content":` + mustJSON(ledger.MissingResult) + `},
		{"role":"assistant","tool_calls":[{"id":"call_3","type":"function","function":{"name":"list","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_3","content":"[]"},
		{"role":"assistant","content":"Done."}
	]`
	if !jsonEqual(t, body["messages"], wantMessages) {
		got, _ := json.MarshalIndent(body["messages"], "", "  ")
		t.Errorf("messages =\n%s", got)
	}
	wantTools := `[
		{"type":"function","function":{"name":"read_file","description":"Reads a file.","parameters":{"type":"object","properties":{"path":{"type":"string","maxLength":4096}},"required":["path"]}}},
		{"type":"function","function":{"name":"list","parameters":{"type":"object"}}}
	]`
	if !jsonEqual(t, body["tools"], wantTools) {
		got, _ := json.MarshalIndent(body["tools"], "", "  ")
		t.Errorf("tools =\n%s", got)
	}
	if body["model"] != "anthropic/claude-sonnet-4.6" || body["temperature"] != 0.2 || body["max_tokens"] != float64(1000) {
		t.Errorf("model, temperature, max_tokens = %v, %v, %v", body["model"], body["temperature"], body["max_tokens"])
	}
	if !jsonEqual(t, body["provider"], `{"order":["anthropic"],"allow_fallbacks":false}`) || !jsonEqual(t, body["reasoning"], `{"effort":"low"}`) {
		t.Errorf("provider, reasoning = %v, %v", body["provider"], body["reasoning"])
	}
	if !jsonEqual(t, body["usage"], `{"include":true}`) {
		t.Errorf("usage = %v", body["usage"])
	}
}

func TestRequestExtraOverrides(t *testing.T) {
	fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
	req := userRequest("hi")
	req.Extra = map[string]any{"usage": map[string]any{"include": false}, "transforms": []string{"middle-out"}}
	if _, err := newClient(t, fs, Config{}).Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := fs.lastBody(t)
	if !jsonEqual(t, body["usage"], `{"include":false}`) || !jsonEqual(t, body["transforms"], `["middle-out"]`) {
		t.Errorf("usage, transforms = %v, %v", body["usage"], body["transforms"])
	}
	for _, k := range []string{"temperature", "max_tokens", "tools", "max_completion_tokens"} {
		if _, ok := body[k]; ok {
			t.Errorf("unset %s was sent", k)
		}
	}
}

func TestRequestInvalid(t *testing.T) {
	tests := []struct {
		name string
		req  model.Request
		want string
	}{
		{"no model", model.Request{}, "no model"},
		{"negative max tokens", model.Request{Model: "m", MaxTokens: -1}, "MaxTokens"},
		{"schema not an object", model.Request{Model: "m", Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1]`)}}}, "tools[0]"},
		{"schema not JSON", model.Request{Model: "m", Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{"type":`)}}}, "tools[0]"},
		{"tool without name", model.Request{Model: "m", Tools: []model.ToolSpec{{}}}, "no name"},
		{"unknown role", model.Request{Model: "m", Messages: []ledger.Message{{Role: "robot"}}}, "unknown role"},
		{"image in assistant", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleAssistant,
			Parts: []ledger.Part{{Type: ledger.PartImage, URL: "https://x"}}}}}, "user messages only"},
		{"tool message without id", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleTool}}}, "tool_call_id"},
		{"tool call without id", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleAssistant,
			ToolCalls: []ledger.ToolCall{{Name: "x"}}}}}, "lacks an id"},
		{"audio by URL", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleUser,
			Parts: []ledger.Part{ledger.TextPart("a"), {Type: ledger.PartAudio, URL: "https://x/a.wav", MIME: "audio/wav"}}}}}, "inline Data"},
		{"audio not audio", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleUser,
			Parts: []ledger.Part{{Type: ledger.PartAudio, Data: []byte("x"), MIME: "text/plain"}}}}}, "not an audio"},
		{"empty image", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleUser,
			Parts: []ledger.Part{{Type: ledger.PartImage}}}}}, "needs Data or URL"},
		{"unknown part", model.Request{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleUser,
			Parts: []ledger.Part{{Type: "video"}}}}}, "unknown part type"},
	}
	fs := serve(t, reply{body: fixtures.Bytes("stream_text.sse")})
	c := newClient(t, fs, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Stream(context.Background(), tt.req, nil)
			if !errors.Is(err, model.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want model.ErrInvalidRequest mentioning %q", err, tt.want)
			}
		})
	}
	if fs.count() != 0 {
		t.Errorf("invalid requests were sent: %d", fs.count())
	}
}

func TestPartConversionDefaults(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n")
	tests := []struct {
		part ledger.Part
		want string
	}{
		{ledger.Part{Type: ledger.PartImage, Data: png}, `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(png) + `"}}`},
		{ledger.Part{Type: ledger.PartFile, MIME: "application/pdf", Data: []byte("%PDF")}, `{"type":"file","file":{"filename":"file.pdf","file_data":"data:application/pdf;base64,JVBERg=="}}`},
		{ledger.Part{Type: ledger.PartAudio, MIME: "audio/x-flac", Data: []byte("f")}, `{"type":"input_audio","input_audio":{"data":"Zg==","format":"flac"}}`},
		{ledger.Part{Type: ledger.PartAudio, MIME: "audio/wav; codecs=1", Data: []byte("w")}, `{"type":"input_audio","input_audio":{"data":"dw==","format":"wav"}}`},
	}
	for _, tt := range tests {
		p, err := convertPart(tt.part)
		if err != nil {
			t.Errorf("convertPart(%+v): %v", tt.part, err)
			continue
		}
		if !jsonEqual(t, p, tt.want) {
			got, _ := json.Marshal(p)
			t.Errorf("convertPart(%+v) = %s, want %s", tt.part, got, tt.want)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
