package uistream

import (
	"encoding/json"
	"unicode/utf8"
)

// AppendChunk appends the JSON of ch to b: exactly the bytes json.Marshal
// writes for it (TestAppendChunkMatchesMarshal and FuzzAppendChunk pin
// them), without reflection for the chunks a stream is made of. A chunk
// with a tool's input or output or a data part's data goes through
// json.Marshal.
func AppendChunk(b []byte, ch Chunk) ([]byte, error) {
	if len(ch.Input) > 0 || len(ch.Output) > 0 || ch.Data != nil {
		j, err := json.Marshal(ch)
		return append(b, j...), err
	}
	b = append(b, `{"type":`...)
	b = appendString(b, ch.Type)
	field := func(name, v string) {
		if v != "" {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = appendString(b, v)
		}
	}
	field("messageId", ch.MessageID)
	field("id", ch.ID)
	if ch.Delta != nil {
		b = append(b, `,"delta":`...)
		b = appendString(b, *ch.Delta)
	}
	field("toolCallId", ch.ToolCallID)
	field("toolName", ch.ToolName)
	if ch.ErrorText != nil {
		b = append(b, `,"errorText":`...)
		b = appendString(b, *ch.ErrorText)
	}
	field("approvalId", ch.ApprovalID)
	if ch.Approved != nil {
		if *ch.Approved {
			b = append(b, `,"approved":true`...)
		} else {
			b = append(b, `,"approved":false`...)
		}
	}
	field("reason", ch.Reason)
	if d := ch.ApprovalDescriptor; d != nil {
		b = append(b, `,"approvalDescriptor":{`...)
		n := len(b)
		if d.Summary != "" {
			b = append(b, `"summary":`...)
			b = appendString(b, d.Summary)
		}
		if d.ExpiresAt != "" {
			if len(b) > n {
				b = append(b, ',')
			}
			b = append(b, `"expiresAt":`...)
			b = appendString(b, d.ExpiresAt)
		}
		b = append(b, '}')
	}
	field("finishReason", ch.FinishReason)
	if m := ch.MessageMetadata; m != nil {
		b = append(b, `,"messageMetadata":{"sessionId":`...)
		b = appendString(b, m.SessionID)
		b = append(b, `,"runId":`...)
		b = appendString(b, m.RunID)
		if m.TraceID != "" {
			b = append(b, `,"traceId":`...)
			b = appendString(b, m.TraceID)
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendString writes s as json.Marshal does: HTML characters, U+2028 and
// U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
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
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
