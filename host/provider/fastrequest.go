package provider

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// encodeRequest writes the streamed request's body for r without
// reflection, and reports whether it could: the body openai-go would
// marshal from [Client.buildParams] with "stream": true, member for member
// (TestRequestEncodersAgree and FuzzRequestEncoders pin it). It takes the
// requests a run sends — text messages, tool calls and results, tools,
// max tokens, temperature — and leaves to openai-go a request with Extra
// fields, a media part, or anything buildParams would refuse, so that
// openai-go builds it or buildParams reports why not.
func (c *Client) encodeRequest(r model.Request) ([]byte, bool) {
	if len(r.Extra) > 0 || r.MaxTokens < 0 || strings.TrimSpace(r.Model) == "" {
		return nil, false
	}
	if r.Temperature != nil && !validFloat(*r.Temperature) {
		return nil, false
	}
	size := 256 + len(r.Model) + len(r.System)
	for i := range r.Messages {
		m := &r.Messages[i]
		size += 64 + len(m.ToolCallID)
		for j := range m.Parts {
			size += len(m.Parts[j].Text) + 8
		}
		for j := range m.ToolCalls {
			size += 64 + len(m.ToolCalls[j].ID) + len(m.ToolCalls[j].Name) + len(m.ToolCalls[j].Arguments)
		}
	}
	for i := range r.Tools {
		size += 64 + len(r.Tools[i].Name) + len(r.Tools[i].Description) + len(r.Tools[i].Parameters)
	}
	b := make([]byte, 0, size+size/8)
	b = append(b, `{"messages":[`...)
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if r.System != "" {
		sep()
		b = append(b, `{"content":`...)
		b = appendJSONString(b, r.System)
		b = append(b, `,"role":"system"}`...)
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		for j := range m.Parts {
			if m.Parts[j].Type != ledger.PartText {
				return nil, false // media, or a part buildParams refuses
			}
		}
		sep()
		switch m.Role {
		case ledger.RoleSystem:
			b = append(b, `{"content":`...)
			b = appendJSONString(b, ledger.TextOf(m.Parts))
			b = append(b, `,"role":"system"}`...)
		case ledger.RoleUser:
			// One text part (or none) is sent as a string, more as parts,
			// as convertUser does.
			b = append(b, `{"content":`...)
			if len(m.Parts) <= 1 {
				b = appendJSONString(b, ledger.TextOf(m.Parts))
			} else {
				b = append(b, '[')
				for k := range m.Parts {
					if k > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"text":`...)
					b = appendJSONString(b, m.Parts[k].Text)
					b = append(b, `,"type":"text"}`...)
				}
				b = append(b, ']')
			}
			b = append(b, `,"role":"user"}`...)
		case ledger.RoleAssistant:
			b = append(b, '{')
			text := ledger.TextOf(m.Parts)
			if text != "" || len(m.ToolCalls) == 0 {
				b = append(b, `"content":`...)
				b = appendJSONString(b, text)
				b = append(b, ',')
			}
			b = append(b, `"role":"assistant"`...)
			if len(m.ToolCalls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for k, tc := range m.ToolCalls {
					if tc.ID == "" || tc.Name == "" {
						return nil, false
					}
					if k > 0 {
						b = append(b, ',')
					}
					args := tc.Arguments
					if args == "" {
						args = "{}"
					}
					b = append(b, `{"id":`...)
					b = appendJSONString(b, tc.ID)
					b = append(b, `,"function":{"arguments":`...)
					b = appendJSONString(b, args)
					b = append(b, `,"name":`...)
					b = appendJSONString(b, tc.Name)
					b = append(b, `},"type":"function"}`...)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		case ledger.RoleTool:
			if m.ToolCallID == "" {
				return nil, false
			}
			b = append(b, `{"content":`...)
			b = appendJSONString(b, ledger.TextOf(m.Parts))
			b = append(b, `,"role":"tool","tool_call_id":`...)
			b = appendJSONString(b, m.ToolCallID)
			b = append(b, '}')
		default:
			return nil, false
		}
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, r.Model)
	switch {
	case r.MaxTokens > 0 && c.openAIHost:
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	case r.MaxTokens > 0:
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	}
	b = append(b, `,"stream_options":{"include_usage":true}`...)
	if r.Temperature != nil {
		b = append(b, `,"temperature":`...)
		b = appendFloat(b, *r.Temperature)
	}
	if len(r.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range r.Tools {
			if t.Name == "" {
				return nil, false
			}
			schema := bytes.TrimSpace(t.Parameters)
			if len(schema) == 0 {
				schema = []byte(`{"type":"object"}`)
			}
			if schema[0] != '{' || !json.Valid(schema) {
				return nil, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"function":{"name":`...)
			b = appendJSONString(b, t.Name)
			if t.Description != "" {
				b = append(b, `,"description":`...)
				b = appendJSONString(b, t.Description)
			}
			b = append(b, `,"parameters":`...)
			b = append(b, schema...)
			b = append(b, `},"type":"function"}`...)
		}
		b = append(b, ']')
	}
	if c.usage {
		b = append(b, `,"usage":{"include":true}`...)
	}
	b = append(b, `,"stream":true}`...)
	return b, true
}

// validFloat reports whether f has a JSON form (encoding/json refuses NaN
// and the infinities).
func validFloat(f float64) bool {
	return f == f && f <= 1.7976931348623157e308 && f >= -1.7976931348623157e308
}

// appendFloat writes f as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	abs := f
	if abs < 0 {
		abs = -abs
	}
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONString writes s as a JSON string, as encoding/json does
// without HTML escaping: invalid UTF-8 becomes U+FFFD, and U+2028 and
// U+2029 are escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
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
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
