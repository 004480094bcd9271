package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"go.opentelemetry.io/otel/trace"
)

// Sub-agents: an agent may call another agent as a tool (see [Delegate]).
// The call starts a run of the other agent in a child session of its own,
// and the call's result is the child run's answer. Exactly-once comes from
// machinery the host has already: the child session's id is a function of
// the parent session and the call id, and the task is sent to it with the
// call id as the request id — so a parent run resumed after a crash that
// calls the tool again finds the message it sent before (one message, one
// child run), and waits for that run, resuming it first when it was left
// interrupted. The child's tools are recorded in the child's ledger and
// never run twice for the same reasons no run's tools do.

// Delegate describes an agent that another agent may call as a tool (see
// [NewDelegateTool]).
type Delegate struct {
	// Agent is the agent the child runs. Its Name names the tool by
	// default. Agent.Model is required.
	Agent Agent
	// ToolName is the tool's name, as the model sees it. Default: "",
	// which means Agent.Name.
	ToolName string
	// Description tells the model when to hand work to the agent.
	// Default: "", which means "Hand a task to the agent NAME: it works
	// on it in a session of its own and returns its answer."
	Description string
	// Timeout bounds one call: the child's whole run, including the time
	// it waits for approvals. The parent run's own bounds (its step
	// timeout, its total) bound it too. Default: 0, which means the child
	// agent's Timeouts.Total when it has one, else its ApprovalTTL (24h by
	// default), so that a child waiting for a person is not cut off by
	// the host's default tool timeout.
	Timeout time.Duration
}

// DelegateSourcePrefix starts the [ToolResult].Source of a delegate call,
// "agent:NAME/CHILD-SESSION-ID": the parent's ledger links the child
// session by it.
const DelegateSourcePrefix = "agent:"

// NewDelegateTool returns a tool that hands a task to d.Agent: each call
// starts a run of the agent, on the host that runs the call, in a child
// session ([ChildSessionID] of the
// calling session and the call id), whose first message carries the task
// and names the parent's session, run and call (ledger.Input.Parent), and
// returns that run's answer as the call's result, its Source naming the
// child session (see [DelegateSourcePrefix]). A run that did not complete
// (failed, cancelled, timed out) is an error result the parent's model
// sees.
//
// The child's bounds are its agent's, cut to what is left of the parent's:
// its MaxSteps to the parent run's steps left after the calling step (at
// least 1), its Timeouts.Total to the time left before the call's
// deadline (the parent's step and total timeouts, and the call's own
// timeout: Delegate.Timeout). Cost budgets enforced by hooks (as serve's
// are) apply to the child's model calls as to any run of the host.
//
// When the parent's call stops — the parent run is cancelled or times
// out — the child's run is cancelled with it; when the host closes, the
// child is left as a crash would leave it, and resumed with the parent.
// When the child parks on an approval, the call waits for it: the
// request is in the host's inbox ([Host.PendingApprovals]) and the child
// session's status, and deciding it continues the child, whose answer
// then answers the parent's call.
//
// The tool is idempotent (a call made again with the same call id finds
// the same child run) and has a write effect, so the default policy lets
// it run; the child's own tools are gated by the child agent's policies.
func NewDelegateTool(d Delegate) (Tool, error) {
	a, err := normalizeAgent(d.Agent)
	if err != nil {
		return nil, fmt.Errorf("host: delegate: %w", err)
	}
	name := d.ToolName
	if name == "" {
		name = a.Name
	}
	if !ValidToolName(name) {
		return nil, fmt.Errorf("host: delegate: invalid tool name %q", name)
	}
	if d.Timeout < 0 {
		return nil, fmt.Errorf("host: delegate %s: Timeout %s is negative", name, d.Timeout)
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = a.ApprovalTTL
		if a.Timeouts.Total > 0 {
			timeout = a.Timeouts.Total
		}
	}
	desc := d.Description
	if desc == "" {
		desc = "Hand a task to the agent " + a.Name + ": it works on it in a session of its own and returns its answer."
	}
	return &delegateTool{agent: a, spec: ToolSpec{Name: name, Description: desc, Effect: EffectWrite, Idempotent: true, Timeout: timeout,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","description":"What the agent is to do, with everything it needs to know: it sees nothing else of this conversation."}},"required":["task"]}`)}}, nil
}

// delegation is what the host keeps of a delegate call in flight, by
// child session (Host.delegated).
type delegation struct {
	agent Agent
	span  trace.SpanContext // the call's span, when traced
	depth int               // the child's: 1 for a child of a run that is no delegate's child
	tree  *atomic.Int64     // the children started under the message's top run (DelegateLimits.MaxPerMessage)
}

// DelegateLimitError is the error of a delegate call past a bound of
// [DelegateLimits]; the calling model reads it. It matches
// [ErrDelegateLimit].
type DelegateLimitError struct {
	// Limit names the bound: "max_depth", "max_per_run" or
	// "max_per_message".
	Limit string
	// Max is the bound.
	Max int
}

func (e *DelegateLimitError) Error() string {
	switch e.Limit {
	case "max_depth":
		return fmt.Sprintf("host: delegation refused: a child run here would be %d delegations deep, past the most allowed (%d, max_depth): answer with what you have", e.Max+1, e.Max)
	case "max_per_run":
		return fmt.Sprintf("host: delegation refused: this run started %d child runs, the most one run may (max_per_run): answer with what you have", e.Max)
	}
	return fmt.Sprintf("host: delegation refused: the runs answering this message started %d child runs, the most one message may (max_per_message): answer with what you have", e.Max)
}

// Is makes a *DelegateLimitError match ErrDelegateLimit.
func (e *DelegateLimitError) Is(target error) bool { return target == ErrDelegateLimit }

// takeDelegate counts a child run the calling run tr is about to start,
// within h's bounds; undo gives the places back (the child did not
// start).
func (h *Host) takeDelegate(tr toolRun) (depth int, tree *atomic.Int64, undo func(), err error) {
	lim := h.delegation
	depth, tree = tr.depth+1, tr.tree
	if lim.MaxDepth > 0 && depth > lim.MaxDepth {
		return 0, nil, nil, &DelegateLimitError{Limit: "max_depth", Max: lim.MaxDepth}
	}
	if n := tr.calls.Add(1); lim.MaxPerRun > 0 && n > int64(lim.MaxPerRun) {
		tr.calls.Add(-1)
		return 0, nil, nil, &DelegateLimitError{Limit: "max_per_run", Max: lim.MaxPerRun}
	}
	if n := tree.Add(1); lim.MaxPerMessage > 0 && n > int64(lim.MaxPerMessage) {
		tree.Add(-1)
		tr.calls.Add(-1)
		return 0, nil, nil, &DelegateLimitError{Limit: "max_per_message", Max: lim.MaxPerMessage}
	}
	var once sync.Once
	return depth, tree, func() { once.Do(func() { tree.Add(-1); tr.calls.Add(-1) }) }, nil
}

type delegateTool struct {
	agent Agent
	spec  ToolSpec
}

func (t *delegateTool) Spec() ToolSpec { return t.spec }

// toolRunKey carries, in a tool call's context, what the host knows of the
// run that makes the call (see toolRun).
type toolRunKey struct{}

// toolRun is the calling run as a tool sees it.
type toolRun struct {
	h            *Host
	publish      func(Progress) // to the calling run's viewers
	runID, agent string
	stepsLeft    int           // the passes the run may still make after the calling one
	depth        int           // the run's depth: 0 for a run that is no delegate's child
	calls        *atomic.Int64 // the child runs the run started (DelegateLimits.MaxPerRun)
	tree         *atomic.Int64 // those its message's whole tree started (DelegateLimits.MaxPerMessage)
}

// toolRun is r as its delegate calls see it: a child of a delegate call
// in flight here counts in its parent's tree, one level deeper.
func (r *run) toolRun() toolRun {
	tr := toolRun{h: r.h, publish: r.publish, runID: r.id, agent: r.agent.Name, stepsLeft: r.agent.MaxSteps - r.stepNow() - 1,
		calls: &r.delegateCalls, tree: &r.delegateTree}
	if d, ok := r.h.delegated.Load(r.sessionID); ok {
		tr.depth, tr.tree = d.(delegation).depth, d.(delegation).tree
	}
	return tr
}

func toolRunFrom(ctx context.Context) (toolRun, bool) {
	tr, ok := ctx.Value(toolRunKey{}).(toolRun)
	return tr, ok
}

// ChildSessionID returns the id of the child session a delegate call
// (callID, in session parentID) runs in: "PARENT.CALL" when that is a valid
// session id (see storage.ValidSessionID), else "PARENT-PREFIX.sub-HASH",
// a digest of both. It is a pure function, so that a call made again
// after a crash finds the same child.
func ChildSessionID(parentID, callID string) string {
	if id := parentID + "." + callID; storage.ValidSessionID(id) {
		return id
	}
	// A session's id is valid, so any prefix of it is.
	sum := sha256.Sum256([]byte(parentID + "\x00" + callID))
	tail := ".sub-" + hex.EncodeToString(sum[:16])
	return parentID[:min(len(parentID), 128-len(tail))] + tail
}

func (t *delegateTool) Call(ctx context.Context, call ToolCall) (ToolResult, error) {
	var in struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil || strings.TrimSpace(in.Task) == "" {
		return ToolResult{}, errors.New(`the input must be {"task": "..."}, a non-empty task`)
	}
	childID := ChildSessionID(call.SessionID, call.ID)
	res := ToolResult{Source: DelegateSourcePrefix + t.agent.Name + "/" + childID}
	tr, ok := toolRunFrom(ctx)
	if !ok {
		return res, errors.New("the agent " + t.agent.Name + " can be called only by a run of a host")
	}
	h, agent := tr.h, t.agent
	parent := &ledger.ParentCall{SessionID: call.SessionID, RunID: tr.runID, CallID: call.ID, Agent: tr.agent}
	agent.MaxSteps = min(agent.MaxSteps, max(tr.stepsLeft, 1))
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left > 0 && (agent.Timeouts.Total == 0 || left < agent.Timeouts.Total) {
			agent.Timeouts.Total = left
		}
	}
	// The parent's call stopping (cancelled, timed out) stops the child;
	// the host closing leaves the child to be resumed with the parent.
	cancelChild := func() {
		if !shutDown(ctx) {
			h.Cancel(childID, "the parent run's call "+call.ID+" in session "+call.SessionID+" stopped: "+context.Cause(ctx).Error())
		}
	}
	stop := context.AfterFunc(ctx, cancelChild)
	defer func() {
		// ctx's Done closes before its cancellation starts the callback:
		// a call that returned on Done may stop the callback before it
		// ran, and must then cancel the child itself.
		if stop() && ctx.Err() != nil {
			cancelChild()
		}
	}()
	sess := h.Session(childID)
	// The bounds of Options.Delegation, then the admission of the
	// child's run: a call past them starts nothing. A call made again
	// (the parent resumed) whose child holds its task already is not
	// admitted again: its run is the child's, started before.
	depth, tree, undo, err := h.takeDelegate(tr)
	if err != nil {
		return res, err
	}
	release := func() {}
	if admit := h.delegation.Admit; admit != nil && !sess.holdsRequest(ctx, call.ID) {
		if release, err = admit(ctx, childID); err != nil {
			undo()
			return res, fmt.Errorf("the agent %s could not take the task: %w", t.agent.Name, err)
		}
	}
	var announced map[string]PendingApproval // the child's requests told to the parent's viewers, by id
	h.delegated.Store(childID, delegation{agent: agent, span: trace.SpanContextFromContext(ctx), depth: depth, tree: tree})
	defer h.delegated.Delete(childID)
	for {
		r, err := sess.start(ctx, in.Task, SendOptions{RequestID: call.ID, Agent: &agent, parent: parent}, nil, false)
		release()
		release = func() {}
		if err != nil {
			return res, fmt.Errorf("the agent %s could not take the task: %w", t.agent.Name, err)
		}
		out, err := r.Wait(ctx)
		if err != nil {
			return res, fmt.Errorf("the agent %s did not answer: %w", t.agent.Name, err)
		}
		announced = t.relayApprovals(ctx, tr, sess, out, announced)
		switch out.Status {
		case ledger.RunCompleted:
			res.Output = out.Text
			return res, nil
		case ledger.RunApprovalRequired:
			// The child waits for a person: wait for its session to
			// change (a decision continues it), then find its run again.
			if err := h.waitSession(ctx, sess); err != nil {
				return res, fmt.Errorf("the agent %s did not answer: %w", t.agent.Name, err)
			}
			continue
		}
		msg := fmt.Sprintf("the agent %s ended %s", t.agent.Name, out.Status)
		if out.Reason != "" {
			msg += ": " + out.Reason
		}
		if out.Text != "" {
			msg += "; its last words: " + out.Text
		}
		return res, errors.New(msg)
	}
}

// relayApprovals tells the parent run's viewers of the child's requests:
// approval-requested for each pending one not told yet (its SessionID the
// child's), approval-decided for each told one no longer pending. It
// returns the requests told and still pending.
func (t *delegateTool) relayApprovals(ctx context.Context, tr toolRun, sess *Session, out RunResult, announced map[string]PendingApproval) map[string]PendingApproval {
	if tr.publish == nil {
		return announced
	}
	pending := map[string]PendingApproval{}
	for _, p := range out.Approvals {
		pending[p.ApprovalID] = p
		if _, told := announced[p.ApprovalID]; !told {
			info := p.info(ledger.ApprovalPending)
			info.SessionID = sess.ID()
			tr.publish(Progress{Type: ProgressApprovalRequested, Approval: info})
		}
	}
	var events []ledger.Event
	for id, p := range announced {
		if _, still := pending[id]; still {
			continue
		}
		if events == nil {
			events, _ = sess.Events(ctx)
		}
		state := ledger.ApprovalState("")
		for _, a := range ledger.Approvals(events, p.RunID) {
			if a.Request.ApprovalID == id {
				state = a.State
			}
		}
		info := p.info(state)
		info.SessionID, info.Token = sess.ID(), ""
		tr.publish(Progress{Type: ProgressApprovalDecided, Approval: info})
	}
	return pending
}

// holdsRequest reports whether the session's ledger holds a message sent
// with the request id (false when it cannot be read).
func (s *Session) holdsRequest(ctx context.Context, requestID string) bool {
	events, err := s.Events(ctx)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(events, func(e ledger.Event) bool { return e.Input != nil && e.Input.RequestID == requestID })
}

// waitSession waits until the session's ledger may have changed (see
// waitRemote: a bounded wait, after which the caller looks again).
func (h *Host) waitSession(ctx context.Context, s *Session) error {
	st, err := h.ref(s)
	if err != nil {
		return err
	}
	defer h.unref(st)
	return h.waitRemote(ctx, st)
}

var _ Tool = (*delegateTool)(nil)
