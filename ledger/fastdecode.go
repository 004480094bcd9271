package ledger

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The fast path of Decode: a decoder of the canonical form Encode writes,
// with no reflection. It reads exactly what encoding/json would read from
// such a line, and gives up (ok false) on anything else — a key it does not
// know or knows in another case, a key twice, a null, a number where a
// string belongs, an escape it does not take, bytes that are not UTF-8 —
// so that the strict decoder, which Decode falls back to, decides and
// explains. Whatever it accepts, the strict decoder accepts and decodes to
// an equal event (FuzzDecode checks both ways).

// fastDecode decodes data, or reports that it cannot (ok false). With
// shared, the strings it reads without unescaping share data's memory.
func fastDecode(data []byte, shared bool) (w wireEvent, ok bool) {
	s := scanner{b: data, shared: shared}
	ok = s.object(func(key string) bool {
		switch key {
		case "v":
			w.V, ok = s.int()
		case "id":
			w.ID, ok = s.str()
		case "kind":
			var k string
			k, ok = s.str()
			w.Kind = Kind(k)
		case "time":
			w.Time, ok = s.time()
		case "run_id":
			w.RunID, ok = s.str()
		case "input":
			w.Input = new(Input)
			ok = s.input(w.Input)
		case "run_start":
			w.RunStart = new(RunStart)
			ok = s.runStart(w.RunStart)
		case "step":
			w.Step = new(Step)
			ok = s.step(w.Step)
		case "tool_start":
			w.ToolStart = new(ToolStart)
			ok = s.toolStart(w.ToolStart)
		case "tool_journal":
			w.ToolJournal = new(ToolJournal)
			ok = s.toolJournal(w.ToolJournal)
		case "tool_result":
			w.ToolResult = new(ToolResult)
			ok = s.toolResult(w.ToolResult)
		case "approval_request":
			w.ApprovalRequest = new(ApprovalRequest)
			ok = s.approvalRequest(w.ApprovalRequest)
		case "approval_decision":
			w.ApprovalDecision = new(ApprovalDecision)
			ok = s.approvalDecision(w.ApprovalDecision)
		case "compaction":
			w.Compaction = new(Compaction)
			ok = s.compaction(w.Compaction)
		case "poke":
			w.Poke = new(Poke)
			ok = s.object(func(key string) bool {
				if key == "text" {
					w.Poke.Text, ok = s.str()
					return ok
				}
				return false
			})
		case "run_end":
			w.RunEnd = new(RunEnd)
			ok = s.runEnd(w.RunEnd)
		case "resume_attempt":
			w.ResumeAttempt = new(ResumeAttempt)
			ok = s.object(func(key string) bool {
				switch key {
				case "attempt":
					w.ResumeAttempt.Attempt, ok = s.int()
				case "host":
					w.ResumeAttempt.Host, ok = s.str()
				default:
					return false
				}
				return ok
			})
		case "retry":
			w.Retry = new(Retry)
			ok = s.retry(w.Retry)
		case "fork":
			w.Fork = new(Fork)
			ok = s.fork(w.Fork)
		default:
			return false
		}
		return ok
	})
	if !ok {
		return wireEvent{}, false
	}
	s.ws()
	return w, s.i == len(s.b)
}

func (s *scanner) input(in *Input) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "message_id":
			in.MessageID, ok = s.str()
		case "request_id":
			in.RequestID, ok = s.str()
		case "overlap":
			in.Overlap, ok = s.str()
		case "parent":
			in.Parent = new(ParentCall)
			ok = s.object(func(key string) bool {
				var ok bool
				switch key {
				case "session_id":
					in.Parent.SessionID, ok = s.str()
				case "run_id":
					in.Parent.RunID, ok = s.str()
				case "call_id":
					in.Parent.CallID, ok = s.str()
				case "agent":
					in.Parent.Agent, ok = s.str()
				}
				return ok
			})
		case "parts":
			in.Parts = []Part{}
			ok = s.array(func() bool {
				var p Part
				if !s.part(&p) {
					return false
				}
				in.Parts = append(in.Parts, p)
				return true
			})
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) part(p *Part) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "type":
			var t string
			t, ok = s.str()
			p.Type = PartType(t)
		case "text":
			p.Text, ok = s.str()
		case "mime":
			p.MIME, ok = s.str()
		case "data":
			p.Data, ok = s.bytes()
		case "url":
			p.URL, ok = s.str()
		case "name":
			p.Name, ok = s.str()
		case "blob":
			p.Blob, ok = s.str()
		case "size":
			p.Size, ok = s.int64()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) runStart(r *RunStart) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "inputs":
			r.Inputs, ok = s.strings()
		case "response_id":
			r.ResponseID, ok = s.str()
		case "agent":
			r.Agent, ok = s.str()
		case "model":
			r.Model, ok = s.str()
		case "max_steps":
			r.MaxSteps, ok = s.int()
		case "task":
			r.Task = new(TaskRun)
			ok = s.object(func(key string) bool {
				t := r.Task
				switch key {
				case "deliverable":
					t.Deliverable, ok = s.str()
				case "description":
					t.Description, ok = s.str()
				case "schema":
					t.Schema, ok = s.raw()
				case "validator":
					t.Validator, ok = s.str()
				case "max_pokes":
					t.MaxPokes, ok = s.int()
				default:
					return false
				}
				return ok
			})
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) usage(u *Usage) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "prompt_tokens":
			u.PromptTokens, ok = s.int64()
		case "completion_tokens":
			u.CompletionTokens, ok = s.int64()
		case "total_tokens":
			u.TotalTokens, ok = s.int64()
		case "cached_tokens":
			u.CachedTokens, ok = s.int64()
		case "cache_write_tokens":
			u.CacheWriteTokens, ok = s.int64()
		case "reasoning_tokens":
			u.ReasoningTokens, ok = s.int64()
		case "cost":
			u.Cost, ok = s.float()
		case "is_byok":
			var b bool
			b, ok = s.bool()
			u.IsBYOK = &b
		case "upstream_cost":
			u.UpstreamCost, ok = s.float()
		case "cost_unknown":
			u.CostUnknown, ok = s.bool()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) step(st *Step) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "response_id":
			st.ResponseID, ok = s.str()
		case "next_response_id":
			st.NextResponseID, ok = s.str()
		case "index":
			st.Index, ok = s.int()
		case "inputs":
			st.Inputs, ok = s.strings()
		case "text":
			st.Text, ok = s.str()
		case "reasoning":
			st.Reasoning, ok = s.str()
		case "tool_calls":
			st.ToolCalls = []ToolCall{}
			ok = s.array(func() bool {
				var c ToolCall
				var ok bool
				if !s.object(func(key string) bool {
					switch key {
					case "id":
						c.ID, ok = s.str()
					case "name":
						c.Name, ok = s.str()
					case "arguments":
						c.Arguments, ok = s.str()
					default:
						return false
					}
					return ok
				}) {
					return false
				}
				st.ToolCalls = append(st.ToolCalls, c)
				return true
			})
		case "finish_reason":
			st.FinishReason, ok = s.str()
		case "model":
			st.Model, ok = s.str()
		case "generation_id":
			st.GenerationID, ok = s.str()
		case "usage":
			ok = s.usage(&st.Usage)
		case "partial":
			st.Partial, ok = s.bool()
		case "raw":
			st.Raw, ok = s.raw()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) toolStart(t *ToolStart) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "call_id":
			t.CallID, ok = s.str()
		case "name":
			t.Name, ok = s.str()
		case "effect":
			t.Effect, ok = s.str()
		case "idempotent":
			t.Idempotent, ok = s.bool()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) toolJournal(j *ToolJournal) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "call_id":
			j.CallID, ok = s.str()
		case "name":
			j.Name, ok = s.str()
		case "source":
			j.Source, ok = s.str()
		case "at":
			j.At, ok = s.int()
		case "entries":
			j.Entries = []JournalEntry{}
			ok = s.array(func() bool {
				var x JournalEntry
				var ok bool
				if !s.object(func(key string) bool {
					switch key {
					case "op":
						x.Op, ok = s.str()
					case "request":
						x.Request, ok = s.str()
					case "what":
						x.What, ok = s.str()
					case "key":
						x.Key, ok = s.str()
					case "answer":
						x.Answer, ok = s.bytes()
					default:
						return false
					}
					return ok
				}) {
					return false
				}
				j.Entries = append(j.Entries, x)
				return true
			})
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) toolResult(t *ToolResult) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "call_id":
			t.CallID, ok = s.str()
		case "name":
			t.Name, ok = s.str()
		case "output":
			t.Output, ok = s.str()
		case "output_blob":
			t.OutputBlob, ok = s.str()
		case "output_size":
			t.OutputSize, ok = s.int64()
		case "is_error":
			t.IsError, ok = s.bool()
		case "source":
			t.Source, ok = s.str()
		case "duration_ms":
			t.DurationMS, ok = s.int64()
		case "fuel":
			t.Fuel, ok = s.int64()
		case "policy_fuel":
			t.PolicyFuel, ok = s.int64()
		case "synthetic":
			t.Synthetic, ok = s.bool()
		case "traffic":
			t.Traffic = new(ToolTraffic)
			ok = s.traffic(t.Traffic)
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) traffic(t *ToolTraffic) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "http":
			t.HTTP = []HTTPExchange{}
			ok = s.array(func() bool {
				var x HTTPExchange
				if !s.httpExchange(&x) {
					return false
				}
				t.HTTP = append(t.HTTP, x)
				return true
			})
		case "kv":
			t.KV = []KVAccess{}
			ok = s.array(func() bool {
				var a KVAccess
				if !s.kvAccess(&a) {
					return false
				}
				t.KV = append(t.KV, a)
				return true
			})
		case "truncated":
			t.Truncated, ok = s.bool()
		case "dropped":
			t.Dropped, ok = s.int()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) httpExchange(x *HTTPExchange) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "seq":
			x.Seq, ok = s.int()
		case "method":
			x.Method, ok = s.str()
		case "url":
			x.URL, ok = s.str()
		case "url_digest":
			x.URLDigest, ok = s.str()
		case "request_headers":
			x.RequestHeaders, ok = s.strings()
		case "request_bytes":
			x.RequestBytes, ok = s.int64()
		case "request_digest":
			x.RequestDigest, ok = s.str()
		case "status":
			x.Status, ok = s.int()
		case "response_headers":
			x.ResponseHeaders, ok = s.strings()
		case "response_bytes":
			x.ResponseBytes, ok = s.int64()
		case "response_digest":
			x.ResponseDigest, ok = s.str()
		case "response_body":
			x.ResponseBody, ok = s.str()
		case "response_body_base64":
			x.ResponseBodyBase64, ok = s.bytes()
		case "body_omitted":
			x.BodyOmitted, ok = s.bool()
		case "error":
			x.Error, ok = s.str()
		case "denied":
			x.Denied, ok = s.bool()
		case "duration_ms":
			x.DurationMS, ok = s.int64()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) kvAccess(a *KVAccess) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "seq":
			a.Seq, ok = s.int()
		case "op":
			a.Op, ok = s.str()
		case "key":
			a.Key, ok = s.str()
		case "key_base64":
			a.KeyBase64, ok = s.bytes()
		case "found":
			a.Found, ok = s.bool()
		case "value_bytes":
			a.ValueBytes, ok = s.int64()
		case "value_digest":
			a.ValueDigest, ok = s.str()
		case "value":
			a.Value, ok = s.str()
		case "value_base64":
			a.ValueBase64, ok = s.bytes()
		case "value_omitted":
			a.ValueOmitted, ok = s.bool()
		case "error":
			a.Error, ok = s.str()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) approvalRequest(a *ApprovalRequest) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "approval_id":
			a.ApprovalID, ok = s.str()
		case "kind":
			a.Kind, ok = s.str()
		case "call_id":
			a.CallID, ok = s.str()
		case "name":
			a.Name, ok = s.str()
		case "effect":
			a.Effect, ok = s.str()
		case "input":
			a.Input, ok = s.raw()
		case "input_digest":
			a.InputDigest, ok = s.str()
		case "summary":
			a.Summary, ok = s.str()
		case "reason":
			a.Reason, ok = s.str()
		case "policy":
			a.Policy, ok = s.str()
		case "policy_source":
			a.PolicySource, ok = s.str()
		case "policy_fuel":
			a.PolicyFuel, ok = s.int64()
		case "expires_at":
			a.ExpiresAt, ok = s.time()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) approvalDecision(d *ApprovalDecision) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "approval_id":
			d.ApprovalID, ok = s.str()
		case "decision":
			d.Decision, ok = s.str()
		case "reason":
			d.Reason, ok = s.str()
		case "by":
			d.By, ok = s.str()
		case "input":
			d.Input, ok = s.raw()
		case "input_digest":
			d.InputDigest, ok = s.str()
		case "response":
			d.Response, ok = s.str()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) compaction(c *Compaction) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "summary":
			c.Summary, ok = s.str()
		case "through":
			c.Through, ok = s.str()
		case "prompt_tokens":
			c.PromptTokens, ok = s.int64()
		case "usage":
			ok = s.usage(&c.Usage)
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) runEnd(r *RunEnd) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "status":
			var st string
			st, ok = s.str()
			r.Status = RunStatus(st)
		case "reason":
			r.Reason, ok = s.str()
		case "timeout":
			r.Timeout, ok = s.str()
		case "inputs":
			r.Inputs, ok = s.strings()
		case "restarted_by":
			r.RestartedBy, ok = s.str()
		case "deliverable":
			r.Deliverable, ok = s.raw()
		case "rolled_back":
			r.RolledBack, ok = s.bool()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) retry(r *Retry) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "response_id":
			r.ResponseID, ok = s.str()
		case "attempt":
			r.Attempt, ok = s.int()
		case "reason":
			r.Reason, ok = s.str()
		case "delay_ms":
			r.DelayMS, ok = s.int64()
		default:
			return false
		}
		return ok
	})
}

func (s *scanner) fork(f *Fork) bool {
	var ok bool
	return s.object(func(key string) bool {
		switch key {
		case "source":
			f.Source, ok = s.str()
		case "at":
			f.At, ok = s.str()
		case "item":
			f.Item, ok = s.str()
		case "copied":
			f.Copied, ok = s.int()
		case "agent":
			f.Agent, ok = s.str()
		case "model":
			f.Model, ok = s.str()
		default:
			return false
		}
		return ok
	})
}

// scanner reads JSON values from b, from offset i.
type scanner struct {
	b []byte
	i int
	// shared tells that b is the caller's for good (DecodeOwned): str
	// returns strings that share its memory.
	shared bool
}

// ws skips white space.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, 0 at the end.
func (s *scanner) next() byte {
	s.ws()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// object reads an object, calling field for each key with the scanner on
// its value; field reads the value and returns false to give up. A key
// that comes twice gives up: encoding/json merges the values of a key
// that comes twice into a pointer, which field does not.
func (s *scanner) object(field func(key string) bool) bool {
	if s.next() != '{' {
		return false
	}
	s.i++
	var buf [16]string // the keys so far: objects here have a few
	seen := buf[:0]
	if s.next() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		for _, k := range seen {
			if k == key {
				return false
			}
		}
		seen = append(seen, key)
		if s.next() != ':' {
			return false
		}
		s.i++
		if !field(key) {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// key reads an object key without escapes (those give up), as a string
// that shares b's memory: it is compared, never kept.
func (s *scanner) key() (string, bool) {
	if s.next() != '"' {
		return "", false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return unsafeString(s.b[start:j]), true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
	}
	return "", false
}

// array reads an array, calling elem with the scanner on each element.
func (s *scanner) array(elem func() bool) bool {
	if s.next() != '[' {
		return false
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// strings reads an array of strings (an empty one as an empty slice, as
// encoding/json does).
func (s *scanner) strings() ([]string, bool) {
	out := []string{}
	ok := s.array(func() bool {
		v, ok := s.str()
		out = append(out, v)
		return ok
	})
	return out, ok
}

// str reads a string, unescaping it. It gives up on bytes that are not
// UTF-8 and on escaped surrogates, which encoding/json replaces rather
// than refuses.
func (s *scanner) str() (string, bool) {
	if s.next() != '"' {
		return "", false
	}
	start := s.i + 1
	j := start
	var high byte // the bits of every byte: ≥ 0x80 when one is not ASCII
	for ; j < len(s.b); j++ {
		c := s.b[j]
		if plain[c] {
			high |= c
			continue
		}
		if c == '"' {
			span := s.b[start:j]
			if high >= 0x80 && !utf8.Valid(span) {
				return "", false
			}
			s.i = j + 1
			if s.shared {
				return unsafeString(span), true
			}
			return string(span), true
		}
		break // an escape, or a control character
	}
	// The slow way: escapes or multi-byte characters. What came before
	// the escape is checked as the whole string would have been.
	if high >= 0x80 && !utf8.Valid(s.b[start:j]) {
		return "", false
	}
	buf := make([]byte, 0, j-start+16)
	buf = append(buf, s.b[start:j]...)
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			return string(buf), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if j+1 >= len(s.b) {
				return "", false
			}
			switch e := s.b[j+1]; e {
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
				if j+6 > len(s.b) {
					return "", false
				}
				r, err := strconv.ParseUint(string(s.b[j+2:j+6]), 16, 32)
				if err != nil || utf16.IsSurrogate(rune(r)) {
					return "", false
				}
				buf, j = utf8.AppendRune(buf, rune(r)), j+6
			default:
				return "", false
			}
		case c < 0x80:
			buf, j = append(buf, c), j+1
		default:
			r, n := utf8.DecodeRune(s.b[j:])
			if r == utf8.RuneError && n <= 1 {
				return "", false
			}
			buf, j = append(buf, s.b[j:j+n]...), j+n
		}
	}
	return "", false
}

// plain marks the bytes a string holds as they are: not the quote, the
// backslash or a control character.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// number returns the literal of a JSON number.
func (s *scanner) number() ([]byte, bool) {
	s.ws()
	start := s.i
	j := start
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == digits || (s.b[digits] == '0' && j-digits > 1) {
		return nil, false
	}
	if j < len(s.b) && s.b[j] == '.' {
		j++
		frac := j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		if j == frac {
			return nil, false
		}
	}
	if j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		exp := j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		if j == exp {
			return nil, false
		}
	}
	s.i = j
	return s.b[start:j], true
}

// int64 reads an integer (a number with a fraction or an exponent gives
// up, as it fails encoding/json).
func (s *scanner) int64() (int64, bool) {
	lit, ok := s.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(unsafeString(lit), 10, 64)
	return v, err == nil
}

func (s *scanner) int() (int, bool) {
	v, ok := s.int64()
	return int(v), ok
}

func (s *scanner) float() (float64, bool) {
	lit, ok := s.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(unsafeString(lit), 64)
	return v, err == nil
}

func (s *scanner) bool() (bool, bool) {
	s.ws()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, true
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// time reads a time as encoding/json does: through time.Time's own
// UnmarshalJSON.
func (s *scanner) time() (time.Time, bool) {
	s.ws()
	start := s.i
	if _, ok := s.str(); !ok {
		return time.Time{}, false
	}
	var t time.Time
	if err := t.UnmarshalJSON(s.b[start:s.i]); err != nil {
		return time.Time{}, false
	}
	return t, true
}

// bytes reads base64 bytes, as encoding/json decodes a []byte.
func (s *scanner) bytes() ([]byte, bool) {
	v, ok := s.str()
	if !ok {
		return nil, false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
	n, err := base64.StdEncoding.Decode(b, []byte(v))
	if err != nil {
		return nil, false
	}
	return b[:n], true
}

// raw reads any JSON value and returns a copy of its text, as
// json.RawMessage holds it.
func (s *scanner) raw() (json.RawMessage, bool) {
	s.ws()
	start := s.i
	if !s.skip(0) {
		return nil, false
	}
	return append(json.RawMessage(nil), s.b[start:s.i]...), true
}

// maxDepth bounds the nesting skip follows; deeper values give up.
const maxDepth = 100

// skip reads any JSON value, checking it.
func (s *scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch s.next() {
	case '{':
		s.i++
		if s.next() == '}' {
			s.i++
			return true
		}
		for {
			if _, ok := s.str(); !ok {
				return false
			}
			if s.next() != ':' {
				return false
			}
			s.i++
			if !s.skip(depth + 1) {
				return false
			}
			switch s.next() {
			case ',':
				s.i++
			case '}':
				s.i++
				return true
			default:
				return false
			}
		}
	case '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		_, ok := s.str()
		return ok
	case 't', 'f':
		_, ok := s.bool()
		return ok
	case 'n':
		if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
			s.i += 4
			return true
		}
		return false
	default:
		_, ok := s.number()
		return ok
	}
}

// unsafeString returns b as a string without copying it: for keys and
// number literals that are read on the spot and never kept, so that
// reading them allocates nothing.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
