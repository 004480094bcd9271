package ledger

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// The fast path of Encode: the canonical form written field by field, with
// no reflection. It writes exactly the bytes encoding/json writes for the
// wire event (with HTML escaping off): the same field order, the same
// omitted empty fields, the same string escapes, number forms and base64,
// raw JSON compacted alike. Where encoding/json fails — a NaN, a time
// RFC 3339 cannot carry — it gives up (ok false) and Encode falls back to
// encoding/json, which explains. FuzzEncode and FuzzDecode check that both
// write the same bytes.

// fastEncode appends e's encoding to b, or reports that it cannot (ok
// false). Every raw JSON field of e must be valid JSON, as Validate
// checks.
func fastEncode(b []byte, e *Event) (_ []byte, ok, badText bool) {
	w := encoder{b: b, ok: true}
	w.raw(`{"v":`)
	w.b = strconv.AppendInt(w.b, SchemaVersion, 10)
	w.key(`"id":`)
	w.str(e.ID)
	w.key(`"kind":`)
	w.str(string(e.Kind))
	w.key(`"time":`)
	w.time(e.Time)
	w.optStr(`"run_id":`, e.RunID)
	if x := e.Input; x != nil {
		w.key(`"input":`)
		w.input(x)
	}
	if x := e.RunStart; x != nil {
		w.key(`"run_start":`)
		w.runStart(x)
	}
	if x := e.Step; x != nil {
		w.key(`"step":`)
		w.step(x)
	}
	if x := e.ToolStart; x != nil {
		w.key(`"tool_start":{"call_id":`)
		w.str(x.CallID)
		w.key(`"name":`)
		w.str(x.Name)
		w.optStr(`"effect":`, x.Effect)
		w.optBool(`"idempotent":`, x.Idempotent)
		w.raw("}")
	}
	if x := e.ToolResult; x != nil {
		w.key(`"tool_result":`)
		w.toolResult(x)
	}
	if x := e.ApprovalRequest; x != nil {
		w.key(`"approval_request":`)
		w.approvalRequest(x)
	}
	if x := e.ApprovalDecision; x != nil {
		w.key(`"approval_decision":{"approval_id":`)
		w.str(x.ApprovalID)
		w.key(`"decision":`)
		w.str(x.Decision)
		w.optStr(`"reason":`, x.Reason)
		w.optStr(`"by":`, x.By)
		w.optJSON(`"input":`, x.Input)
		w.optStr(`"input_digest":`, x.InputDigest)
		w.optStr(`"response":`, x.Response)
		w.raw("}")
	}
	if x := e.Compaction; x != nil {
		w.key(`"compaction":{"summary":`)
		w.str(x.Summary)
		w.key(`"through":`)
		w.str(x.Through)
		w.optInt(`"prompt_tokens":`, x.PromptTokens)
		w.key(`"usage":`)
		w.usage(&x.Usage)
		w.raw("}")
	}
	if x := e.Poke; x != nil {
		w.key(`"poke":{"text":`)
		w.str(x.Text)
		w.raw("}")
	}
	if x := e.RunEnd; x != nil {
		w.key(`"run_end":`)
		w.runEnd(x)
	}
	if x := e.ResumeAttempt; x != nil {
		w.key(`"resume_attempt":{"attempt":`)
		w.int(int64(x.Attempt))
		w.optStr(`"host":`, x.Host)
		w.raw("}")
	}
	if x := e.Retry; x != nil {
		w.key(`"retry":{"response_id":`)
		w.str(x.ResponseID)
		w.key(`"attempt":`)
		w.int(int64(x.Attempt))
		w.key(`"reason":`)
		w.str(x.Reason)
		w.key(`"delay_ms":`)
		w.int(x.DelayMS)
		w.raw("}")
	}
	if x := e.Fork; x != nil {
		w.key(`"fork":{"source":`)
		w.str(x.Source)
		w.key(`"at":`)
		w.str(x.At)
		w.optStr(`"item":`, x.Item)
		w.key(`"copied":`)
		w.int(int64(x.Copied))
		w.optStr(`"agent":`, x.Agent)
		w.optStr(`"model":`, x.Model)
		w.raw("}")
	}
	if x := e.ToolJournal; x != nil {
		w.key(`"tool_journal":`)
		w.toolJournal(x)
	}
	w.raw("}")
	return w.b, w.ok, w.badText
}

// encoder appends to b; ok turns false, for good, at the first value it
// cannot write as encoding/json would.
type encoder struct {
	b       []byte
	ok      bool
	badText bool // a string written was not valid UTF-8
}

func (w *encoder) raw(s string) { w.b = append(w.b, s...) }

// key writes a comma, then the quoted key and its colon, given as one
// literal (`"name":`).
func (w *encoder) key(k string) {
	w.b = append(w.b, ',')
	w.b = append(w.b, k...)
}

func (w *encoder) str(s string) {
	var bad bool
	w.b, bad = appendString(w.b, s)
	w.badText = w.badText || bad
}
func (w *encoder) int(n int64) { w.b = strconv.AppendInt(w.b, n, 10) }
func (w *encoder) bool(v bool) { w.b = strconv.AppendBool(w.b, v) }
func (w *encoder) float(f float64) {
	var ok bool
	if w.b, ok = appendFloat(w.b, f); !ok {
		w.ok = false
	}
}

func (w *encoder) optStr(k, s string) {
	if s != "" {
		w.key(k)
		w.str(s)
	}
}

func (w *encoder) optInt(k string, n int64) {
	if n != 0 {
		w.key(k)
		w.int(n)
	}
}

func (w *encoder) optBool(k string, v bool) {
	if v {
		w.key(k)
		w.raw("true")
	}
}

func (w *encoder) optFloat(k string, f float64) {
	if f != 0 {
		w.key(k)
		w.float(f)
	}
}

// strs writes a list of strings; nil is null, as encoding/json writes it.
func (w *encoder) strs(list []string) {
	if list == nil {
		w.raw("null")
		return
	}
	w.b = append(w.b, '[')
	for i, s := range list {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(s)
	}
	w.b = append(w.b, ']')
}

func (w *encoder) optStrs(k string, list []string) {
	if len(list) > 0 {
		w.key(k)
		w.strs(list)
	}
}

// json writes raw JSON compacted, as encoding/json writes a
// json.RawMessage; nil is null. m must be valid JSON, as Validate makes
// sure every raw field of an event is: then compacting only drops the
// whitespace outside strings.
func (w *encoder) json(m json.RawMessage) {
	if m == nil {
		w.raw("null")
		return
	}
	start, inString := 0, false
	for i := 0; i < len(m); i++ {
		switch c := m[i]; {
		case inString:
			if c == '\\' {
				i++ // the escaped byte is never the string's end
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			w.b = append(w.b, m[start:i]...)
			start = i + 1
		}
	}
	w.b = append(w.b, m[start:]...)
}

func (w *encoder) optJSON(k string, m json.RawMessage) {
	if len(m) > 0 {
		w.key(k)
		w.json(m)
	}
}

// time writes t as time.Time's MarshalJSON does, and gives up where that
// fails: a year of other than four digits, an offset RFC 3339 cannot
// carry.
func (w *encoder) time(t time.Time) {
	n := len(w.b)
	w.b = append(w.b, '"')
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	w.b = append(w.b, '"')
	f := w.b[n+1 : len(w.b)-1]
	if len(f) < len("2006-01-02T15:04:05Z") || f[4] != '-' {
		w.ok = false
		return
	}
	if f[len(f)-1] != 'Z' {
		c := f[len(f)-len("Z07:00")]
		h := f[len(f)-len("07:00"):]
		if '0' <= c && c <= '9' || 10*(h[0]-'0')+(h[1]-'0') >= 24 {
			w.ok = false
		}
	}
}

func (w *encoder) input(x *Input) {
	w.raw(`{"message_id":`)
	w.str(x.MessageID)
	w.optStr(`"request_id":`, x.RequestID)
	w.key(`"parts":`)
	if x.Parts == nil {
		w.raw("null")
	} else {
		w.b = append(w.b, '[')
		for i := range x.Parts {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			p := &x.Parts[i]
			w.raw(`{"type":`)
			w.str(string(p.Type))
			w.optStr(`"text":`, p.Text)
			w.optStr(`"mime":`, p.MIME)
			if len(p.Data) > 0 {
				w.key(`"data":"`)
				w.b = base64.StdEncoding.AppendEncode(w.b, p.Data)
				w.b = append(w.b, '"')
			}
			w.optStr(`"url":`, p.URL)
			w.optStr(`"name":`, p.Name)
			w.optStr(`"blob":`, p.Blob)
			w.optInt(`"size":`, p.Size)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	if pc := x.Parent; pc != nil {
		w.key(`"parent":{"session_id":`)
		w.str(pc.SessionID)
		w.optStr(`"run_id":`, pc.RunID)
		w.key(`"call_id":`)
		w.str(pc.CallID)
		w.optStr(`"agent":`, pc.Agent)
		w.b = append(w.b, '}')
	}
	w.optStr(`"overlap":`, x.Overlap)
	w.raw("}")
}

func (w *encoder) runStart(x *RunStart) {
	w.raw(`{"inputs":`)
	w.strs(x.Inputs)
	w.key(`"response_id":`)
	w.str(x.ResponseID)
	w.optStr(`"agent":`, x.Agent)
	w.optStr(`"model":`, x.Model)
	w.optInt(`"max_steps":`, int64(x.MaxSteps))
	if t := x.Task; t != nil {
		w.key(`"task":{`)
		n := len(w.b) // every field of a task but its schema may be left out
		if t.Deliverable != "" {
			w.field(n, `"deliverable":`)
			w.str(t.Deliverable)
		}
		if t.Description != "" {
			w.field(n, `"description":`)
			w.str(t.Description)
		}
		w.field(n, `"schema":`)
		w.json(t.Schema)
		if t.Validator != "" {
			w.field(n, `"validator":`)
			w.str(t.Validator)
		}
		if t.MaxPokes != 0 {
			w.field(n, `"max_pokes":`)
			w.int(int64(t.MaxPokes))
		}
		w.b = append(w.b, '}')
	}
	w.raw("}")
}

// field writes key k inside an object whose fields begin at n, after a
// comma when a field precedes it.
func (w *encoder) field(n int, k string) {
	if len(w.b) > n {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, k...)
}

func (w *encoder) step(x *Step) {
	w.raw(`{"response_id":`)
	w.str(x.ResponseID)
	w.optStr(`"next_response_id":`, x.NextResponseID)
	w.key(`"index":`)
	w.int(int64(x.Index))
	w.optStrs(`"inputs":`, x.Inputs)
	w.optStr(`"text":`, x.Text)
	w.optStr(`"reasoning":`, x.Reasoning)
	if len(x.ToolCalls) > 0 {
		w.key(`"tool_calls":[`)
		for i := range x.ToolCalls {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			c := &x.ToolCalls[i]
			w.raw(`{"id":`)
			w.str(c.ID)
			w.key(`"name":`)
			w.str(c.Name)
			w.key(`"arguments":`)
			w.str(c.Arguments)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	w.optStr(`"finish_reason":`, x.FinishReason)
	w.optStr(`"model":`, x.Model)
	w.optStr(`"generation_id":`, x.GenerationID)
	w.key(`"usage":`)
	w.usage(&x.Usage)
	w.optBool(`"partial":`, x.Partial)
	w.optJSON(`"raw":`, x.Raw)
	w.raw("}")
}

func (w *encoder) usage(u *Usage) {
	w.raw(`{"prompt_tokens":`)
	w.int(u.PromptTokens)
	w.key(`"completion_tokens":`)
	w.int(u.CompletionTokens)
	w.key(`"total_tokens":`)
	w.int(u.TotalTokens)
	w.optInt(`"cached_tokens":`, u.CachedTokens)
	w.optInt(`"cache_write_tokens":`, u.CacheWriteTokens)
	w.optInt(`"reasoning_tokens":`, u.ReasoningTokens)
	w.optFloat(`"cost":`, u.Cost)
	if u.IsBYOK != nil {
		w.key(`"is_byok":`)
		w.bool(*u.IsBYOK)
	}
	w.optFloat(`"upstream_cost":`, u.UpstreamCost)
	w.optBool(`"cost_unknown":`, u.CostUnknown)
	w.raw("}")
}

func (w *encoder) toolResult(x *ToolResult) {
	w.raw(`{"call_id":`)
	w.str(x.CallID)
	w.key(`"name":`)
	w.str(x.Name)
	w.key(`"output":`)
	w.str(x.Output)
	w.optStr(`"output_blob":`, x.OutputBlob)
	w.optInt(`"output_size":`, x.OutputSize)
	w.optBool(`"is_error":`, x.IsError)
	w.optStr(`"source":`, x.Source)
	w.optInt(`"duration_ms":`, x.DurationMS)
	w.optInt(`"fuel":`, x.Fuel)
	w.optInt(`"policy_fuel":`, x.PolicyFuel)
	w.optBool(`"synthetic":`, x.Synthetic)
	if t := x.Traffic; t != nil {
		w.key(`"traffic":`)
		w.traffic(t)
	}
	w.raw("}")
}

// traffic writes a tool call's traffic record; every field of it may be
// left out, so each is written by field.
func (w *encoder) traffic(t *ToolTraffic) {
	w.b = append(w.b, '{')
	n := len(w.b)
	if len(t.HTTP) > 0 {
		w.field(n, `"http":[`)
		for i := range t.HTTP {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.httpExchange(&t.HTTP[i])
		}
		w.b = append(w.b, ']')
	}
	if len(t.KV) > 0 {
		w.field(n, `"kv":[`)
		for i := range t.KV {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.kvAccess(&t.KV[i])
		}
		w.b = append(w.b, ']')
	}
	if t.Truncated {
		w.field(n, `"truncated":true`)
	}
	if t.Dropped != 0 {
		w.field(n, `"dropped":`)
		w.int(int64(t.Dropped))
	}
	w.b = append(w.b, '}')
}

func (w *encoder) httpExchange(x *HTTPExchange) {
	w.b = append(w.b, '{')
	if x.Seq != 0 {
		w.raw(`"seq":`)
		w.int(int64(x.Seq))
		w.b = append(w.b, ',')
	}
	w.raw(`"method":`)
	w.str(x.Method)
	w.key(`"url":`)
	w.str(x.URL)
	w.optStr(`"url_digest":`, x.URLDigest)
	w.optStrs(`"request_headers":`, x.RequestHeaders)
	w.optInt(`"request_bytes":`, x.RequestBytes)
	w.optStr(`"request_digest":`, x.RequestDigest)
	w.optInt(`"status":`, int64(x.Status))
	w.optStrs(`"response_headers":`, x.ResponseHeaders)
	w.optInt(`"response_bytes":`, x.ResponseBytes)
	w.optStr(`"response_digest":`, x.ResponseDigest)
	w.optStr(`"response_body":`, x.ResponseBody)
	w.optBytes(`"response_body_base64":`, x.ResponseBodyBase64)
	w.optBool(`"body_omitted":`, x.BodyOmitted)
	w.optStr(`"error":`, x.Error)
	w.optBool(`"denied":`, x.Denied)
	w.optInt(`"duration_ms":`, x.DurationMS)
	w.b = append(w.b, '}')
}

func (w *encoder) kvAccess(a *KVAccess) {
	w.b = append(w.b, '{')
	if a.Seq != 0 {
		w.raw(`"seq":`)
		w.int(int64(a.Seq))
		w.b = append(w.b, ',')
	}
	w.raw(`"op":`)
	w.str(a.Op)
	w.optStr(`"key":`, a.Key)
	w.optBytes(`"key_base64":`, a.KeyBase64)
	w.optBool(`"found":`, a.Found)
	w.optInt(`"value_bytes":`, a.ValueBytes)
	w.optStr(`"value_digest":`, a.ValueDigest)
	w.optStr(`"value":`, a.Value)
	w.optBytes(`"value_base64":`, a.ValueBase64)
	w.optBool(`"value_omitted":`, a.ValueOmitted)
	w.optStr(`"error":`, a.Error)
	w.b = append(w.b, '}')
}

func (w *encoder) toolJournal(x *ToolJournal) {
	w.raw(`{"call_id":`)
	w.str(x.CallID)
	w.key(`"name":`)
	w.str(x.Name)
	w.key(`"source":`)
	w.str(x.Source)
	w.key(`"at":`)
	w.int(int64(x.At))
	w.key(`"entries":`)
	if x.Entries == nil {
		w.raw("null")
	} else {
		w.b = append(w.b, '[')
		for i := range x.Entries {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			je := &x.Entries[i]
			w.raw(`{"op":`)
			w.str(je.Op)
			w.key(`"request":`)
			w.str(je.Request)
			w.optStr(`"what":`, je.What)
			w.optStr(`"key":`, je.Key)
			w.optBytes(`"answer":`, je.Answer)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	w.b = append(w.b, '}')
}

// optBytes writes bytes as base64, as encoding/json writes a []byte, left
// out when empty.
func (w *encoder) optBytes(k string, data []byte) {
	if len(data) > 0 {
		w.key(k)
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, data)
		w.b = append(w.b, '"')
	}
}

func (w *encoder) approvalRequest(x *ApprovalRequest) {
	w.raw(`{"approval_id":`)
	w.str(x.ApprovalID)
	w.optStr(`"kind":`, x.Kind)
	w.key(`"call_id":`)
	w.str(x.CallID)
	w.key(`"name":`)
	w.str(x.Name)
	w.optStr(`"effect":`, x.Effect)
	w.optJSON(`"input":`, x.Input)
	w.optStr(`"input_digest":`, x.InputDigest)
	w.optStr(`"summary":`, x.Summary)
	w.optStr(`"reason":`, x.Reason)
	w.optStr(`"policy":`, x.Policy)
	w.optStr(`"policy_source":`, x.PolicySource)
	w.optInt(`"policy_fuel":`, x.PolicyFuel)
	if !x.ExpiresAt.IsZero() {
		w.key(`"expires_at":`)
		w.time(x.ExpiresAt)
	}
	w.raw("}")
}

func (w *encoder) runEnd(x *RunEnd) {
	w.raw(`{"status":`)
	w.str(string(x.Status))
	w.optStr(`"reason":`, x.Reason)
	w.optStr(`"timeout":`, x.Timeout)
	w.optStrs(`"inputs":`, x.Inputs)
	w.optStr(`"restarted_by":`, x.RestartedBy)
	w.optJSON(`"deliverable":`, x.Deliverable)
	w.optBool(`"rolled_back":`, x.RolledBack)
	w.raw("}")
}

// appendFloat writes f as encoding/json writes a float64, or reports that
// it cannot (NaN and the infinities, which JSON has no form for).
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// encoding/json writes e-9, not e-09.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// plain8 tells whether all eight bytes of s are ASCII a JSON string
// carries as they are: none below 0x20, none '"' or '\\', none from 0x80.
// Each test is exact for "some byte is": (x - n) &^ x has a byte's top bit
// set when that byte is below n, for n ≤ 0x80, as long as that top bit was
// clear in x (the bytes from 0x80 are caught apart).
func plain8(s string) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	below := (x - ones*0x20) &^ x
	isQuote := (quote - ones) &^ quote
	isBackslash := (backslash - ones) &^ backslash
	return (x|below|isQuote|isBackslash)&tops == 0
}

// appendString writes s quoted as encoding/json writes a string with HTML
// escaping off: `"` and `\` escaped, control characters as \b \f \n \r \t
// or \u00XX, bytes that are not UTF-8 as \ufffd, and U+2028 and U+2029 as
// \u2028 and \u2029.
//
// bad tells that s is not valid UTF-8.
func appendString(b []byte, s string) (_ []byte, bad bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look.
		for i+8 <= len(s) && plain8(s[i:i+8]) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			bad = true
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), bad
}

// encodedSizeHint is about the length of e's encoding, a little over, so
// that Encode allocates its line once and a store that keeps the line (the
// memory store) keeps little more than its bytes: the keys of the kind,
// its strings unescaped, and a sixteenth more for escapes and numbers.
// On the ledger tests' sessions it is 1.08× the length, and short for 0.2%
// of the events (whose line then grows once).
func encodedSizeHint(e *Event) int {
	n := 72 + len(e.ID) + len(e.Kind) + len(e.RunID)
	switch {
	case e.Input != nil:
		n += 32 + len(e.Input.MessageID) + len(e.Input.RequestID) + len(e.Input.Overlap)
		if pc := e.Input.Parent; pc != nil {
			n += 64 + len(pc.SessionID) + len(pc.RunID) + len(pc.CallID) + len(pc.Agent)
		}
		for i := range e.Input.Parts {
			p := &e.Input.Parts[i]
			n += 40 + len(p.Type) + len(p.Text) + len(p.MIME) + len(p.URL) + len(p.Name) + len(p.Blob) + base64.StdEncoding.EncodedLen(len(p.Data))
		}
	case e.RunStart != nil:
		x := e.RunStart
		n += 64 + len(x.ResponseID) + len(x.Agent) + len(x.Model) + strsLen(x.Inputs)
		if t := x.Task; t != nil {
			n += 96 + len(t.Deliverable) + len(t.Description) + len(t.Schema) + len(t.Validator)
		}
	case e.Step != nil:
		x := e.Step
		n += 240 + len(x.ResponseID) + len(x.NextResponseID) + len(x.Text) + len(x.Reasoning) + len(x.FinishReason) +
			len(x.Model) + len(x.GenerationID) + len(x.Raw) + strsLen(x.Inputs)
		for i := range x.ToolCalls {
			c := &x.ToolCalls[i]
			n += 40 + len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	case e.ToolStart != nil:
		n += 56 + len(e.ToolStart.CallID) + len(e.ToolStart.Name) + len(e.ToolStart.Effect)
	case e.ToolResult != nil:
		x := e.ToolResult
		n += 96 + len(x.CallID) + len(x.Name) + len(x.Output) + len(x.OutputBlob) + len(x.Source)
		if t := x.Traffic; t != nil {
			n += trafficSizeHint(t)
		}
	case e.ApprovalRequest != nil:
		x := e.ApprovalRequest
		n += 224 + len(x.ApprovalID) + len(x.CallID) + len(x.Name) + len(x.Effect) + len(x.Input) + len(x.InputDigest) +
			len(x.Summary) + len(x.Reason) + len(x.Policy) + len(x.PolicySource)
	case e.ApprovalDecision != nil:
		x := e.ApprovalDecision
		n += 128 + len(x.ApprovalID) + len(x.Decision) + len(x.Reason) + len(x.By) + len(x.Input) + len(x.InputDigest) + len(x.Response)
	case e.Compaction != nil:
		n += 200 + len(e.Compaction.Summary) + len(e.Compaction.Through)
	case e.Poke != nil:
		n += 24 + len(e.Poke.Text)
	case e.RunEnd != nil:
		x := e.RunEnd
		n += 48 + len(x.Status) + len(x.Reason) + len(x.Timeout) + len(x.RestartedBy) + len(x.Deliverable) + strsLen(x.Inputs)
	case e.ResumeAttempt != nil:
		n += 48 + len(e.ResumeAttempt.Host)
	case e.Retry != nil:
		n += 72 + len(e.Retry.ResponseID) + len(e.Retry.Reason)
	case e.ToolJournal != nil:
		x := e.ToolJournal
		n += 80 + len(x.CallID) + len(x.Name) + len(x.Source)
		for i := range x.Entries {
			je := &x.Entries[i]
			n += 48 + len(je.Op) + len(je.Request) + len(je.What) + len(je.Key) + base64.StdEncoding.EncodedLen(len(je.Answer))
		}
	case e.Fork != nil:
		x := e.Fork
		n += 80 + len(x.Source) + len(x.At) + len(x.Item) + len(x.Agent) + len(x.Model)
	}
	return n + n/16
}

// trafficSizeHint is about the length of a traffic record's encoding.
func trafficSizeHint(t *ToolTraffic) int {
	n := 48
	for i := range t.HTTP {
		x := &t.HTTP[i]
		n += 200 + len(x.Method) + len(x.URL) + len(x.URLDigest) + strsLen(x.RequestHeaders) + len(x.RequestDigest) +
			strsLen(x.ResponseHeaders) + len(x.ResponseDigest) + len(x.ResponseBody) +
			base64.StdEncoding.EncodedLen(len(x.ResponseBodyBase64)) + len(x.Error)
	}
	for i := range t.KV {
		a := &t.KV[i]
		n += 100 + len(a.Op) + len(a.Key) + base64.StdEncoding.EncodedLen(len(a.KeyBase64)) + len(a.ValueDigest) +
			len(a.Value) + base64.StdEncoding.EncodedLen(len(a.ValueBase64)) + len(a.Error)
	}
	return n
}

// strsLen is the length of a list of strings in JSON, unescaped.
func strsLen(list []string) int {
	n := 2
	for _, s := range list {
		n += len(s) + 3
	}
	return n
}
