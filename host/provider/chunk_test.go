package provider

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentichost/agentic/internal/fixtures"
)

// fixtureEvents returns the data of every event of the wire fixtures'
// streams, as openai-go's SSE decoder hands them over (a newline after
// each data line).
func fixtureEvents(t testing.TB) [][]byte {
	var out [][]byte
	for _, name := range fixtures.Names() {
		if !strings.HasSuffix(name, ".sse") {
			continue
		}
		dec := ssestream.NewDecoder(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader(fixtures.Bytes(name)))})
		for dec.Next() {
			out = append(out, bytes.Clone(dec.Event().Data))
		}
		if err := dec.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(out) < 20 {
		t.Fatalf("%d events in the fixtures", len(out))
	}
	return out
}

// chunkVariants are chunks the fixtures do not show: escapes, the
// members' other forms, whitespace, members the fast path skips, and
// forms it must leave to openai-go.
var chunkVariants = []string{
	`{"id":"a","choices":[{"index":0,"delta":{"content":"line\none \"q\" \\ \/ \t\r\b\f \u00e9 \u4e2d \ud83d\ude00 é 中 😀"}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"reasoning":"","reasoning_content":"x"}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"reasoning":null,"reasoning_content":"x"}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"reasoning":"r","reasoning_details":[{"type":"reasoning.text","text":"r","index":0}]}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"reasoning_details" :  [ {"type" : "t" , "text":"a\nb"} ] ,"content":null}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"reasoning_details":null}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":null}},{"index":4,"function":{"name":"g"}}]}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":null,"role":null,"refusal":"no"},"finish_reason":"stop","native_finish_reason":"end_turn"}]}`,
	`{"id":"a","choices":[{"delta":{"content":"no index"}}]}`,
	`{"id":"a","choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}},{"index":0,"delta":{"content":"again"}}]}`,
	`{"id":"a","usage":null,"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]},"finish_reason":null}]}`,
	`{"id":"a","object":"chat.completion.chunk","created":1.5e9,"system_fingerprint":"fp","service_tier":"default","x":[true,false,null,{"y":[-0.0,1E+2]}],"choices":[]}`,
	` { "id" : "a" , "model" : "m" , "choices" : [ { "index" : 0 , "delta" : { "content" : "x" } } ] } ` + "\n",
	`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"cost":0.5,"is_byok":true,"cost_details":{"upstream_inference_cost":0.1}}}`,
	`{"id":null,"model":null,"choices":[]}`,
	`{}`,
	// Forms the fast path leaves to openai-go.
	`{"id":"a","choices":[{"index":0,"delta":{"Content":"case"}}]}`,
	`{"id":"a","id":"b","choices":[]}`,
	`{"id":"a","error":{"code":500,"message":"boom"},"choices":[]}`,
	`{"id":"a","error":null}`,
	`{"id":"a","choices":[{"index":0,"delta":{"content":5}}]}`,
	`{"id":"a","choices":[{"index":0.0,"delta":{"content":"x"}}]}`,
	`{"id":"a","choices":[{"index":0,"delta":{"content":"\ud800"}}]}`,
	"{\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\"}}]}",
	`{"id":"a","choices":[{"index":0,"delta":{"content":"x"}}]`,
	`{"id":"a","usage":"x","choices":[]}`,
	`{"id":"a","choices":{}}`,
	`[]`,
	`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}`,
}

// TestChunkDecodersAgree pins the fast chunk decoder to openai-go: every
// event it takes, from the wire fixtures and the variants above, reads the
// same through openai-go; and it does take every chunk of the fixtures
// without an error member.
func TestChunkDecodersAgree(t *testing.T) {
	for _, data := range fixtureEvents(t) {
		took := checkChunkDecoders(t, data)
		if !took && !bytes.Contains(data, []byte(`"error"`)) && !bytes.HasPrefix(data, []byte("[DONE]")) {
			t.Errorf("the fast path left a fixture's chunk to openai-go: %s", data)
		}
	}
	for _, v := range chunkVariants {
		checkChunkDecoders(t, []byte(v))
	}
	// The variants exercise both sides.
	var c chunk
	if !decodeChunkFast([]byte(chunkVariants[0]), &c) || c.Choices[0].Content != "line\none \"q\" \\ / \t\r\b\f é 中 😀 é 中 😀" {
		t.Errorf("escapes: %+v", c)
	}
	if decodeChunkFast([]byte(`{"id":"a","error":null}`), &c) {
		t.Error("the fast path took an error member")
	}
}

// checkChunkDecoders reports whether the fast path took data, failing t
// when openai-go reads it otherwise.
func checkChunkDecoders(t testing.TB, data []byte) bool {
	t.Helper()
	var fast, slow chunk
	if !decodeChunkFast(data, &fast) {
		// Whatever it refused goes to openai-go, which must not panic.
		_ = decodeChunk(ssestream.Event{Data: data}, &slow)
		return false
	}
	if err := decodeChunkSDK(ssestream.Event{Data: data}, &slow); err != nil {
		t.Errorf("the fast path took %q; openai-go refused it: %v", data, err)
		return true
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Errorf("%q:\nfast     %+v\nopenai-go %+v", data, fast, slow)
	}
	return true
}

// FuzzChunkDecoders: whatever chunk the fast path takes, openai-go reads
// the same (seeded with every event of the wire fixtures and the variants).
func FuzzChunkDecoders(f *testing.F) {
	for _, data := range fixtureEvents(f) {
		f.Add(data)
	}
	for _, v := range chunkVariants {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkChunkDecoders(t, data)
	})
}

func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(`{"id":"gen-1767225600-Qx7TfakeStreamText01","provider":"OpenAI","model":"openai/gpt-4o-mini","object":"chat.completion.chunk","created":1767225600,"choices":[{"index":0,"delta":{"role":"assistant","content":", world"},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}` + "\n")
	var c chunk
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !decodeChunkFast(data, &c) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("openai-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeChunkSDK(ssestream.Event{Data: data}, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// usageVariants are usage objects beside the fixtures': every field's
// other forms, and forms left to parseUsageSlow.
var usageVariants = []string{
	`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"cost":1e-7,"is_byok":false}`,
	`{"prompt_tokens":-1,"cost":0,"is_byok":true,"cost_details":{"upstream_inference_cost":2.5E+1,"x":[1]},"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":9},"completion_tokens_details":{}}`,
	` { "cost" : 0.5 } `,
	`{}`,
	`{"prompt_tokens":1.5,"cost":"0.1"}`,
	`{"prompt_tokens":null,"is_byok":null,"cost":null}`,
	`{"prompt_tokens":1,"prompt_tokens":2}`,
	`{"Prompt_Tokens":1}`,
	`{"prompt_tokens_details":{"Cached_Tokens":5}}`,
	`{"cost":1e400}`,
	`{"prompt_tokens":99999999999999999999}`,
	`[]`,
	`null`,
}

// TestUsageParsersAgree pins parseUsageFast to parseUsageSlow over the
// usage objects of the wire fixtures and the variants, and checks that it
// reads the fixtures' own.
func TestUsageParsersAgree(t *testing.T) {
	var raws [][]byte
	for _, name := range fixtures.Names() {
		if strings.HasPrefix(name, "usage_") {
			raws = append(raws, fixtures.Bytes(name))
		}
	}
	for _, data := range fixtureEvents(t) {
		var c chunk
		if decodeChunkFast(data, &c) && c.HasUsage {
			raws = append(raws, []byte(c.Usage))
		}
	}
	if len(raws) < 6 {
		t.Fatalf("%d usage objects in the fixtures", len(raws))
	}
	for _, raw := range raws {
		if !checkUsageParsers(t, raw) {
			t.Errorf("the fast path left a fixture's usage to encoding/json: %s", raw)
		}
	}
	for _, v := range usageVariants {
		checkUsageParsers(t, []byte(v))
	}
}

func checkUsageParsers(t testing.TB, raw []byte) bool {
	t.Helper()
	fast, ok := parseUsageFast(raw)
	if !ok {
		return false
	}
	if slow := parseUsageSlow(raw); !reflect.DeepEqual(fast, slow) {
		t.Errorf("%s:\nfast %+v\nslow %+v", raw, fast, slow)
	}
	return true
}

// FuzzUsageParsers: whatever usage parseUsageFast reads, parseUsageSlow
// reads the same.
func FuzzUsageParsers(f *testing.F) {
	for _, name := range fixtures.Names() {
		if strings.HasPrefix(name, "usage_") {
			f.Add(fixtures.Bytes(name))
		}
	}
	for _, v := range usageVariants {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkUsageParsers(t, raw)
	})
}
