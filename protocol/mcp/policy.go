package mcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The policy types are the host's (plugins' policies implement them).
type (
	// PolicyRequest is a tool call a policy decides on.
	PolicyRequest = host.PolicyRequest
	// Decision is a policy's verdict with its reason.
	Decision = host.Decision
	// Verdict is allow, require_approval or deny.
	Verdict = host.Verdict
	// Policy decides whether a tool call may run. The request's Agent is
	// the MCP client's name (clientInfo.name of its handshake), its
	// SessionID the MCP session's id ("stdio" over stdio). An error means
	// the policy could not decide: the call then requires approval.
	Policy = host.Policy
)

// The verdicts.
const (
	Allow           = host.Allow
	RequireApproval = host.RequireApproval
	Deny            = host.Deny
)

// PolicyFunc makes a function a [Policy] named name.
func PolicyFunc(name string, f func(ctx context.Context, req PolicyRequest) (Decision, error)) Policy {
	return host.PolicyFunc(name, f)
}

// ByEffect is the policy when none is named: read and write tools (which
// touch nothing beyond the host's own state) are allowed, external ones
// (which send, publish, pay) require approval.
var ByEffect Policy = PolicyFunc("by-effect", func(_ context.Context, req PolicyRequest) (Decision, error) {
	switch req.Tool.Effect {
	case host.EffectExternal:
		return Decision{Verdict: RequireApproval, Reason: "the tool changes the world outside the host", Summary: summary(req.Tool.Name, req.Input)}, nil
	default:
		return Decision{Verdict: Allow, Reason: "the tool touches only the host's own state"}, nil
	}
})

// approvalInput is the id of the approval in an input-required result.
const approvalInput = "approval"

// approvalSchema asks for nothing but the answer: accept approves.
var approvalSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// authorize asks the policy about a call; it returns nil when the call may
// run, and otherwise the result to answer instead: a denial, a refusal, or
// (to a client that fulfils input requests itself) the approval to ask.
func (s *Server) authorize(ctx context.Context, req *sdk.CallToolRequest, spec host.ToolSpec, input json.RawMessage, c caller) *sdk.CallToolResult {
	name := spec.Name
	d, err := s.policy.Decide(ctx, PolicyRequest{Tool: spec, Input: input, SessionID: c.session, Agent: c.agent})
	if err != nil {
		d = Decision{Verdict: RequireApproval, Reason: "the policy could not decide: " + err.Error(), Summary: summary(name, input)}
	}
	if d.Summary == "" {
		d.Summary = summary(name, input)
	}
	log := s.log.With("tool", name, "agent", c.agent, "session", c.session, "reason", d.Reason)
	switch d.Verdict {
	case Allow:
		return nil
	case Deny:
		log.Info("mcp: call denied by the policy")
		return toolError(KindDenied, "", "%s was denied by the policy: %s", name, orNone(d.Reason))
	case RequireApproval:
	default:
		log.Warn("mcp: the policy answered an unknown verdict; the call is denied", "verdict", d.Verdict)
		return toolError(KindDenied, "", "%s was denied: the policy answered %q", name, d.Verdict)
	}
	if s.approve[name] {
		log.Info("mcp: call approved by the operator (--approve)")
		return nil
	}
	// A retry that carries the answer (multi round-trip requests).
	if resp, ok := req.Params.InputResponses[approvalInput]; ok {
		if err := s.checkState(req.Params.RequestState, name, input); err != nil {
			log.Warn("mcp: an approval came back for another call", "err", err)
			return toolError(KindNotApproved, "", "%s was not run: %v; call it again to be asked", name, err)
		}
		return s.answered(log, name, resp)
	}
	if !canElicit(req) {
		log.Info("mcp: call needs approval and the client cannot ask")
		return toolError(KindApprovalRequired, "",
			"%s needs approval (%s), and this client cannot ask for it (it does not support MCP elicitation). "+
				"The server's operator can approve the tool for every call (agentic-host mcp --approve %s).",
			name, orNone(d.Reason), name)
	}
	params := &sdk.ElicitParams{
		Mode:            "form",
		Message:         fmt.Sprintf("Approve this call?\n\n%s\n\nWhy approval is needed: %s", d.Summary, orNone(d.Reason)),
		RequestedSchema: approvalSchema,
	}
	if multiRoundTrip(req) {
		log.Info("mcp: asking the client for approval (input request)")
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{approvalInput: params}, RequestState: s.state(name, input, time.Now())}
	}
	log.Info("mcp: asking the client for approval (elicitation)")
	res, err := req.Session.Elicit(ctx, params)
	if err != nil {
		log.Warn("mcp: asking for approval failed", "err", err)
		return toolError(KindNotApproved, "", "%s was not run: asking for approval failed: %v", name, err)
	}
	return s.answered(log, name, res)
}

// answered turns the answer to an approval request into nil (approved) or
// a refusal.
func (s *Server) answered(log *slog.Logger, name string, resp sdk.InputResponse) *sdk.CallToolResult {
	er, ok := resp.(*sdk.ElicitResult)
	if !ok {
		return toolError(KindNotApproved, "", "%s was not run: the client answered the approval request with %T", name, resp)
	}
	switch er.Action {
	case "accept":
		log.Info("mcp: call approved")
		return nil
	case "decline":
		log.Info("mcp: call declined")
		return toolError(KindNotApproved, "", "%s was not run: the user declined it", name)
	default:
		log.Info("mcp: approval dismissed", "action", er.Action)
		return toolError(KindNotApproved, "", "%s was not run: the user dismissed the approval request", name)
	}
}

// canElicit reports whether the client can answer a form elicitation.
func canElicit(req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	// Neither mode named means form (the first version of elicitation).
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// multiRoundTrip reports whether the client fulfils input requests itself
// and retries the call (protocol 2026-07-28 and later), rather than
// answering an elicitation request during the call.
func multiRoundTrip(req *sdk.CallToolRequest) bool {
	if req.Session == nil {
		return true
	}
	p := req.Session.InitializeParams()
	return p == nil || p.ProtocolVersion >= "2026-07-28"
}

// stateTTL bounds how long an approval request may wait for its answer.
const stateTTL = 15 * time.Minute

// state is the signed request state of an approval request: the time it
// was asked and a MAC of the tenant, the tool and its arguments, so that
// the answer approves exactly this call, for a while.
func (s *Server) state(name string, input json.RawMessage, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return "v1." + ts + "." + base64.RawURLEncoding.EncodeToString(s.mac(ts, name, input))
}

func (s *Server) checkState(state, name string, input json.RawMessage) error {
	parts := strings.Split(state, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return fmt.Errorf("the approval carries no state this server issued")
	}
	sum, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sum, s.mac(parts[1], name, input)) {
		return fmt.Errorf("the approval was given for another call (the tool and its arguments must be those approved), or by another server")
	}
	ts, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)) > stateTTL {
		return fmt.Errorf("the approval expired (it is valid for %s)", stateTTL)
	}
	return nil
}

func (s *Server) mac(ts, name string, input json.RawMessage) []byte {
	h := hmac.New(sha256.New, s.key)
	for _, part := range []string{"approval", ts, s.tenant, name, canonical(input)} {
		fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	return h.Sum(nil)
}

// canonical is JSON re-encoded with sorted keys, so that a client that
// re-encodes the arguments of its retry still matches.
func canonical(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // 2^63+1 stays itself
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// summary describes a call for the person asked to approve it.
func summary(name string, input json.RawMessage) string {
	const max = 300
	in := strings.TrimSpace(string(input))
	if len(in) > max {
		in = strings.ToValidUTF8(in[:max], "") + "…"
	}
	return name + " with " + in
}

func orNone(reason string) string {
	if reason == "" {
		return "no reason given"
	}
	return reason
}
