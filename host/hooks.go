package host

import (
	"context"
	"slices"

	"github.com/agentichost/agentic/host/model"
)

// StreamFunc makes one model call, as [Model.Stream] does.
type StreamFunc func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error)

// CallFunc makes one tool call: tool is the tool the model named, call the
// call (its id, session, name and input).
type CallFunc func(ctx context.Context, tool Tool, call ToolCall) (ToolResult, error)

// DecideFunc asks one policy about a tool call, as [Policy.Decide] does.
type DecideFunc func(ctx context.Context, p Policy, req PolicyRequest) (Decision, error)

// PolicyHook is a [Hook] that also wraps the host's policy calls: each
// call of each policy of an agent on each tool call, within the agent's
// PolicyTimeout, in the order of the hooks, as the other calls are
// wrapped. An error it returns denies the tool call with the error as the
// reason, as the policy's own error would; [CallInfoFrom] tells
// PurposePolicy. The place for a budget on metered policies.
type PolicyHook interface {
	Hook
	PolicyHook(next DecideFunc) DecideFunc
}

// Hook wraps the host's model calls and tool calls: the place for
// telemetry, logging and metering. Each method receives the next function
// of the chain and returns the function the host calls instead, which
// normally calls next (a hook may also answer by itself, as a cache
// would). A method may return next as it is to stay out of that chain.
//
// Hooks are called in the order they were added (Options.Hooks first,
// then [Host.AddHook]): the first is outermost, and sees a call first and
// its result last. Model hooks wrap every model call, each attempt of a
// pass and the summary calls of compaction; tool hooks wrap every call of
// a tool the host runs, within the tool's timeout and with its panics
// recovered. [CallInfoFrom] tells a hook what a call is for. A hook that
// is also a [PolicyHook] wraps the policies' calls too.
type Hook interface {
	ModelHook(next StreamFunc) StreamFunc
	ToolHook(next CallFunc) CallFunc
}

// CallInfo tells a hook what a model call or tool call is for.
type CallInfo struct {
	// SessionID and RunID name the run that makes the call.
	SessionID, RunID string
	// Agent is the name of the agent the run runs.
	Agent string
	// Purpose is PurposePass, PurposeCompaction, PurposeTool or
	// PurposePolicy.
	Purpose string
	// Attempt is the attempt of a model pass, from 1 (retries count up);
	// 0 for other calls.
	Attempt int
	// Grants are the run's own requests a person approved, oldest first
	// (see [ApprovalNeededError]).
	Grants []Grant
}

// The purposes of a call (see [CallInfo]).
const (
	// PurposePass: a model pass of a run.
	PurposePass = "pass"
	// PurposeCompaction: a model call that writes a compaction's note.
	PurposeCompaction = "compaction"
	// PurposeTool: a tool call.
	PurposeTool = "tool"
	// PurposePolicy: a policy's call, deciding on a tool call.
	PurposePolicy = "policy"
)

type callInfoKey struct{}

// CallInfoFrom returns what the call made with ctx is for, when the host
// made it through its hooks (see [Hook]).
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	ci, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return ci, ok
}

// withCallInfo returns ctx carrying ci for the hooks of chain c: ctx as it
// is when there are none, to read it.
func (c *hookChain) withCallInfo(ctx context.Context, ci CallInfo) context.Context {
	if len(c.hooks) == 0 {
		return ctx
	}
	return context.WithValue(ctx, callInfoKey{}, ci)
}

// hookChain is an immutable snapshot of the hooks, composed around the
// host's model and tools; the host swaps it whole (Host.hooks).
type hookChain struct {
	hooks  []Hook
	stream StreamFunc
	call   CallFunc
	decide DecideFunc
}

// invokeTool is the end of the tool chain: the tool itself.
func invokeTool(ctx context.Context, tool Tool, call ToolCall) (ToolResult, error) {
	return tool.Call(ctx, call)
}

// invokePolicy is the end of the policy chain: the policy itself.
func invokePolicy(ctx context.Context, p Policy, req PolicyRequest) (Decision, error) {
	return p.Decide(ctx, req)
}

// newHookChain composes hooks around the model m.
func newHookChain(m Model, hooks []Hook) *hookChain {
	c := &hookChain{hooks: hooks, stream: m.Stream, call: invokeTool, decide: invokePolicy}
	for i := len(hooks) - 1; i >= 0; i-- {
		c.stream = hooks[i].ModelHook(c.stream)
		c.call = hooks[i].ToolHook(c.call)
		if ph, ok := hooks[i].(PolicyHook); ok {
			c.decide = ph.PolicyHook(c.decide)
		}
	}
	return c
}

// Metered is implemented by a [Tool], [Policy] or [Validator] whose code
// is metered in fuel (a Wasm plugin's), which reports the fuel of its
// calls (ToolResult.Fuel, Decision.Fuel, Validation.Fuel): a hook that
// keeps a budget of plugin CPU asks it with [IsMetered].
type Metered interface {
	Metered() bool
}

// IsMetered reports whether x (a tool, a policy, a validator) is
// [Metered] and says so.
func IsMetered(x any) bool {
	m, ok := x.(Metered)
	return ok && m.Metered()
}

// AddHook adds hooks after those the host has; calls that start from now on
// go through them. It is safe to call while runs are in flight: each call
// goes through the hooks of the moment it started.
func (h *Host) AddHook(hooks ...Hook) {
	h.hookMu.Lock()
	defer h.hookMu.Unlock()
	all := slices.Concat(h.hooks.Load().hooks, slices.DeleteFunc(slices.Clone(hooks), func(k Hook) bool { return k == nil }))
	h.hooks.Store(newHookChain(h.model, all))
}
