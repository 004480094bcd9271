package a2a

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/agentichost/agentic/ledger"
)

// The params of each method, as the wire has them: read strictly (a field
// the specification does not define is an error naming it), then turned
// into the a2a module's types.

// wireMessage is a Message as the wire has it.
type wireMessage struct {
	Kind             string            `json:"kind"`
	MessageID        string            `json:"messageId"`
	ContextID        string            `json:"contextId,omitempty"`
	TaskID           string            `json:"taskId,omitempty"`
	Role             string            `json:"role"`
	Parts            []json.RawMessage `json:"parts"`
	Metadata         map[string]any    `json:"metadata,omitempty"`
	Extensions       []string          `json:"extensions,omitempty"`
	ReferenceTaskIDs []string          `json:"referenceTaskIds,omitempty"`
}

// wirePart is a Part as the wire has it: its fields are those of its kind.
type wirePart struct {
	Kind     string          `json:"kind"`
	Text     *string         `json:"text,omitempty"`
	File     *wireFile       `json:"file,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
}

type wireFile struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Bytes    string `json:"bytes,omitempty"`
	URI      string `json:"uri,omitempty"`
}

type wireSendParams struct {
	Message       *wireMessage           `json:"message"`
	Configuration *a2a.MessageSendConfig `json:"configuration,omitempty"`
	Metadata      map[string]any         `json:"metadata,omitempty"`
}

// maxIDBytes bounds the ids a client names (messageId, contextId, taskId).
const maxIDBytes = 255

// DecodeSend reads the params of message/send and message/stream: a
// message from the user with a messageId and at least one part, each a
// text, file (bytes or uri) or data part. A configuration with a
// pushNotificationConfig is refused with CodePushNotSupported.
func DecodeSend(params json.RawMessage) (*a2a.MessageSendParams, *Error) {
	var p wireSendParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.Message == nil {
		return nil, Errorf(CodeInvalidParams, `field "message" is required`)
	}
	m, err := messageOf(p.Message)
	if err != nil {
		return nil, err
	}
	if c := p.Configuration; c != nil {
		if c.PushConfig != nil {
			return nil, Errorf(CodePushNotSupported, "push notifications are not supported: follow the task with message/stream or tasks/resubscribe, or poll tasks/get")
		}
		if c.HistoryLength != nil && *c.HistoryLength < 0 {
			return nil, Errorf(CodeInvalidParams, `field "configuration.historyLength": want 0 or more`)
		}
	}
	return &a2a.MessageSendParams{Message: m, Config: p.Configuration, Metadata: p.Metadata}, nil
}

// messageOf checks a wire message and turns it into an a2a.Message.
func messageOf(w *wireMessage) (*a2a.Message, *Error) {
	switch {
	case w.Kind != "" && w.Kind != "message":
		return nil, Errorf(CodeInvalidParams, `field "message.kind" %q: want "message"`, w.Kind)
	case w.MessageID == "":
		return nil, Errorf(CodeInvalidParams, `field "message.messageId" is required`)
	case len(w.MessageID) > maxIDBytes || !utf8.ValidString(w.MessageID):
		return nil, Errorf(CodeInvalidParams, `field "message.messageId": want 1 to %d bytes of UTF-8 text`, maxIDBytes)
	case w.Role == "agent":
		return nil, Errorf(CodeInvalidParams, `field "message.role" "agent": a client sends the user's messages; want "user"`)
	case w.Role != "user":
		return nil, Errorf(CodeInvalidParams, `field "message.role" %q: want "user"`, w.Role)
	case len(w.Parts) == 0:
		return nil, Errorf(CodeInvalidParams, `field "message.parts" is empty: want at least one text, file or data part`)
	case len(w.ContextID) > maxIDBytes, len(w.TaskID) > maxIDBytes:
		return nil, Errorf(CodeInvalidParams, `fields "message.contextId" and "message.taskId": want at most %d bytes`, maxIDBytes)
	}
	m := &a2a.Message{ID: w.MessageID, ContextID: w.ContextID, TaskID: a2a.TaskID(w.TaskID), Role: a2a.MessageRoleUser,
		Metadata: w.Metadata, Extensions: w.Extensions}
	for _, id := range w.ReferenceTaskIDs {
		m.ReferenceTasks = append(m.ReferenceTasks, a2a.TaskID(id))
	}
	for i, raw := range w.Parts {
		part, err := partOf(raw)
		if err != nil {
			return nil, Errorf(CodeInvalidParams, "message.parts[%d]: %s", i, err)
		}
		m.Parts = append(m.Parts, part)
	}
	return m, nil
}

// partOf reads one part strictly.
func partOf(raw json.RawMessage) (a2a.Part, error) {
	var w wirePart
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%s", fieldError(err))
	}
	switch w.Kind {
	case "text":
		if w.Text == nil || w.File != nil || w.Data != nil {
			return nil, fmt.Errorf(`a text part has "text" alone`)
		}
		return a2a.TextPart{Text: *w.Text, Metadata: w.Metadata}, nil
	case "file":
		f := w.File
		switch {
		case f == nil || w.Text != nil || w.Data != nil:
			return nil, fmt.Errorf(`a file part has "file" alone`)
		case (f.Bytes == "") == (f.URI == ""):
			return nil, fmt.Errorf(`field "file": want exactly one of "bytes" (base64) and "uri"`)
		case f.Bytes != "":
			if _, err := base64.StdEncoding.DecodeString(f.Bytes); err != nil {
				return nil, fmt.Errorf(`field "file.bytes": not base64: %v`, err)
			}
			return a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: f.Name, MimeType: f.MimeType}, Bytes: f.Bytes}, Metadata: w.Metadata}, nil
		}
		if !strings.HasPrefix(f.URI, "https://") && !strings.HasPrefix(f.URI, "http://") && !strings.HasPrefix(f.URI, "data:") {
			return nil, fmt.Errorf(`field "file.uri" %q: want an http(s) or data: URL`, f.URI)
		}
		return a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: f.Name, MimeType: f.MimeType}, URI: f.URI}, Metadata: w.Metadata}, nil
	case "data":
		if len(bytes.TrimSpace(w.Data)) == 0 || w.Text != nil || w.File != nil {
			return nil, fmt.Errorf(`a data part has "data" alone`)
		}
		var data map[string]any
		if err := json.Unmarshal(w.Data, &data); err != nil || data == nil {
			return nil, fmt.Errorf(`field "data": want a JSON object`)
		}
		return a2a.DataPart{Data: data, Metadata: w.Metadata}, nil
	case "":
		return nil, fmt.Errorf(`field "kind" is required: "text", "file" or "data"`)
	}
	return nil, fmt.Errorf(`field "kind" %q: want "text", "file" or "data"`, w.Kind)
}

// DecodeTaskQuery reads the params of tasks/get.
func DecodeTaskQuery(params json.RawMessage) (a2a.TaskQueryParams, *Error) {
	var p a2a.TaskQueryParams
	if err := decodeParams(params, &p); err != nil {
		return p, err
	}
	if err := checkTaskID(string(p.ID)); err != nil {
		return p, err
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return p, Errorf(CodeInvalidParams, `field "historyLength": want 0 or more`)
	}
	return p, nil
}

// DecodeTaskID reads the params of tasks/cancel and tasks/resubscribe.
func DecodeTaskID(params json.RawMessage) (a2a.TaskIDParams, *Error) {
	var p a2a.TaskIDParams
	if err := decodeParams(params, &p); err != nil {
		return p, err
	}
	return p, checkTaskID(string(p.ID))
}

func checkTaskID(id string) *Error {
	if id == "" {
		return Errorf(CodeInvalidParams, `field "id" is required: the task's id`)
	}
	if len(id) > maxIDBytes || !utf8.ValidString(id) {
		return Errorf(CodeInvalidParams, `field "id": want 1 to %d bytes of UTF-8 text`, maxIDBytes)
	}
	return nil
}

// Decision is a person's answer to an approval request the task waits
// on, carried by a data part {"approval_id": "apr_…", "approve": true,
// "reason": "…"} of a message on that task (with "input": {…}, an edit;
// {"approval_id": "apr_…", "response": "…"}, an answer in the tool's
// place).
type Decision struct {
	ApprovalID string
	Approve    bool
	Reason     string
	// Input, with Approve, runs the call with this input (a JSON object)
	// instead of the model's: an edit.
	Input json.RawMessage
	// Response answers the call in the tool's place; Approve is then
	// false.
	Response string
}

// Content is what a user message carries for the host: its text (the
// text parts joined by newlines), its file parts as ledger parts, and the
// approval decisions among its data parts.
type Content struct {
	Text      string
	Parts     []ledger.Part
	Decisions []Decision
}

// ContentOf reads a user message. A data part is a decision when it has
// "approval_id"; it must then have "approve" (true or false) or
// "response" (a string answering the call in the tool's place), and may
// have "reason" (a string) and, with "approve": true, "input" (an object
// the call runs with instead of the model's), and nothing else. Other data parts are sent
// to the model as JSON text. A message that decides carries decisions
// only: text or files beside them are refused, so that nothing is read
// two ways. File bytes become the ledger part of their MIME type (image,
// audio, or file); a file by URI keeps its URL.
func ContentOf(m *a2a.Message) (Content, *Error) {
	var c Content
	var texts []string
	for i, p := range m.Parts {
		switch p := p.(type) {
		case a2a.TextPart:
			texts = append(texts, p.Text)
		case a2a.DataPart:
			if _, ok := p.Data["approval_id"]; ok {
				d, err := decisionOf(p.Data)
				if err != nil {
					return Content{}, Errorf(CodeInvalidParams, "message.parts[%d]: %s", i, err)
				}
				c.Decisions = append(c.Decisions, d)
				continue
			}
			b, _ := json.Marshal(p.Data)
			texts = append(texts, string(b))
		case a2a.FilePart:
			c.Parts = append(c.Parts, filePartOf(p))
		}
	}
	if len(c.Decisions) > 0 && (len(texts) > 0 || len(c.Parts) > 0) {
		return Content{}, Errorf(CodeInvalidParams, "message.parts: a message that decides approval requests carries the decisions alone (data parts with approval_id and approve); send text in a message of its own")
	}
	c.Text = strings.Join(texts, "\n")
	if len(c.Decisions) == 0 && strings.TrimSpace(c.Text) == "" && len(c.Parts) == 0 {
		return Content{}, Errorf(CodeInvalidParams, "message.parts: the message is empty: want some text, a file or data")
	}
	return c, nil
}

// decisionOf reads a decision's data part.
func decisionOf(data map[string]any) (Decision, error) {
	var d Decision
	id, ok := data["approval_id"].(string)
	if !ok || id == "" {
		return d, fmt.Errorf(`field "approval_id": want the approval request's id, a string`)
	}
	d.ApprovalID = id
	if r, has := data["response"]; has {
		text, ok := r.(string)
		if !ok || strings.TrimSpace(text) == "" {
			return d, fmt.Errorf(`field "response": want the text that answers the call in the tool's place`)
		}
		if _, both := data["approve"]; both {
			return d, fmt.Errorf(`fields "response" and "approve": a response answers the call in the tool's place; give one of them`)
		}
		d.Response = text
	} else {
		approve, ok := data["approve"].(bool)
		if !ok {
			return d, fmt.Errorf(`field "approve" is required: true approves the call (with "input": edited), false denies it; or "response" answers it`)
		}
		d.Approve = approve
	}
	for k, v := range data {
		switch k {
		case "approval_id", "approve", "response":
		case "reason":
			r, ok := v.(string)
			if !ok {
				return d, fmt.Errorf(`field "reason": want a string`)
			}
			d.Reason = r
		case "input":
			obj, ok := v.(map[string]any)
			if !ok || !d.Approve {
				return d, fmt.Errorf(`field "input": want an object, with "approve": true (the call runs with it)`)
			}
			d.Input, _ = json.Marshal(obj)
		default:
			return d, fmt.Errorf(`unknown field %q in a decision: want approval_id, approve or response, reason and input`, k)
		}
	}
	return d, nil
}

// filePartOf turns a file part into a ledger part.
func filePartOf(p a2a.FilePart) ledger.Part {
	var out ledger.Part
	var mime string
	switch f := p.File.(type) {
	case a2a.FileBytes:
		data, _ := base64.StdEncoding.DecodeString(f.Bytes) // checked when read
		out = ledger.Part{Data: data, Name: f.Name}
		mime = f.MimeType
	case a2a.FileURI:
		out = ledger.Part{URL: f.URI, Name: f.Name}
		mime = f.MimeType
	}
	if mime == "" && out.Data != nil {
		mime = "application/octet-stream"
	}
	out.MIME = mime
	switch {
	case strings.HasPrefix(mime, "image/"):
		out.Type = ledger.PartImage
	case strings.HasPrefix(mime, "audio/") && out.Data != nil:
		out.Type = ledger.PartAudio
	default:
		out.Type = ledger.PartFile
	}
	if out.Type != ledger.PartFile {
		out.Name = ""
	}
	return out
}
