package fakemodel

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DefaultReply is the reply used when no reply is scripted and
// Options.Respond is nil: a deterministic imitation of an agent model.
//
//  1. If the conversation ends with tool results (role "tool"), it answers
//     "The <tool> tool returned: <content>", one line per trailing result;
//     the tool name is found from the assistant tool call with that id.
//  2. Else, if the last user message names offered tools (case-insensitive,
//     as a whole word; "get account" also names get_account), it says "Let me
//     use <tools>." and calls each named tool, in order of mention, with
//     arguments derived from the tool's JSON Schema: each required property
//     (every property when none is required) gets a value from a
//     "<name>: value", "<name>=value" or "<name> is value" pattern in the
//     message (also "<name> 42" when the value contains a digit or is
//     quoted; the name may be spelled with spaces for underscores), else the
//     schema's default, const, first enum value or first example, else a
//     placeholder: "example" for strings, 1 for numbers, true for booleans,
//     {} for objects (filled recursively with required properties) and []
//     for arrays. The finish reason is "tool_calls".
//  3. Else it echoes: "You said: <last user text>", followed, when the
//     message has attachments, by " [attached: …]" describing each
//     (type and size, a file's name).
//
// Before those, it remembers, so that a conversation can be seen to
// survive compaction: asked to write a compaction's note (the host's
// "[compaction]" system prompt), it writes "NOTE: The user's X is Y." for
// every "my X is Y" it reads; asked "what is my X?", it answers "Your X is
// Y." from the latest such statement (a note's included), or "I do not
// know your X.".
func DefaultReply(req Request) Reply {
	msgs := req.Messages
	if len(msgs) > 0 && msgs[0].Role == "system" && strings.HasPrefix(msgs[0].Text, "[compaction]") {
		return Reply{Text: compactionNote(msgs)}
	}
	if m := recallRE.FindStringSubmatch(lastUserText(msgs)); m != nil {
		return Reply{Text: recall(msgs, strings.ToLower(m[1]))}
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == "tool" {
		start := n - 1
		for start > 0 && msgs[start-1].Role == "tool" {
			start--
		}
		var lines []string
		for _, m := range msgs[start:] {
			name := toolNameFor(msgs[:start], m.ToolCallID)
			if name == "" {
				lines = append(lines, "The tool returned: "+m.Text)
			} else {
				lines = append(lines, "The "+name+" tool returned: "+m.Text)
			}
		}
		return Reply{Text: strings.Join(lines, "\n")}
	}
	user := lastUserText(msgs)
	if calls := mentionedTools(req.Tools, user); len(calls) > 0 {
		names := make([]string, len(calls))
		for i, t := range calls {
			names[i] = t.Name
		}
		reply := Reply{Text: "Let me use " + joinAnd(names) + ".", FinishReason: "tool_calls"}
		for _, t := range calls {
			reply.ToolCalls = append(reply.ToolCalls, ToolCall{Name: t.Name, Arguments: schemaArguments(t.Parameters, user)})
		}
		return reply
	}
	if n := len(msgs); n > 0 {
		if att := attachments(lastUser(msgs)); att != "" {
			return Reply{Text: "You said: " + user + " [attached: " + att + "]"}
		}
	}
	return Reply{Text: "You said: " + user}
}

// lastUser returns the last user message.
func lastUser(msgs []Message) Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i]
		}
	}
	return Message{}
}

// attachments describes a message's parts other than text — "image/png,
// 67 bytes; file report.pdf, application/pdf, 2048 bytes" — so that a test
// (or a demo) sees what reached the model; "" when there are none.
func attachments(m Message) string {
	var out []string
	for _, p := range m.Parts {
		switch p.Type {
		case "image_url":
			out = append(out, describeDataURL(p.ImageURL))
		case "input_audio":
			n, _ := base64.StdEncoding.DecodeString(p.AudioData)
			out = append(out, fmt.Sprintf("audio/%s, %d bytes", p.AudioFormat, len(n)))
		case "file":
			var f struct {
				File struct {
					Filename string `json:"filename"`
					FileData string `json:"file_data"`
				} `json:"file"`
			}
			json.Unmarshal(p.Raw, &f)
			out = append(out, "file "+f.File.Filename+", "+describeDataURL(f.File.FileData))
		}
	}
	return strings.Join(out, "; ")
}

// describeDataURL says a data URL's type and size ("image/png, 67
// bytes"), or gives a plain URL.
func describeDataURL(u string) string {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return u
	}
	meta, data, _ := strings.Cut(rest, ",")
	typ, _, _ := strings.Cut(meta, ";")
	n, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return typ + ", undecodable"
	}
	return fmt.Sprintf("%s, %d bytes", typ, len(n))
}

// toolNameFor finds the name of the tool call with the given id.
func toolNameFor(msgs []Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID == id && id != "" {
				return tc.Name
			}
		}
	}
	return ""
}

func lastUserText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Text
		}
	}
	return ""
}

func joinAnd(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// nameVariants are the spellings of an identifier a user might type.
func nameVariants(name string) []string {
	v := []string{name}
	for _, alt := range []string{strings.ReplaceAll(name, "_", " "), strings.ReplaceAll(name, "_", "-")} {
		if alt != name {
			v = append(v, alt)
		}
	}
	return v
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// wordIndex returns the first index of word in text as a whole word
// (case-insensitive), or -1.
func wordIndex(text, word string) int {
	lt, lw := strings.ToLower(text), strings.ToLower(word)
	if lw == "" {
		return -1
	}
	for off := 0; ; {
		i := strings.Index(lt[off:], lw)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(lw)
		if (i == 0 || !isWordByte(lt[i-1])) && (end == len(lt) || !isWordByte(lt[end])) {
			return i
		}
		off = i + 1
	}
}

// mentionedTools returns the tools named in text, in order of first mention.
func mentionedTools(tools []Tool, text string) []Tool {
	type hit struct {
		at   int
		tool Tool
	}
	var hits []hit
	for _, t := range tools {
		best := -1
		for _, v := range nameVariants(t.Name) {
			if i := wordIndex(text, v); i >= 0 && (best < 0 || i < best) {
				best = i
			}
		}
		if best >= 0 {
			hits = append(hits, hit{best, t})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
	out := make([]Tool, len(hits))
	for i, h := range hits {
		out[i] = h.tool
	}
	return out
}

// schema is the subset of JSON Schema used to invent arguments.
type schema struct {
	Type       json.RawMessage    `json:"type"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
	Default    json.RawMessage    `json:"default"`
	Const      json.RawMessage    `json:"const"`
	Enum       []json.RawMessage  `json:"enum"`
	Examples   []json.RawMessage  `json:"examples"`
}

// typeName returns the schema's (first non-null) type.
func (s *schema) typeName() string {
	if len(s.Type) == 0 {
		return ""
	}
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(s.Type, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	}
	return ""
}

// schemaArguments builds a JSON argument object for a tool's parameters.
func schemaArguments(params json.RawMessage, text string) string {
	var s schema
	if len(params) == 0 || json.Unmarshal(params, &s) != nil {
		return "{}"
	}
	b, err := json.Marshal(objectValue(&s, text, 0))
	if err != nil {
		return "{}"
	}
	return string(b)
}

func objectValue(s *schema, text string, depth int) map[string]any {
	obj := map[string]any{}
	if depth > 4 {
		return obj
	}
	names := s.Required
	if len(names) == 0 && depth == 0 {
		for name := range s.Properties {
			names = append(names, name)
		}
	}
	for _, name := range names {
		prop := s.Properties[name]
		if prop == nil {
			prop = &schema{}
		}
		obj[name] = propertyValue(name, prop, text, depth)
	}
	return obj
}

func propertyValue(name string, s *schema, text string, depth int) any {
	typ := s.typeName()
	if typ == "" && len(s.Properties) > 0 {
		typ = "object"
	}
	if typ == "object" {
		return objectValue(s, text, depth+1)
	}
	if typ == "array" {
		if v, ok := firstRaw(s.Default, s.Const); ok {
			return v
		}
		return []any{}
	}
	if said, ok := valueInText(text, name); ok {
		if v, ok := convert(said, typ); ok && enumAllows(s.Enum, v) {
			return v
		}
	}
	if v, ok := firstRaw(s.Default, s.Const, first(s.Enum), first(s.Examples)); ok {
		return v
	}
	switch typ {
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "null":
		return nil
	default:
		return "example"
	}
}

func first(list []json.RawMessage) json.RawMessage {
	if len(list) == 0 {
		return nil
	}
	return list[0]
}

func firstRaw(raws ...json.RawMessage) (any, bool) {
	for _, r := range raws {
		if len(r) == 0 {
			continue
		}
		var v any
		if json.Unmarshal(r, &v) == nil {
			return v, true
		}
	}
	return nil, false
}

func enumAllows(enum []json.RawMessage, v any) bool {
	if len(enum) == 0 {
		return true
	}
	want, _ := json.Marshal(v)
	for _, e := range enum {
		var ev any
		if json.Unmarshal(e, &ev) == nil {
			if got, _ := json.Marshal(ev); string(got) == string(want) {
				return true
			}
		}
	}
	return false
}

// convert turns a word from the user's text into a value of type typ.
func convert(word, typ string) (any, bool) {
	switch typ {
	case "integer":
		n, err := strconv.ParseInt(word, 10, 64)
		return n, err == nil
	case "number":
		f, err := strconv.ParseFloat(word, 64)
		return f, err == nil
	case "boolean":
		b, err := strconv.ParseBool(strings.ToLower(word))
		return b, err == nil
	default:
		return word, true
	}
}

// valueInText finds the value the user gave for a property name.
func valueInText(text, name string) (string, bool) {
	for _, v := range nameVariants(name) {
		q := regexp.QuoteMeta(v)
		// name: value / name=value / name is value
		sep := regexp.MustCompile(`(?i)(?:^|[^\w])` + q + `\s*(?:[:=]|\s+is\s+)\s*("[^"]*"|'[^']*'|[^\s,;]+)`)
		if m := sep.FindStringSubmatch(text); m != nil {
			return cleanValue(m[1]), true
		}
		// name 42 / name "quoted value"
		bare := regexp.MustCompile(`(?i)(?:^|[^\w])` + q + `\s+("[^"]*"|'[^']*'|#?[^\s,;]*\d[^\s,;]*)`)
		if m := bare.FindStringSubmatch(text); m != nil {
			return cleanValue(m[1]), true
		}
	}
	return "", false
}

func cleanValue(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	v = strings.TrimRight(v, ".!?)")
	return strings.TrimPrefix(v, "#")
}

// factRE finds "my X is Y" statements; recallRE, "what is my X?".
var (
	factRE   = regexp.MustCompile(`(?i)\bmy ([a-z][a-z ]{0,30}?) is ([^\s.,;!?]+)`)
	noteRE   = regexp.MustCompile(`(?i)\bthe user's ([a-z][a-z ]{0,30}?) is ([^\s.,;!?]+)`)
	recallRE = regexp.MustCompile(`(?i)\bwhat is my ([a-z][a-z ]{0,30}?)\s*\?`)
)

// facts returns what the messages state of the user, by name: the latest
// statement wins.
func facts(msgs []Message) (map[string]string, []string) {
	got := map[string]string{}
	var order []string
	for _, m := range msgs {
		if m.Role == "system" {
			continue
		}
		for _, re := range []*regexp.Regexp{factRE, noteRE} {
			for _, f := range re.FindAllStringSubmatch(m.Text, -1) {
				name := strings.ToLower(f[1])
				if _, seen := got[name]; !seen {
					order = append(order, name)
				}
				got[name] = f[2]
			}
		}
	}
	return got, order
}

// compactionNote is the note a compaction asks for: what the user stated.
func compactionNote(msgs []Message) string {
	got, order := facts(msgs)
	if len(order) == 0 {
		return "NOTE: nothing to remember."
	}
	var b strings.Builder
	b.WriteString("NOTE:")
	for _, name := range order {
		fmt.Fprintf(&b, " The user's %s is %s.", name, got[name])
	}
	return b.String()
}

// recall answers "what is my name?" from the conversation.
func recall(msgs []Message, name string) string {
	got, _ := facts(msgs[:len(msgs)-1])
	if v, ok := got[name]; ok {
		return "Your " + name + " is " + v + "."
	}
	return "I do not know your " + name + "."
}

// anchorCall is the anchor benchmark's request: "CALL tool {json}".
var anchorCall = regexp.MustCompile(`^CALL ([A-Za-z0-9_-]+) (\{.*\})$`)

// AnchorReply is the behaviour the anchor benchmark (a harness's CPU per
// model step, the host's beside the AI SDK's, against the same server)
// expects: "CALL tool {json}" calls that tool with exactly those
// arguments; once the conversation ends with a tool result, the answer is
// "RESULT: " and the result. Anything else is DefaultReply's.
func AnchorReply(req Request) Reply {
	msgs := req.Messages
	if n := len(msgs); n > 0 && msgs[n-1].Role == "tool" {
		return Reply{Text: "RESULT: " + msgs[n-1].Text}
	}
	if m := anchorCall.FindStringSubmatch(strings.TrimSpace(lastUserText(msgs))); m != nil && json.Valid([]byte(m[2])) {
		return Reply{ToolCalls: []ToolCall{{Name: m[1], Arguments: m[2]}}}
	}
	return DefaultReply(req)
}
