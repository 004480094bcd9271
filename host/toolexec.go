package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Tool execution: a pass's tool calls run one at a time, in order, each
// recorded as it ends; a call of a tool with an external effect records
// its intent first. This is where approvals will gate calls.

// priorCalls is what the ledger says of a pass's tool calls when a resumed
// run answers them: the calls answered already, and the intents recorded
// (tool-start events) of calls with an external effect.
type priorCalls struct {
	answered map[string]bool
	started  map[string]*ledger.ToolStart
}

// runTools answers a pass's tool calls in order, persisting each result as
// it comes. Once the run is stopped, the calls not yet run get a synthetic
// result saying so, so that every call the model made is answered — unless
// the host is closing: then nothing more is recorded, and the resumed run
// answers them. A resumed run (prior set) skips the calls answered already,
// and does not run again a call of a tool with an external effect whose
// intent was recorded, unless the tool is idempotent: the model gets an
// "outcome unknown" result instead.
//
// Before a call runs, the agent's policies decide on it (see gate): it
// runs, is denied (the model gets the reason), or waits for a person. The
// calls left waiting are returned: the run then parks. The error is
// non-nil only when the ledger could not be written.
func (r *run) runTools(calls []ledger.ToolCall, prior *priorCalls) (waiting []PendingApproval, err error) {
	approvals := latestApprovals(r.view(), r.id)
	r.waits = 0
	for _, c := range calls {
		if prior != nil && prior.answered[c.ID] {
			continue
		}
		if shutDown(r.ctx) {
			return nil, ErrClosed
		}
		if r.stopped() {
			msg := "error: the run was cancelled before this tool call ran"
			if status, reason, _ := doneStatus(r.ctx); status == ledger.RunTimedOut {
				msg = "error: the run timed out before this tool call ran: " + reason
			}
			if err := r.appendResult(c, msg, true); err != nil {
				return nil, err
			}
			continue
		}
		if prior != nil {
			if ts := prior.started[c.ID]; ts != nil && !ts.Idempotent && !r.journals(c.Name) {
				msg := fmt.Sprintf("error: the outcome of this call of %s is unknown: the host stopped while it ran, and the tool is not idempotent, so it was not run again. Check its effect before calling it again.", c.Name)
				if err := r.appendResult(c, msg, true); err != nil {
					return nil, err
				}
				continue
			}
		}
		run, policyFuel, wait, err := r.gate(&c, approvals[c.ID])
		switch {
		case err != nil:
			return nil, err
		case wait != nil:
			waiting = append(waiting, *wait)
		case run:
			if err := r.runTool(c, policyFuel); err != nil {
				return nil, err
			}
		}
	}
	return waiting, nil
}

// latestApprovals returns, per call id, the run's latest approval request
// for it, with its state.
func latestApprovals(events []ledger.Event, runID string) map[string]ledger.Approval {
	out := map[string]ledger.Approval{}
	for _, a := range ledger.Approvals(events, runID) {
		out[a.Request.CallID] = a
	}
	return out
}

// gate decides whether call c runs now. prior is its latest approval
// request, if it has one. Calls of unknown tools and calls whose arguments
// are not JSON are not gated: runTool answers them with an error. gate
// records what the decision needs — a denial's result, an approval
// request, a decision that voids an approval — and returns run when the
// call may run now, with the fuel its policies used, or the request it
// waits on. A call a person approved with an edited input runs with it:
// gate sets c's arguments to it.
func (r *run) gate(cp *ledger.ToolCall, prior ledger.Approval) (run bool, policyFuel int64, wait *PendingApproval, err error) {
	c := *cp
	tool, known := r.tools[c.Name]
	input := json.RawMessage(argsOrEmpty(c.Arguments))
	if !known || (c.Arguments != "" && !json.Valid([]byte(c.Arguments))) {
		return true, 0, nil, nil
	}
	spec := tool.Spec()
	if r.taskRecord() != nil && (c.Name == SubmitToolName || c.Name == CancelToolName) {
		// A task's own way to end is not a policy's to decide: denied,
		// it would leave the task no way out.
		return true, 0, nil, nil
	}
	if prior.Request.ApprovalID != "" {
		switch prior.State {
		case ledger.ApprovalPending:
			p := r.h.pendingOf(r.sessionID, prior.RunID, prior.RequestedAt, prior.Request)
			return false, 0, &p, nil
		case ledger.ApprovalDenied:
			msg := "error: a person denied this call"
			if d := prior.Decision; d != nil && d.By != "" {
				msg += " (" + d.By + ")"
			}
			if d := prior.Decision; d != nil && d.Reason != "" {
				msg += ": " + d.Reason
			}
			return false, 0, nil, r.appendResult(c, msg, true)
		case ledger.ApprovalExpired:
			return false, 0, nil, r.appendResult(c, fmt.Sprintf("error: nobody approved this call in time (its approval request expired at %s); it did not run",
				prior.Request.ExpiresAt.Format(time.RFC3339)), true)
		case ledger.ApprovalResponded:
			// A person answered in the tool's place: the model reads it
			// as the call's result, and the tool does not run.
			return false, 0, nil, r.appendResult(c, prior.Decision.Response, false)
		case ledger.ApprovalApproved:
			if ledger.InputDigest(c.Arguments) != prior.Request.InputDigest {
				return false, 0, nil, r.appendResult(c, "error: refused: the call's input is not the one that was approved", true)
			}
			if d := prior.Decision; d != nil && d.Decision == ledger.DecisionEdit {
				if ledger.InputDigest(string(d.Input)) != d.InputDigest {
					return false, 0, nil, r.appendResult(c, "error: refused: the edited input is not the one that was approved", true)
				}
				// The call runs with the person's input, which the
				// policies decide again below.
				c.Arguments, input = string(d.Input), d.Input
			}
		}
	}
	v := r.decideCall(spec, c, input)
	if prior.State == ledger.ApprovalApproved {
		switch {
		case v.Verdict == Deny:
			// A deny stands, approval or not.
		case v.Source == prior.Request.PolicySource:
			*cp = c
			return true, v.fuel, nil, nil // approved, and the policy's code is the one that asked
		default:
			// The policy's code changed since it asked: the approval is
			// void, and the call is decided again.
			if err := r.decideApproval(prior.Request, ledger.DecisionVoid,
				fmt.Sprintf("the policy changed (%s, was %s): asked again", v.Source, prior.Request.PolicySource), ""); err != nil {
				return false, 0, nil, err
			}
			if c.Arguments != cp.Arguments {
				// An edit is void with its approval: the model's call is
				// decided again, as it asked.
				c, input = *cp, json.RawMessage(argsOrEmpty(cp.Arguments))
				v = r.decideCall(spec, c, input)
			}
		}
	}
	switch v.Verdict {
	case Allow:
		return true, v.fuel, nil, nil
	case Deny:
		reason := v.Reason
		if reason == "" {
			reason = "the policy denies it"
		}
		return false, 0, nil, r.appendResultOf(c, "error: denied by policy "+v.policy+": "+reason, true, v.fuel)
	}
	if r.st.key.private {
		// Nobody can reach a task that is not durable to decide.
		return false, 0, nil, r.appendResultOf(c, "error: this call needs a person's approval, and this task is not durable, so nobody can give it; it did not run", true, v.fuel)
	}
	p, err := r.requestApproval(c, spec, input, v)
	if err != nil {
		return false, 0, nil, err
	}
	return false, 0, &p, nil
}

// requestApproval records that call c waits for a person, and announces
// it. The request enters the inbox before the ledger: whoever learns from
// the ledger that the run waits (its status, its events, the feed, on any
// host) finds the request in the inbox at that moment (see
// PendingApprovals).
func (r *run) requestApproval(c ledger.ToolCall, spec ToolSpec, input json.RawMessage, v verdictOf) (PendingApproval, error) {
	e := r.newEvent(ledger.KindApprovalRequest)
	e.ApprovalRequest = &ledger.ApprovalRequest{ApprovalID: ledger.NewID("appr"), CallID: c.ID, Name: c.Name,
		Effect: string(spec.Effect), Input: input, InputDigest: ledger.InputDigest(c.Arguments),
		Summary: v.Summary, Reason: v.Reason, Policy: v.policy, PolicySource: v.Source, PolicyFuel: v.fuel,
		ExpiresAt: e.Time.Add(r.agent.ApprovalTTL)}
	p := r.h.pendingOf(r.sessionID, r.id, e.Time, *e.ApprovalRequest)
	r.h.indexApproval(p)
	if err := r.append(e); err != nil {
		r.h.unindexApproval(r.sessionID, p.ApprovalID) // never recorded
		return PendingApproval{}, err
	}
	r.publish(Progress{Type: ProgressApprovalRequested, Approval: p.info(ledger.ApprovalPending)})
	return p, nil
}

// decideApproval records the host's own decision on a request (a void, an
// expiry) and announces it.
func (r *run) decideApproval(a ledger.ApprovalRequest, decision, reason, by string) error {
	e := r.newEvent(ledger.KindApprovalDecision)
	e.ApprovalDecision = &ledger.ApprovalDecision{ApprovalID: a.ApprovalID, Decision: decision, Reason: reason, By: by}
	if err := r.append(e); err != nil {
		return err
	}
	r.h.unindexApproval(r.sessionID, a.ApprovalID)
	p := r.h.pendingOf(r.sessionID, r.id, time.Time{}, a)
	info := p.info(ledger.ApprovalState(""))
	info.State, info.Token = ledger.ApprovalStateOf(decision), ""
	r.publish(Progress{Type: ProgressApprovalDecided, Approval: info})
	return nil
}

// runTool runs call c and records its result, with policyFuel, the fuel
// of the policies that let it run.
func (r *run) runTool(c ledger.ToolCall, policyFuel int64) error {
	ctx := r.ctx
	input := json.RawMessage(c.Arguments)
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	progressInput := input
	if !json.Valid(input) {
		progressInput, _ = json.Marshal(c.Arguments)
	}
	r.publish(Progress{Type: ProgressToolStart, Tool: &ToolInfo{CallID: c.ID, Name: c.Name, Input: progressInput}})

	result := &ledger.ToolResult{CallID: c.ID, Name: c.Name, PolicyFuel: policyFuel}
	started := time.Now()
	tool, known := r.tools[c.Name]
	switch {
	case !known:
		result.IsError, result.Output = true, fmt.Sprintf("error: there is no tool named %q", c.Name)
	case !json.Valid(input):
		result.IsError, result.Output = true, fmt.Sprintf("error: the arguments are not valid JSON: %s", c.Arguments)
	default:
		spec := tool.Spec()
		if spec.Effect == EffectExternal {
			e := r.newEvent(ledger.KindToolStart)
			e.ToolStart = &ledger.ToolStart{CallID: c.ID, Name: c.Name, Effect: string(spec.Effect), Idempotent: spec.Idempotent}
			if err := r.append(e); err != nil {
				return err
			}
		}
		call := ToolCall{ID: c.ID, SessionID: r.sessionID, Name: c.Name, Input: input}
		if r.journals(c.Name) {
			call.Journal = r.journalOf(c)
		}
		out, err := r.callTool(ctx, tool, spec, call, policyFuel)
		if w, ok := errors.AsType[*WaitError](err); ok && call.Journal != nil && !r.stopped() {
			// The call waits, its journal holding the wait: no result;
			// the run parks once the pass's other calls are done.
			r.waits++
			r.publish(Progress{Type: ProgressToolWaiting, Tool: &ToolInfo{CallID: c.ID, Name: c.Name, Input: progressInput},
				Wait: &Waiting{CallID: c.ID, Name: c.Name, Event: w.Event, Until: w.Until, Since: time.Now().UTC()}})
			return nil
		}
		if shutDown(ctx) || (errors.Is(err, ErrClosed) && r.h.draining.Load()) {
			// Stopped by the host's shutdown: as after a crash, the call
			// has no result, and the resumed run decides (its effect and
			// idempotency) whether it runs again. A call that failed for
			// the host's draining (a sub-agent's child run, stopped at
			// its step boundary) is stopped by it too.
			return ErrClosed
		}
		// The ledger carries text as UTF-8: invalid bytes from a tool
		// become U+FFFD here rather than fail the append.
		result.Source = strings.ToValidUTF8(out.Source, "\uFFFD")
		result.Fuel = max(out.Fuel, 0)
		result.Traffic = out.Traffic
		if err != nil {
			result.IsError, result.Output = true, "error: "+strings.ToValidUTF8(err.Error(), "\uFFFD")
		} else {
			result.Output = strings.ToValidUTF8(out.Output, "\uFFFD")
		}
	}
	result.DurationMS = time.Since(started).Milliseconds()
	result.Output = ledger.CapToolOutput(result.Output, r.agent.MaxToolResultBytes)
	output := result.Output
	release := r.externalOutput(result)
	e := r.newEvent(ledger.KindToolResult)
	e.ToolResult = result
	err := r.append(e)
	release()
	if err != nil {
		return err
	}
	r.publish(Progress{Type: ProgressToolEnd, Tool: &ToolInfo{CallID: c.ID, Name: c.Name,
		Output: output, IsError: result.IsError}})
	return nil
}

// journals reports whether calls of the named tool keep a journal in this
// run: the tool is a JournaledTool, and the run is durable.
func (r *run) journals(name string) bool {
	t, ok := r.tools[name]
	// A journal is kept only once every live host reads journals: until
	// then, calls run as they did before durable calls.
	return ok && !r.st.key.private && IsJournaled(t) && r.h.featuresWritable(ledger.FeatureJournal) == nil
}

// callJournal is a call's Journal: its tool-journal events in the run's
// ledger.
type callJournal struct {
	r        *run
	call     ledger.ToolCall
	source   string
	recorded []ledger.JournalEntry
	next     int // the place of the next entry
}

// journalOf returns call c's journal, with what the run's earlier
// attempts recorded of it: the stretches of its tool-journal events that
// follow one another from the first, of one module.
func (r *run) journalOf(c ledger.ToolCall) *callJournal {
	j := &callJournal{r: r, call: c}
	events := r.view()
	// The call's stretches follow the pass that made it, the run's last:
	// only the events after that pass's step are read.
	from := 0
	for i := len(events) - 1; i >= 0; i-- {
		if e := events[i]; e.Step != nil && e.RunID == r.id {
			from = i
			break
		}
	}
	for _, e := range events[from:] {
		x := e.ToolJournal
		if x == nil || e.RunID != r.id || x.CallID != c.ID {
			continue
		}
		if x.At != len(j.recorded) || (j.source != "" && x.Source != j.source) {
			// Not a continuation of what was read (it cannot be, as one
			// attempt appends at a time): the journal is what came before.
			r.h.log.Warn("a tool call's journal has a gap; replaying what precedes it", "session", r.sessionID, "run", r.id,
				"call", c.ID, "at", x.At, "want", len(j.recorded))
			break
		}
		j.source = x.Source
		j.recorded = append(j.recorded, x.Entries...)
	}
	j.next = len(j.recorded)
	return j
}

func (j *callJournal) Recorded() (string, []ledger.JournalEntry) { return j.source, j.recorded }

func (j *callJournal) Record(_ context.Context, source string, entries []ledger.JournalEntry) error {
	if len(entries) == 0 {
		return nil
	}
	e := j.r.newEvent(ledger.KindToolJournal)
	e.ToolJournal = &ledger.ToolJournal{CallID: j.call.ID, Name: j.call.Name, Source: source, At: j.next, Entries: entries}
	if err := j.r.append(e); err != nil {
		return err
	}
	j.next += len(entries)
	j.taken(entries)
	return nil
}

// appendResult records a synthetic tool result the host made up.
func (r *run) appendResult(c ledger.ToolCall, output string, isError bool) error {
	return r.appendResultOf(c, output, isError, 0)
}

// appendResultOf is appendResult, with the fuel of the policies that
// decided the call would not run.
func (r *run) appendResultOf(c ledger.ToolCall, output string, isError bool, policyFuel int64) error {
	e := r.newEvent(ledger.KindToolResult)
	e.ToolResult = &ledger.ToolResult{CallID: c.ID, Name: c.Name, Output: output, IsError: isError, Synthetic: true, PolicyFuel: policyFuel}
	if err := r.append(e); err != nil {
		return err
	}
	r.publish(Progress{Type: ProgressToolEnd, Tool: &ToolInfo{CallID: c.ID, Name: c.Name, Input: json.RawMessage(argsOrEmpty(c.Arguments)),
		Output: output, IsError: isError}})
	return nil
}

func argsOrEmpty(args string) string {
	if args == "" || !json.Valid([]byte(args)) {
		return "{}"
	}
	return args
}

// callTool runs one tool call through the hooks, with its timeout,
// turning a panic into an error and an overrun into a *TimeoutError, whose
// text the model sees; traced and measured when telemetry is on.
func (r *run) callTool(ctx context.Context, tool Tool, spec ToolSpec, call ToolCall, policyFuel int64) (ToolResult, error) {
	return r.toolCall(ctx, spec, call, policyFuel, func(ctx context.Context) (ToolResult, error) {
		return r.invokeTool(ctx, tool, spec, call)
	})
}

// toolDeadlineKey carries the deadline of a tool call's own time in its
// context (WithToolTimeout).
type toolDeadlineKey struct{}

// WithToolTimeout bounds ctx by a tool call's own time (ToolSpec.Timeout,
// AgentTimeouts.Tool, Options.ToolTimeout), as the host does for every
// call, and marks the deadline as the call's own: a tool that tells a
// failure of its own from a caller that gave up (a plugin runtime's
// quarantine) reads it with [ToolDeadline].
func WithToolTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	before, bounded := ctx.Deadline()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	d, _ := ctx.Deadline()
	if bounded && d.Equal(before) {
		return ctx, cancel // the caller's deadline comes first: the call's own never ends it
	}
	return context.WithValue(ctx, toolDeadlineKey{}, d), cancel
}

// ToolDeadline reports whether ctx ended at its tool call's own deadline
// (WithToolTimeout): the call ran for all the time it had, and no earlier
// deadline of its caller's (a run's total time) or cancellation ended it.
func ToolDeadline(ctx context.Context) bool {
	d, ok := ctx.Value(toolDeadlineKey{}).(time.Time)
	if !ok || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	cd, _ := ctx.Deadline()
	return cd.Equal(d)
}

// invokeTool is callTool without its telemetry.
func (r *run) invokeTool(ctx context.Context, tool Tool, spec ToolSpec, call ToolCall) (res ToolResult, err error) {
	timeout := r.h.toolTimeout
	if t := r.agent.Timeouts.Tool; t > 0 {
		timeout = t
	}
	if spec.Timeout > 0 {
		timeout = spec.Timeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = WithToolTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s panicked: %v", spec.Name, p)
		}
	}()
	if _, ok := tool.(*delegateTool); ok {
		ctx = context.WithValue(ctx, toolRunKey{}, r.toolRun())
	}
	chain := r.h.hooks.Load()
	ctx = chain.withCallInfo(ctx, CallInfo{SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name, Purpose: PurposeTool, Grants: r.grants})
	res, err = chain.call(ctx, tool, call)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && r.ctx.Err() == nil:
		err = &TimeoutError{Kind: TimeoutTool, Name: spec.Name, After: timeout, Err: err}
		r.emit(Event{Type: EventTimeout, Timeout: TimeoutTool, Tool: spec.Name, Reason: err.Error(), DurationMS: timeout.Milliseconds()})
	case r.ctx.Err() != nil:
		// The run stopped while the tool ran: say why, rather than the
		// tool's own words for its cut context.
		if status, reason, _ := doneStatus(r.ctx); status == ledger.RunTimedOut {
			err = fmt.Errorf("the run timed out while the tool ran: %s (%w)", reason, err)
		}
	}
	return res, err
}
