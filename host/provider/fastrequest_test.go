package provider

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// requestVariants are requests a run sends, and some the fast encoder
// must leave to openai-go.
func requestVariants() []model.Request {
	temp, tiny, big := 0.7, 1e-9, 1e22
	schema := json.RawMessage(` {"type":"object","properties":{"id":{"type":"string","description":"<id> & \u2028"}},"required":["id"]} `)
	text := func(s string) []ledger.Part { return []ledger.Part{{Type: ledger.PartText, Text: s}} }
	conv := []ledger.Message{
		{Role: ledger.RoleUser, Parts: text(`CALL get_account {"id":"ACC-1"}`)},
		{Role: ledger.RoleAssistant, ToolCalls: []ledger.ToolCall{{ID: "call_1", Name: "get_account", Arguments: `{"id":"ACC-1"}`}, {ID: "call_2", Name: "noop"}}},
		{Role: ledger.RoleTool, ToolCallID: "call_1", Name: "get_account", Parts: text(`{"id":"ACC-1","balance":1234.5}`)},
		{Role: ledger.RoleTool, ToolCallID: "call_2", Parts: text("")},
		{Role: ledger.RoleAssistant, Parts: text("RESULT: done")},
		{Role: ledger.RoleAssistant, Parts: []ledger.Part{{Type: ledger.PartText, Text: "two "}, {Type: ledger.PartText, Text: "parts"}}, ToolCalls: []ledger.ToolCall{{ID: "c", Name: "n", Arguments: "{}"}}},
		{Role: ledger.RoleAssistant},
		{Role: ledger.RoleSystem, Parts: text("a note")},
		{Role: ledger.RoleUser},
		{Role: ledger.RoleUser, Parts: []ledger.Part{{Type: ledger.PartText, Text: "a"}, {Type: ledger.PartText, Text: "b"}}},
		{Role: ledger.RoleUser, Parts: text("quotes \" \\ \n\r\t\b\f \x01 \x7f <html> & é 中 😀 \u2028\u2029 \xff\xfe bad")},
	}
	return []model.Request{
		{Model: "fake/model", Messages: conv[:1]},
		{Model: "fake/model", System: "You are terse.", Messages: conv, MaxTokens: 64, Temperature: &temp,
			Tools: []model.ToolSpec{{Name: "get_account", Description: "Look up an account", Parameters: schema}, {Name: "noop"}}},
		{Model: "m", Messages: conv[:3], Temperature: &tiny},
		{Model: "m", Messages: conv[:3], Temperature: &big},
		// Left to openai-go.
		{Model: "m", Messages: conv[:1], Extra: map[string]any{"reasoning": map[string]any{"effort": "low"}}},
		{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{{Type: ledger.PartImage, URL: "https://x/y.png"}}}}},
		{Model: " ", Messages: conv[:1]},
		{Model: "m", Messages: conv[:1], MaxTokens: -1},
		{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleAssistant, ToolCalls: []ledger.ToolCall{{Name: "x"}}}}},
		{Model: "m", Messages: []ledger.Message{{Role: ledger.RoleTool, Parts: text("x")}}},
		{Model: "m", Messages: []ledger.Message{{Role: "robot"}}},
		{Model: "m", Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
		{Model: "m", Tools: []model.ToolSpec{{Parameters: json.RawMessage(`{}`)}}},
	}
}

// TestRequestEncodersAgree pins the fast request encoder to openai-go:
// whatever request it writes, openai-go marshals the same members from
// buildParams (with "stream": true), towards OpenRouter and
// api.openai.com; and it writes the first four variants.
func TestRequestEncodersAgree(t *testing.T) {
	for _, base := range []string{"https://openrouter.ai/api/v1", "https://api.openai.com/v1"} {
		c, err := New(Config{BaseURL: base, APIKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range requestVariants() {
			took := checkRequestEncoders(t, c, r)
			if i < 4 && !took {
				t.Errorf("%s: variant %d left to openai-go", base, i)
			}
			if i >= 4 && took {
				t.Errorf("%s: variant %d taken by the fast encoder", base, i)
			}
		}
	}
}

// checkRequestEncoders reports whether the fast encoder wrote r, failing
// t when openai-go would send other members.
func checkRequestEncoders(t testing.TB, c *Client, r model.Request) bool {
	t.Helper()
	fast, ok := c.encodeRequest(r)
	if !ok {
		return false
	}
	params, err := c.buildParams(r)
	if err != nil {
		t.Errorf("the fast encoder took a request buildParams refuses (%v): %+v", err, r)
		return true
	}
	slow, err := json.Marshal(params)
	if err != nil {
		t.Errorf("openai-go cannot marshal a request the fast encoder took (%v): %+v", err, r)
		return true
	}
	var got, want map[string]any
	if err := json.Unmarshal(fast, &got); err != nil {
		t.Errorf("the fast encoder wrote invalid JSON (%v): %s", err, fast)
		return true
	}
	if err := json.Unmarshal(slow, &want); err != nil {
		t.Fatal(err)
	}
	want["stream"] = true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bodies differ:\nfast      %s\nopenai-go %s", fast, slow)
	}
	return true
}

// FuzzRequestEncoders: for any texts, ids, names, arguments, schema and
// numbers, a request the fast encoder writes is the one openai-go would.
func FuzzRequestEncoders(f *testing.F) {
	f.Add("You are terse.", `CALL get_account {"id":"ACC-1"}`, "call_1", "get_account", `{"id":"ACC-1"}`, `{"type":"object"}`, "RESULT: x", 64, 0.7)
	f.Add("", "\x00\u2028\xff\"\\", "", "", "", "", "", 0, math.Inf(1))
	f.Add("s", "u", "id", "n", "", " [] ", "\n", -1, math.Copysign(0, -1))
	c, err := New(Config{BaseURL: "https://openrouter.ai/api/v1", APIKey: "k"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, system, user, callID, name, args, schema, answer string, maxTokens int, temp float64) {
		r := model.Request{Model: "m/" + name, System: system, MaxTokens: maxTokens, Temperature: &temp,
			Messages: []ledger.Message{
				{Role: ledger.RoleUser, Parts: []ledger.Part{{Type: ledger.PartText, Text: user}}},
				{Role: ledger.RoleAssistant, Parts: []ledger.Part{{Type: ledger.PartText, Text: answer}}, ToolCalls: []ledger.ToolCall{{ID: callID, Name: name, Arguments: args}}},
				{Role: ledger.RoleTool, ToolCallID: callID, Parts: []ledger.Part{{Type: ledger.PartText, Text: args}}},
			},
			Tools: []model.ToolSpec{{Name: name, Description: answer, Parameters: json.RawMessage(schema)}}}
		checkRequestEncoders(t, c, r)
	})
}

func BenchmarkEncodeRequest(b *testing.B) {
	c, err := New(Config{BaseURL: "https://openrouter.ai/api/v1", APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	r := requestVariants()[1]
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := c.encodeRequest(r); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("openai-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := c.buildParams(r)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
