package provider

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// buildParams converts r to openai-go parameters.
func (c *Client) buildParams(r model.Request) (openai.ChatCompletionNewParams, error) {
	var p openai.ChatCompletionNewParams
	if strings.TrimSpace(r.Model) == "" {
		return p, fmt.Errorf("%w: no model", model.ErrInvalidRequest)
	}
	p.Model = shared.ChatModel(r.Model)
	if r.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(r.System))
	}
	for i, m := range r.Messages {
		msg, err := convertMessage(m)
		if err != nil {
			return p, fmt.Errorf("%w: messages[%d] (%s): %v", model.ErrInvalidRequest, i, m.Role, err)
		}
		p.Messages = append(p.Messages, msg)
	}
	for i, t := range r.Tools {
		tool, err := convertTool(t)
		if err != nil {
			return p, fmt.Errorf("%w: tools[%d] (%q): %v", model.ErrInvalidRequest, i, t.Name, err)
		}
		p.Tools = append(p.Tools, tool)
	}
	switch {
	case r.MaxTokens < 0:
		return p, fmt.Errorf("%w: MaxTokens %d is negative", model.ErrInvalidRequest, r.MaxTokens)
	case r.MaxTokens > 0 && c.openAIHost:
		// OpenAI rejects max_tokens for its reasoning models.
		p.MaxCompletionTokens = param.NewOpt(int64(r.MaxTokens))
	case r.MaxTokens > 0:
		p.MaxTokens = param.NewOpt(int64(r.MaxTokens))
	}
	if r.Temperature != nil {
		p.Temperature = param.NewOpt(*r.Temperature)
	}
	p.StreamOptions.IncludeUsage = param.NewOpt(true)

	extra := map[string]any{}
	if c.usage {
		extra["usage"] = map[string]any{"include": true}
	}
	for k, v := range r.Extra {
		extra[k] = v
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return p, nil
}

// convertMessage converts one ledger message.
func convertMessage(m ledger.Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case ledger.RoleSystem:
		text, err := textOnly(m.Parts)
		if err != nil {
			return openai.ChatCompletionMessageParamUnion{}, err
		}
		return openai.SystemMessage(text), nil
	case ledger.RoleUser:
		return convertUser(m.Parts)
	case ledger.RoleAssistant:
		text, err := textOnly(m.Parts)
		if err != nil {
			return openai.ChatCompletionMessageParamUnion{}, err
		}
		var a openai.ChatCompletionAssistantMessageParam
		if text != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(text)
		}
		for _, tc := range m.ToolCalls {
			if tc.ID == "" || tc.Name == "" {
				return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("tool call (id %q, name %q) lacks an id or a name", tc.ID, tc.Name)
			}
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case ledger.RoleTool:
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("no tool_call_id")
		}
		text, err := textOnly(m.Parts)
		if err != nil {
			return openai.ChatCompletionMessageParamUnion{}, err
		}
		return openai.ToolMessage(text, m.ToolCallID), nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

// textOnly joins text parts, refusing any other kind: only user messages
// carry media.
func textOnly(parts []ledger.Part) (string, error) {
	var b strings.Builder
	for i, p := range parts {
		if p.Type != ledger.PartText {
			return "", fmt.Errorf("parts[%d]: a %q part is allowed in user messages only", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// convertUser converts a user message's parts. A message of one text part
// is sent as a plain string, the most widely accepted form.
func convertUser(parts []ledger.Part) (openai.ChatCompletionMessageParamUnion, error) {
	if len(parts) == 0 {
		return openai.UserMessage(""), nil
	}
	if len(parts) == 1 && parts[0].Type == ledger.PartText {
		return openai.UserMessage(parts[0].Text), nil
	}
	out := make([]openai.ChatCompletionContentPartUnionParam, 0, len(parts))
	for i, p := range parts {
		cp, err := convertPart(p)
		if err != nil {
			return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("parts[%d]: %v", i, err)
		}
		out = append(out, cp)
	}
	return openai.UserMessage(out), nil
}

// convertPart converts one user content part.
func convertPart(p ledger.Part) (openai.ChatCompletionContentPartUnionParam, error) {
	switch p.Type {
	case ledger.PartText:
		return openai.TextContentPart(p.Text), nil
	case ledger.PartImage:
		u := p.URL
		if len(p.Data) > 0 {
			u = dataURL(p.MIME, p.Data)
		}
		if u == "" {
			return openai.ChatCompletionContentPartUnionParam{}, fmt.Errorf("an image part needs Data or URL")
		}
		return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: u}), nil
	case ledger.PartAudio:
		if len(p.Data) == 0 {
			return openai.ChatCompletionContentPartUnionParam{}, fmt.Errorf("an audio part needs inline Data (input_audio takes no URL)")
		}
		format, err := audioFormat(p.MIME)
		if err != nil {
			return openai.ChatCompletionContentPartUnionParam{}, err
		}
		return openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{
			Data: base64.StdEncoding.EncodeToString(p.Data), Format: format}), nil
	case ledger.PartFile:
		var f openai.ChatCompletionContentPartFileFileParam
		switch {
		case len(p.Data) > 0:
			f.FileData = param.NewOpt(dataURL(p.MIME, p.Data))
		case p.URL != "":
			f.FileData = param.NewOpt(p.URL) // OpenRouter accepts a URL here
		default:
			return openai.ChatCompletionContentPartUnionParam{}, fmt.Errorf("a file part needs Data or URL")
		}
		name := p.Name
		if name == "" {
			name = "file"
			if exts, _ := mime.ExtensionsByType(p.MIME); len(exts) > 0 {
				name += exts[0]
			}
		}
		f.Filename = param.NewOpt(name)
		return openai.FileContentPart(f), nil
	default:
		return openai.ChatCompletionContentPartUnionParam{}, fmt.Errorf("unknown part type %q", p.Type)
	}
}

// dataURL encodes data as a base64 data URL, sniffing the type when mimeType
// is empty.
func dataURL(mimeType string, data []byte) string {
	if mimeType == "" {
		mimeType = http.DetectContentType(data)
		if i := strings.IndexByte(mimeType, ';'); i >= 0 {
			mimeType = mimeType[:i]
		}
	}
	return "data:" + mimeType + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// audioFormat maps an audio media type to input_audio's format.
func audioFormat(mimeType string) (string, error) {
	mt, _, err := mime.ParseMediaType(mimeType)
	if err != nil {
		return "", fmt.Errorf("audio MIME type %q: %v", mimeType, err)
	}
	switch mt {
	case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave":
		return "wav", nil
	case "audio/mpeg", "audio/mp3", "audio/mpeg3", "audio/x-mpeg-3":
		return "mp3", nil
	}
	// Other formats (ogg, flac, aac, …) some providers accept under their
	// subtype name.
	if sub, ok := strings.CutPrefix(mt, "audio/"); ok && sub != "" {
		return strings.TrimPrefix(sub, "x-"), nil
	}
	return "", fmt.Errorf("%q is not an audio MIME type", mimeType)
}

// convertTool converts a tool spec to a function tool.
func convertTool(t model.ToolSpec) (openai.ChatCompletionToolUnionParam, error) {
	if t.Name == "" {
		return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("no name")
	}
	schema := bytes.TrimSpace(t.Parameters)
	if len(schema) == 0 {
		schema = []byte(`{"type":"object"}`)
	}
	if !json.Valid(schema) || schema[0] != '{' {
		return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("parameters are not a JSON object")
	}
	fn := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Description != "" {
		fn.Description = param.NewOpt(t.Description)
	}
	// The schema goes out as written: shared.FunctionParameters is a map,
	// and openai-go's encoder would turn a json.Number in it into a string.
	fn.SetExtraFields(map[string]any{"parameters": json.RawMessage(schema)})
	return openai.ChatCompletionFunctionTool(fn), nil
}
