package uistream

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentichost/agentic/ledger"
)

// Message is a message of the AI SDK's UI (UIMessage); only what the host
// reads is typed.
type Message struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is a part of a UIMessage; only what the host reads is typed.
type Part struct {
	Type       string    `json:"type"`
	Text       string    `json:"text,omitempty"`
	MediaType  string    `json:"mediaType,omitempty"`
	URL        string    `json:"url,omitempty"`
	Filename   string    `json:"filename,omitempty"`
	ToolCallID string    `json:"toolCallId,omitempty"`
	State      string    `json:"state,omitempty"`
	Approval   *Approval `json:"approval,omitempty"`
}

// Approval is a tool part's approval: its request's id and, once the
// person answered (addToolApprovalResponse), the answer.
type Approval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ChatRequest is the body DefaultChatTransport sends, with the fields of
// its body option beside them.
type ChatRequest struct {
	ID        string    `json:"id"`
	Messages  []Message `json:"messages"`
	Trigger   string    `json:"trigger"`
	MessageID string    `json:"messageId,omitempty"`
	// Agent names the agent that runs a new message (the transport's
	// body option: {agent: NAME}); "" for the default.
	Agent string `json:"agent,omitempty"`
}

// Content reads a user message's content: its text parts, joined by
// newlines, and its file parts (data: URLs, or http(s) URLs for images and
// files) as ledger parts. Other parts are the client's own and are
// ignored. A message with neither text nor file is an error.
func Content(m Message) (string, []ledger.Part, error) {
	var texts []string
	var parts []ledger.Part
	for i, p := range m.Parts {
		switch p.Type {
		case "text":
			if p.Text != "" {
				texts = append(texts, p.Text)
			}
		case "file":
			part, err := file(p)
			if err != nil {
				return "", nil, fmt.Errorf("parts[%d] (file): %w", i, err)
			}
			parts = append(parts, part)
		}
	}
	if len(texts) == 0 && len(parts) == 0 {
		return "", nil, errors.New("the user's message has no text part and no file part")
	}
	return strings.Join(texts, "\n"), parts, nil
}

// file reads a FileUIPart.
func file(p Part) (ledger.Part, error) {
	kind := ledger.PartFile
	switch {
	case strings.HasPrefix(p.MediaType, "image/"):
		kind = ledger.PartImage
	case strings.HasPrefix(p.MediaType, "audio/"):
		kind = ledger.PartAudio
	}
	part := ledger.Part{Type: kind, MIME: p.MediaType, Name: p.Filename}
	if p.MediaType == "" {
		return part, errors.New("mediaType is empty")
	}
	rest, isData := strings.CutPrefix(p.URL, "data:")
	if !isData {
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return part, fmt.Errorf("url %.60q: want a data: URL or an http(s) URL", p.URL)
		}
		if kind == ledger.PartAudio {
			return part, errors.New("audio must be sent inline, as a data: URL")
		}
		part.URL = p.URL
		return part, nil
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return part, errors.New("url: a data: URL without a comma")
	}
	var err error
	if strings.HasSuffix(meta, ";base64") {
		part.Data, err = base64.StdEncoding.DecodeString(payload)
	} else {
		var s string
		s, err = url.PathUnescape(payload)
		part.Data = []byte(s)
	}
	if err != nil {
		return part, fmt.Errorf("url: the data: URL's data: %v", err)
	}
	return part, nil
}

// Answer is a person's answer to an approval request, read off an
// assistant message: the tool call it is about, and the approval.
type Answer struct {
	CallID   string
	Approval Approval
}

// Answers returns the approval requests an assistant message answers: its
// tool parts (tool-NAME or dynamic-tool) in state approval-responded with
// approval.approved set, in order.
func Answers(m Message) []Answer {
	var answers []Answer
	for _, p := range m.Parts {
		if !strings.HasPrefix(p.Type, "tool-") && p.Type != "dynamic-tool" {
			continue
		}
		if p.State == "approval-responded" && p.Approval != nil && p.Approval.Approved != nil {
			answers = append(answers, Answer{p.ToolCallID, *p.Approval})
		}
	}
	return answers
}
