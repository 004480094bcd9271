package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentichost/agentic/ledger"
)

// chunk is what the stream reads of one chat-completion chunk: its id,
// model and usage, and its choices of index 0 (only one choice is asked
// for). Two decoders produce it: [decodeChunkFast], which reads the shape
// chat-completions servers send without reflection, and [decodeChunkSDK],
// which is openai-go's decoding of the same event. The fast one gives up on
// anything it does not read exactly as openai-go would (the differential
// test and FuzzChunkDecoders pin this), and the event goes to openai-go.
type chunk struct {
	ID, Model string
	// Usage is the raw JSON of a "usage" object, when the chunk has one.
	Usage    string
	HasUsage bool
	Choices  []chunkChoice
}

// chunkChoice is a choice of index 0.
type chunkChoice struct {
	Content, Refusal string
	// Reasoning is the delta's "reasoning", else its "reasoning_content".
	Reasoning string
	// Details is the raw JSON of the delta's "reasoning_details", when it
	// has the key.
	Details      string
	HasDetails   bool
	ToolCalls    []chunkToolCall
	FinishReason string
	// NativeFinish is OpenRouter's native_finish_reason, as text.
	NativeFinish string
}

// chunkToolCall is one tool-call fragment of a delta.
type chunkToolCall struct {
	Index               int64
	ID, Name, Arguments string
}

// decodeChunk decodes one event of a chat-completion stream that is not
// "[DONE]": the fast path when it can, else openai-go's.
func decodeChunk(ev ssestream.Event, dst *chunk) error {
	if !strings.HasPrefix(ev.Type, "thread.") && decodeChunkFast(ev.Data, dst) {
		return nil
	}
	return decodeChunkSDK(ev, dst)
}

// decodeChunkSDK decodes ev as openai-go's stream does (an "error" member
// ends the stream with an [*ssestream.StreamError]) and converts the chunk.
func decodeChunkSDK(ev ssestream.Event, dst *chunk) error {
	s := ssestream.NewStream[openai.ChatCompletionChunk](&oneEvent{ev: ev}, nil)
	if !s.Next() {
		if err := s.Err(); err != nil {
			return err
		}
		return errors.New("provider: openai-go yielded no chunk") // "[DONE]", which the caller handles
	}
	fromSDK(s.Current(), dst)
	return nil
}

// fromSDK converts a chunk openai-go decoded.
func fromSDK(ch openai.ChatCompletionChunk, dst *chunk) {
	*dst = chunk{ID: ch.ID, Model: ch.Model, Choices: dst.Choices[:0]}
	if ch.JSON.Usage.Valid() {
		dst.Usage, dst.HasUsage = ch.JSON.Usage.Raw(), true
	}
	for i := range ch.Choices {
		choice := &ch.Choices[i]
		if choice.Index != 0 {
			continue
		}
		d := &choice.Delta
		c := chunkChoice{Content: d.Content, Refusal: d.Refusal, Reasoning: reasoningText(d), FinishReason: choice.FinishReason,
			NativeFinish: jsonText(json.RawMessage(choice.JSON.ExtraFields["native_finish_reason"].Raw()))}
		if f, ok := d.JSON.ExtraFields["reasoning_details"]; ok {
			c.Details, c.HasDetails = f.Raw(), true
		}
		for _, tc := range d.ToolCalls {
			c.ToolCalls = append(c.ToolCalls, chunkToolCall{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		dst.Choices = append(dst.Choices, c)
	}
}

// oneEvent is an [ssestream.Decoder] of one event.
type oneEvent struct {
	ev   ssestream.Event
	done bool
}

func (o *oneEvent) Next() bool {
	if o.done {
		return false
	}
	o.done = true
	return true
}
func (o *oneEvent) Event() ssestream.Event { return o.ev }
func (o *oneEvent) Close() error           { return nil }
func (o *oneEvent) Err() error             { return nil }

// decodeChunkFast reads data, an event's JSON, into dst without
// reflection, and reports whether it could. It reads the chunk shape
// (id, model, usage, choices with index, delta — content, refusal,
// reasoning, reasoning_content, reasoning_details, tool_calls with index,
// id and function name and arguments — finish_reason and
// native_finish_reason) and skips, validating them, the members it has no
// use for. It gives up — and openai-go decodes the event — on anything
// else: a member of another type than these (a number as content, say), a
// top-level "error", a key repeated, escaped or not in lower case, a
// string that is not valid UTF-8 or holds a lone surrogate, an index that
// is not a plain integer, nesting past 64, or JSON that is not valid.
func decodeChunkFast(data []byte, dst *chunk) bool {
	p := parser{b: data}
	*dst = chunk{Choices: dst.Choices[:0]}
	p.ws()
	if !p.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return p.text(&dst.ID)
		case "model":
			return p.text(&dst.Model)
		case "usage":
			switch p.peek() {
			case 'n':
				return p.null()
			case '{':
				start := p.i
				if !p.skip(0) {
					return false
				}
				dst.Usage, dst.HasUsage = string(p.b[start:p.i]), true
				return true
			}
			return false
		case "choices":
			return p.choices(dst)
		case "error":
			return false // openai-go ends the stream on it
		}
		return p.skip(0)
	}, topKeys) {
		return false
	}
	p.ws()
	return p.i == len(p.b)
}

// The keys each object reads; a repeat of one of them, or a key that
// differs from one only in case, sends the chunk to openai-go.
var (
	topKeys      = []string{"id", "model", "usage", "choices", "error", "object", "created", "provider", "system_fingerprint", "service_tier"}
	choiceKeys   = []string{"index", "delta", "finish_reason", "native_finish_reason", "logprobs"}
	deltaKeys    = []string{"content", "refusal", "role", "reasoning", "reasoning_content", "reasoning_details", "tool_calls", "function_call"}
	toolCallKeys = []string{"index", "id", "type", "function"}
	functionKeys = []string{"name", "arguments"}
)

// choices reads the "choices" array, keeping the choices of index 0.
func (p *parser) choices(dst *chunk) bool {
	if p.peek() != '[' {
		return false
	}
	return p.array(func() bool {
		var c chunkChoice
		index := int64(0) // a missing index is 0, as openai-go reads it
		if !p.object(func(key []byte) bool {
			switch string(key) {
			case "index":
				return p.int(&index)
			case "delta":
				return p.delta(&c)
			case "finish_reason":
				return p.text(&c.FinishReason)
			case "native_finish_reason":
				return p.text(&c.NativeFinish)
			}
			return p.skip(0)
		}, choiceKeys) {
			return false
		}
		if index == 0 {
			dst.Choices = append(dst.Choices, c)
		}
		return true
	})
}

// delta reads a choice's delta.
func (p *parser) delta(c *chunkChoice) bool {
	if p.peek() != '{' {
		return false
	}
	var reasoning, reasoningContent string
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			return p.text(&c.Content)
		case "refusal":
			return p.text(&c.Refusal)
		case "reasoning":
			return p.text(&reasoning)
		case "reasoning_content":
			return p.text(&reasoningContent)
		case "reasoning_details":
			start := p.i
			if !p.skip(0) {
				return false
			}
			c.Details, c.HasDetails = string(p.b[start:p.i]), true
			return true
		case "tool_calls":
			switch p.peek() {
			case 'n':
				return p.null()
			case '[':
				return p.array(func() bool { return p.toolCall(c) })
			}
			return false
		case "role":
			switch p.peek() {
			case 'n':
				return p.null()
			case '"':
				return p.skip(0)
			}
			return false
		}
		return p.skip(0)
	}, deltaKeys)
	// reasoningText's order: the first non-empty one.
	c.Reasoning = reasoning
	if c.Reasoning == "" {
		c.Reasoning = reasoningContent
	}
	return ok
}

// toolCall reads one tool-call fragment.
func (p *parser) toolCall(c *chunkChoice) bool {
	if p.peek() != '{' {
		return false
	}
	var tc chunkToolCall
	if !p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			return p.int(&tc.Index)
		case "id":
			return p.text(&tc.ID)
		case "type":
			var typ string
			return p.text(&typ)
		case "function":
			if p.peek() == 'n' {
				return p.null()
			}
			if p.peek() != '{' {
				return false
			}
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "name":
					return p.text(&tc.Name)
				case "arguments":
					return p.text(&tc.Arguments)
				}
				return p.skip(0)
			}, functionKeys)
		}
		return p.skip(0)
	}, toolCallKeys) {
		return false
	}
	c.ToolCalls = append(c.ToolCalls, tc)
	return true
}

// parser reads JSON from b at i. Every method reports false for what the
// fast path does not take, leaving the event to openai-go.
type parser struct {
	b []byte
	i int
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte, or 0 at the end.
func (p *parser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// object reads an object, calling member for each key with the parser at
// its value. A key met twice, escaped, or equal to one of known but for
// case sends the chunk to openai-go.
func (p *parser) object(member func(key []byte) bool, known []string) bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	var seen uint32
	p.ws()
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		key, ok := p.key()
		if !ok {
			return false
		}
		for k, name := range known {
			if len(name) != len(key) {
				continue
			}
			if string(key) == name {
				if seen&(1<<k) != 0 {
					return false
				}
				seen |= 1 << k
				break
			}
			if bytes.EqualFold(key, []byte(name)) {
				return false // encoding/json matches names without regard to case
			}
		}
		p.ws()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.ws()
		if !member(key) {
			return false
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem with the parser at each element.
func (p *parser) array(elem func() bool) bool {
	if p.peek() != '[' {
		return false
	}
	p.i++
	p.ws()
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// key reads an object key without escapes, in ASCII or valid UTF-8.
func (p *parser) key() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			k := p.b[start:j]
			return k, utf8.Valid(k)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// text reads a string, or null as "".
func (p *parser) text(dst *string) bool {
	switch p.peek() {
	case 'n':
		*dst = ""
		return p.null()
	case '"':
		s, ok := p.str()
		*dst = s
		return ok
	}
	return false
}

func (p *parser) null() bool {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// int reads a JSON integer that fits int64: no fraction, no exponent.
func (p *parser) int(dst *int64) bool {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	digits := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if n > (1<<63-1)/10 {
			return false
		}
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	switch {
	case p.i == digits, p.i-digits > 1 && p.b[digits] == '0', n > 1<<63-1:
		return false
	}
	if c := p.peek(); c == '.' || c == 'e' || c == 'E' {
		return false
	}
	*dst = int64(n)
	if neg {
		*dst = -*dst
	}
	return true
}

// str reads a string and returns its value, refusing invalid UTF-8 and
// lone surrogates (which encoding/json replaces) and control characters.
func (p *parser) str() (string, bool) {
	start := p.i + 1
	j := start
	ascii := true
	for ; j < len(p.b); j++ {
		c := p.b[j]
		if c == '"' {
			s := p.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			p.i = j + 1
			return string(s), true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	if j >= len(p.b) {
		return "", false
	}
	// Escapes: unquote into a buffer.
	buf := make([]byte, 0, j-start+16)
	buf = append(buf, p.b[start:j]...)
	for j < len(p.b) {
		c := p.b[j]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", false
			}
			p.i = j + 1
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			j++
			continue
		}
		if j+1 >= len(p.b) {
			return "", false
		}
		switch e := p.b[j+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
			j += 2
		case 'b':
			buf, j = append(buf, '\b'), j+2
		case 'f':
			buf, j = append(buf, '\f'), j+2
		case 'n':
			buf, j = append(buf, '\n'), j+2
		case 'r':
			buf, j = append(buf, '\r'), j+2
		case 't':
			buf, j = append(buf, '\t'), j+2
		case 'u':
			r, ok := hex4(p.b, j+2)
			if !ok {
				return "", false
			}
			j += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if j+1 < len(p.b) && p.b[j] == '\\' && p.b[j+1] == 'u' {
					r2, ok = hex4(p.b, j+2)
				}
				if !ok {
					return "", false
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return "", false // not a pair
				}
				j += 6
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", false
		}
	}
	return "", false
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skip reads and validates any value, to a depth of 64.
func (p *parser) skip(depth int) bool {
	if depth > 64 {
		return false
	}
	switch c := p.peek(); {
	case c == '{':
		p.i++
		p.ws()
		if p.peek() == '}' {
			p.i++
			return true
		}
		for {
			if p.peek() != '"' || !p.skipString() {
				return false
			}
			p.ws()
			if p.peek() != ':' {
				return false
			}
			p.i++
			p.ws()
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				p.ws()
			case '}':
				p.i++
				return true
			default:
				return false
			}
		}
	case c == '[':
		p.i++
		p.ws()
		if p.peek() == ']' {
			p.i++
			return true
		}
		for {
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				p.ws()
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case c == '"':
		return p.skipString()
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.null()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return false
}

func (p *parser) lit(s string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		p.i += len(s)
		return true
	}
	return false
}

// skipString validates a string's escapes and control characters.
func (p *parser) skipString() bool {
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if j+1 >= len(p.b) {
				return false
			}
			switch p.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(p.b, j+2); !ok {
					return false
				}
				j += 5
			default:
				return false
			}
		}
	}
	return false
}

// number validates a JSON number.
func (p *parser) number() bool {
	b, i := p.b, p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	p.i = i
	return true
}

// parseUsageFast reads a usage object as [ParseUsage] does, without
// reflection, and reports whether it could: token counts that are plain
// integers, costs that are numbers, is_byok a boolean, the details
// objects; anything else (a null, a string, a key repeated, a count with a
// fraction) is left to [parseUsageSlow].
func parseUsageFast(raw []byte) (ledger.Usage, bool) {
	var u ledger.Usage
	p := parser{b: raw}
	hasCost := false
	int64Of := func(dst *int64) bool { return p.int(dst) }
	floatOf := func(dst *float64) bool {
		start := p.i
		if c := p.peek(); c != '-' && (c < '0' || c > '9') {
			return false
		}
		if !p.number() {
			return false
		}
		f, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
		*dst = f
		return err == nil
	}
	p.ws()
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return int64Of(&u.PromptTokens)
		case "completion_tokens":
			return int64Of(&u.CompletionTokens)
		case "total_tokens":
			return int64Of(&u.TotalTokens)
		case "cost":
			hasCost = true
			return floatOf(&u.Cost)
		case "is_byok":
			switch p.peek() {
			case 't':
				t := true
				u.IsBYOK = &t
				return p.lit("true")
			case 'f':
				f := false
				u.IsBYOK = &f
				return p.lit("false")
			}
			return false
		case "prompt_tokens_details":
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "cached_tokens":
					return int64Of(&u.CachedTokens)
				case "cache_write_tokens":
					return int64Of(&u.CacheWriteTokens)
				}
				return p.skip(0)
			}, promptDetailKeys)
		case "completion_tokens_details":
			return p.object(func(key []byte) bool {
				if string(key) == "reasoning_tokens" {
					return int64Of(&u.ReasoningTokens)
				}
				return p.skip(0)
			}, completionDetailKeys)
		case "cost_details":
			return p.object(func(key []byte) bool {
				if string(key) == "upstream_inference_cost" {
					return floatOf(&u.UpstreamCost)
				}
				return p.skip(0)
			}, costDetailKeys)
		}
		return p.skip(0)
	}, usageKeys)
	p.ws()
	if !ok || p.i != len(p.b) {
		return ledger.Usage{}, false
	}
	u.CostUnknown = !hasCost
	return u, true
}

var (
	usageKeys            = []string{"prompt_tokens", "completion_tokens", "total_tokens", "cost", "is_byok", "prompt_tokens_details", "completion_tokens_details", "cost_details"}
	promptDetailKeys     = []string{"cached_tokens", "cache_write_tokens"}
	completionDetailKeys = []string{"reasoning_tokens"}
	costDetailKeys       = []string{"upstream_inference_cost"}
)
