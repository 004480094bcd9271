package host

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Policies: what decides, before a tool call runs, whether it may — at
// once, after a person approves it, or not at all.

// Verdict is a policy's answer on a tool call.
type Verdict string

// The verdicts. When several policies decide on a call, deny beats
// require_approval beats allow.
const (
	// Allow lets the call run.
	Allow Verdict = "allow"
	// RequireApproval parks the run until a person approves or denies
	// the call (see [Session.Decide]).
	RequireApproval Verdict = "require_approval"
	// Deny refuses the call: the model is told why, and the run goes on.
	Deny Verdict = "deny"
)

// rank orders verdicts: the stricter wins.
func (v Verdict) rank() int {
	switch v {
	case Deny:
		return 2
	case RequireApproval:
		return 1
	}
	return 0
}

// Decision is a policy's verdict on a tool call, with its reason.
type Decision struct {
	// Verdict is Allow, RequireApproval or Deny.
	Verdict Verdict
	// Reason explains the verdict (to the model when it denies).
	Reason string
	// Summary describes the call for the person asked to approve it.
	Summary string
	// Source identifies the policy's code (a plugin module's content
	// hash): an approval holds only while it is the same.
	Source string
	// Fuel is the fuel the decision used, when the policy is metered (a
	// Wasm plugin's decide export; see [IsMetered]), failed decisions
	// included. The host records it with the call (ledger.ToolResult's
	// PolicyFuel, or the approval request's).
	Fuel int64
}

// PolicyRequest is a tool call a policy decides on.
type PolicyRequest struct {
	// Tool is the tool about to be called.
	Tool ToolSpec
	// CallID is the call's id.
	CallID string
	// Input is the call's arguments, JSON.
	Input json.RawMessage
	// SessionID and RunID are the session and run calling; Agent names
	// the agent.
	SessionID, RunID, Agent string
}

// Policy decides whether tool calls may run. Wasm policies (a plugin's
// decide export) implement it through the plugins package; a Go function
// implements it with [PolicyFunc]. Decide is called before every call of
// every tool, from the run's goroutine, within [Agent.PolicyTimeout],
// through the hooks that wrap policies ([PolicyHook]). An error, a panic
// or a timeout denies the call (never allows it), with the failure as the
// reason.
type Policy interface {
	// Name identifies the policy in approval requests and logs.
	Name() string
	// Decide returns the verdict on a call about to run.
	Decide(ctx context.Context, req PolicyRequest) (Decision, error)
}

// PolicyFunc makes a Policy of a Go function.
func PolicyFunc(name string, decide func(ctx context.Context, req PolicyRequest) (Decision, error)) Policy {
	return funcPolicy{name: name, decide: decide}
}

type funcPolicy struct {
	name   string
	decide func(ctx context.Context, req PolicyRequest) (Decision, error)
}

func (p funcPolicy) Name() string { return p.name }
func (p funcPolicy) Decide(ctx context.Context, req PolicyRequest) (Decision, error) {
	return p.decide(ctx, req)
}

// DefaultPolicy decides by the tool's declared effect: read and write
// calls run, calls with an external effect (they send, publish, pay)
// need a person's approval. It is an agent's policy when it names none.
var DefaultPolicy Policy = PolicyFunc("default", func(_ context.Context, req PolicyRequest) (Decision, error) {
	if req.Tool.Effect == EffectExternal {
		return Decision{Verdict: RequireApproval, Reason: "the tool has an external effect",
			Summary: fmt.Sprintf("%s %s", req.Tool.Name, compactInput(req.Input, 200))}, nil
	}
	return Decision{Verdict: Allow}, nil
})

// ApprovalMode overrides the policies for one tool (Agent.ToolApprovals),
// for unattended runs such as a batch job that may publish without a
// person.
type ApprovalMode string

// The approval modes.
const (
	// ApproveAlways runs the tool's calls without asking; a policy's deny
	// still denies.
	ApproveAlways ApprovalMode = "always"
	// ApproveNever denies the tool's calls.
	ApproveNever ApprovalMode = "never"
	// ApproveAsk asks a person for every call; a policy's deny still
	// denies.
	ApproveAsk ApprovalMode = "ask"
)

// The defaults of the approval fields of [Agent].
const (
	DefaultApprovalTTL   = 24 * time.Hour
	DefaultPolicyTimeout = 10 * time.Second
)

// compactInput renders a call's input on one line, cut to max bytes.
func compactInput(in json.RawMessage, max int) string {
	s := string(in)
	if len(s) == 0 {
		s = "{}"
	}
	return truncate(s, max)
}
