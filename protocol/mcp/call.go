package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The kinds of a failed call, in a tool error's text ("[kind] …") and its
// _meta ([MetaError]).
const (
	KindTimeout          = "timeout"           // interrupted at its deadline
	KindTrap             = "trap"              // the plugin trapped (unreachable, out of bounds, abort, stack overflow)
	KindOutOfFuel        = "out_of_fuel"       // the plugin used all the fuel of a call
	KindOutOfMemory      = "out_of_memory"     // the plugin hit its memory limit
	KindExited           = "exited"            // the plugin called exit
	KindOutputTooLarge   = "output_too_large"  // the output passed the sandbox's bound
	KindMalformedOutput  = "malformed_output"  // the plugin answered something the ABI does not allow
	KindToolError        = "tool_error"        // the plugin answered an error of its own
	KindInvalidInput     = "invalid_input"     // the arguments do not match the schema (the plugin did not run)
	KindInputTooLarge    = "input_too_large"   // the arguments passed the sandbox's bound (did not run)
	KindBusy             = "busy"              // no room in the sandbox in time (did not run; retry)
	KindUnavailable      = "unavailable"       // the tool's plugin was unloaded (did not run)
	KindCancelled        = "cancelled"         // the client cancelled the call
	KindQuarantined      = "quarantined"       // the plugin failed too often and is quarantined (did not run)
	KindDenied           = "denied"            // the policy denied the call (did not run)
	KindApprovalRequired = "approval_required" // the call needs approval and the client cannot ask (did not run)
	KindNotApproved      = "not_approved"      // the person asked did not approve (did not run)
	KindError            = "error"             // anything else
)

// kindOf classifies a failed call.
func kindOf(err error) string {
	var pe *plugins.PluginError
	switch {
	case errors.Is(err, plugins.ErrTimeout):
		return KindTimeout
	case errors.Is(err, plugins.ErrOutOfFuel):
		return KindOutOfFuel
	case errors.Is(err, plugins.ErrOutOfMemory):
		return KindOutOfMemory
	case errors.Is(err, plugins.ErrTrap):
		return KindTrap
	case errors.Is(err, plugins.ErrExited):
		return KindExited
	case errors.Is(err, plugins.ErrOutputTooLarge):
		return KindOutputTooLarge
	case errors.Is(err, plugins.ErrMalformedOutput):
		return KindMalformedOutput
	case errors.Is(err, plugins.ErrInvalidInput):
		return KindInvalidInput
	case errors.Is(err, plugins.ErrInputTooLarge):
		return KindInputTooLarge
	case errors.Is(err, plugins.ErrToolFailed):
		return KindToolError
	case errors.Is(err, plugins.ErrClosed):
		return KindUnavailable
	case errors.Is(err, plugins.ErrQuarantined):
		return KindQuarantined
	case errors.As(err, &pe) && pe.Retryable():
		return KindBusy
	case errors.Is(err, context.Canceled):
		return KindCancelled
	}
	return KindError
}

// toolError is a tool error result: the model (and the person) read the
// text, programs the kind in _meta.
func toolError(kind, module, format string, args ...any) *sdk.CallToolResult {
	meta := sdk.Meta{MetaError: kind}
	if module != "" {
		meta[MetaModule] = module
	}
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: "[" + kind + "] " + fmt.Sprintf(format, args...)}},
		Meta:    meta,
	}
}

// handler is the MCP handler of the tool name: it resolves the tool in the
// registry at each call (so a call runs on the version served when it
// starts, and finishes on it whatever is swapped meanwhile), asks the
// policy, and runs it.
func (s *Server) handler(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (res *sdk.CallToolResult, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("mcp: a tool call panicked", "tool", name, "panic", p)
				res, err = toolError(KindError, "", "the server failed to run %s: %v", name, p), nil
			}
		}()
		tool, ok := s.tool(name)
		if !ok {
			return toolError(KindUnavailable, "", "%s is no longer served: its plugin was unloaded", name), nil
		}
		spec := tool.Spec()
		input := json.RawMessage(bytes.TrimSpace(req.Params.Arguments))
		if len(input) == 0 || string(input) == "null" {
			input = json.RawMessage("{}")
		}
		c := caller{session: sessionOf(req), agent: agentOf(req)}
		if refused := s.authorize(ctx, req, spec, input, c); refused != nil {
			return refused, nil
		}
		out, err := tool.Call(ctx, host.ToolCall{ID: newCallID(), SessionID: c.session, Name: name, Input: input})
		if err != nil {
			kind := kindOf(err)
			s.log.Info("mcp: tool call failed", "tool", name, "kind", kind, "agent", c.agent, "session", c.session, "err", err)
			return toolError(kind, out.Source, "%v", err), nil
		}
		return &sdk.CallToolResult{
			Content: []sdk.Content{&sdk.TextContent{Text: out.Output}},
			Meta:    sdk.Meta{MetaModule: out.Source},
		}, nil
	}
}

// caller is who calls: the MCP session and the client's name.
type caller struct {
	session, agent string
}

// sessionOf is the call's session id: the MCP session's (streamable HTTP),
// or "stdio".
func sessionOf(req *sdk.CallToolRequest) string {
	if req.Session != nil {
		if id := req.Session.ID(); id != "" {
			return id
		}
	}
	return "stdio"
}

// agentOf is the calling agent: the client's name from the handshake.
func agentOf(req *sdk.CallToolRequest) string {
	if info := req.ClientInfo(); info != nil {
		return info.Name
	}
	return ""
}

// newCallID mints a call id (the plugin's idempotency key): MCP has no id
// of its own that survives a retry, so every call is a new one.
func newCallID() string {
	var b [12]byte
	rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}
