package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// One model pass of a run: the request built from the ledger, the stream
// with its retries, a reply cut short, the step recorded, then the turn's
// end or the tools (toolexec.go) and the next pass.

// pass runs one model pass and its tools. It returns stop when the run must
// end with the outcome o.
func (r *run) pass() (o outcome, stop bool) {
	defer r.armStep()()
	span := r.startStepSpan()
	defer func() { endStepSpan(span, o, stop) }()
	r.passStart = time.Now()
	ctx := r.ctx
	if shutDown(ctx) || r.h.draining.Load() {
		return outcome{err: ErrClosed}, true // a step boundary: the next host makes this pass
	}
	if r.stopped() {
		// Stopped between passes (or resumed past its total timeout):
		// no model call is made.
		status, reason, timeout := doneStatus(ctx)
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	r.snapshotTools()
	// Messages queued while the run worked join this pass, but for those
	// it holds back for the next.
	r.sync()
	events := r.view()
	var later []string
	if r.holdFrom > 0 {
		later, r.holdFrom = queuedFrom(events, r.holdFrom), 0
	}
	r.folding = ledger.PendingInputs(events)
	if later != nil {
		r.folding = slices.DeleteFunc(r.folding, func(id string) bool { return slices.Contains(later, id) })
	}
	if stops := interrupting(events, r.folding); len(stops) > 0 {
		// A message sent to stop this run (from another host, whose
		// watch has not stopped it yet) is not folded in: the run stops
		// here, and a run of its own answers the message.
		r.folding = slices.DeleteFunc(r.folding, func(id string) bool { _, ok := stops[id]; return ok })
		for _, id := range slices.Sorted(maps.Keys(stops)) {
			r.interrupt(id, stops[id])
		}
		status, reason, timeout := doneStatus(ctx)
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	r.publish(Progress{Type: ProgressResponseStart})
	if r.needsCompaction(ctx) {
		if _, err := r.compact(ctx); err != nil {
			// The pass goes on uncompacted; an overflow, should it come,
			// compacts again.
			r.h.log.Warn("compaction failed", "session", r.sessionID, "run", r.id, "err", err)
		}
		events = r.view()
	}
	msgs, err := r.replay(withoutQueued(events, later))
	if err != nil {
		return outcome{err: err}, true
	}
	req := model.Request{Model: r.agent.Model, System: r.agent.System,
		Messages: msgs, Tools: r.specs, MaxTokens: r.agent.MaxTokens, Extra: r.agent.ExtraBody}
	var res model.Result
	var merr error
	var tries streamTries
	for overflowed := false; ; overflowed = true {
		res, tries, merr = r.stream(req)
		if merr == nil || ctx.Err() != nil || tries.ledgerErr != nil || overflowed || model.Classify(merr).Kind != model.ContextOverflow {
			break
		}
		// The prompt no longer fits: compact, and try once more.
		ok, cerr := r.compact(ctx)
		if cerr != nil || !ok {
			if cerr != nil {
				r.h.log.Warn("compaction after a context overflow failed", "session", r.sessionID, "err", cerr)
			}
			break
		}
		if req.Messages, merr = r.replay(withoutQueued(r.view(), later)); merr != nil {
			return outcome{err: merr}, true
		}
	}
	if tries.ledgerErr != nil {
		return outcome{err: tries.ledgerErr}, true
	}
	if tries.retried == tries.attempts {
		// Stopped while waiting to retry: what the failed attempt
		// streamed was declared void; there is nothing to keep.
		res = model.Result{}
	}
	if merr != nil {
		if !r.stopped() {
			if need, ok := errors.AsType[*ApprovalNeededError](merr); ok {
				// A hook stopped the call until a person says the run
				// may go on: it parks.
				return r.parkRun(need), true
			}
			if te, ok := errors.AsType[*TimeoutError](merr); ok {
				// The stream stayed silent past a chunk timeout, on every
				// attempt.
				reason := te.Error()
				if tries.attempts > 1 {
					reason = fmt.Sprintf("%s (gave up after %d attempts)", reason, tries.attempts)
				}
				return outcome{status: ledger.RunTimedOut, reason: reason, timeout: te.Kind}, true
			}
			c := model.Classify(merr)
			reason := fmt.Sprintf("model: %v", merr)
			if tries.attempts > 1 {
				reason = fmt.Sprintf("model: %v (%s; gave up after %d attempts)", merr, c.Reason, tries.attempts)
			} else if c.Kind != model.Transient {
				reason = fmt.Sprintf("model: %v (%s: %s, not retried)", merr, c.Kind, c.Reason)
			}
			return outcome{status: ledger.RunFailed, reason: reason}, true
		}
		if shutDown(ctx) {
			return outcome{err: ErrClosed}, true // the pass restarts on resume
		}
		// Cancelled or timed out mid-pass: keep what streamed.
		status, reason, timeout := doneStatus(ctx)
		if res.Text != "" || res.Reasoning != "" {
			step := r.stepEvent(res, "")
			step.Step.Partial = true
			step.Step.ToolCalls = nil // a cut-short pass asked for nothing
			if err := r.append(step); err != nil {
				return outcome{err: err}, true
			}
		}
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	res.ToolCalls = r.uniqueCallIDs(res.ToolCalls)
	if reason := cutShort(res.FinishReason); reason != "" {
		return r.failCutShort(res, reason), true
	}
	if len(res.ToolCalls) == 0 {
		return r.turnEnd(res)
	}
	next := ""
	if r.stepNow()+1 < r.agent.MaxSteps {
		next = ledger.NewID("resp")
	}
	if err := r.append(r.stepEvent(res, next)); err != nil {
		return outcome{err: err}, true
	}
	waiting, err := r.runTools(res.ToolCalls, nil)
	if err != nil {
		return outcome{err: err}, true
	}
	if len(waiting) > 0 || r.waits > 0 {
		if r.stopped() && !shutDown(r.ctx) {
			// Cancelled or timed out while the pass's other calls ran:
			// the run ends so, and the requests it made go with it — a
			// decision must not run a call of a run that was stopped.
			status, reason, timeout := doneStatus(r.ctx)
			if err := r.withdraw(waiting, res.ToolCalls, status, reason); err != nil {
				return outcome{err: err}, true
			}
			return outcome{status: status, reason: reason, timeout: timeout}, true
		}
		return r.park(waiting), true
	}
	return r.afterTools(next)
}

// withdraw denies the requests a stopped run's pass left waiting (as
// cancelling a parked run does), and answers their calls, which did not
// run, and the calls that wait in their journals.
func (r *run) withdraw(waiting []PendingApproval, calls []ledger.ToolCall, status ledger.RunStatus, reason string) error {
	why, msg := "the run was cancelled: "+reason, "error: the run was cancelled before this tool call ran"
	if status == ledger.RunTimedOut {
		why, msg = "the run timed out: "+reason, "error: the run timed out before this tool call ran: "+reason
	}
	pending := map[string]ledger.ApprovalRequest{}
	for _, a := range ledger.PendingApprovals(r.view()) {
		if a.RunID == r.id {
			pending[a.Request.ApprovalID] = a.Request
		}
	}
	if err := r.withdrawWaits(calls, msg); err != nil {
		return err
	}
	for _, w := range waiting {
		a, ok := pending[w.ApprovalID]
		if !ok {
			continue
		}
		if err := r.decideApproval(a, ledger.DecisionDeny, why, ""); err != nil {
			return err
		}
		for _, c := range calls {
			if c.ID == w.CallID {
				if err := r.appendResult(c, msg, true); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cutShort returns why a pass that finished for finishReason is no answer,
// "" when it is one: a reply cut at its max tokens, or stopped by the
// provider's content filter, is a failure, never a completed turn.
func cutShort(finishReason string) string {
	switch finishReason {
	case "length":
		return "truncated at max tokens"
	case "content_filter":
		return "stopped by the provider's content filter"
	}
	return ""
}

// failCutShort records a pass that was cut short (see cutShort) as it
// streamed — its tool calls, whose arguments may be cut, are answered
// without running — and fails the run with reason.
func (r *run) failCutShort(res model.Result, reason string) outcome {
	if err := r.append(r.stepEvent(res, "")); err != nil {
		return outcome{err: err}
	}
	for _, c := range res.ToolCalls {
		if err := r.appendResult(c, "error: not run: the model's reply was "+reason, true); err != nil {
			return outcome{err: err}
		}
	}
	return outcome{status: ledger.RunFailed, reason: reason}
}

// turnEnd records a pass in which the model ended its turn, and decides
// whether the run ends. A hook may poke the model to go on, or fail the run;
// otherwise the run is done — unless messages were queued meanwhile: then
// it goes on to answer them. The check and the step's append are one
// decision under appendMu, so that no send can queue into a run that has
// decided to end.
func (r *run) turnEnd(res model.Result) (outcome, bool) {
	var poke, failReason string
	if r.hooks != nil && r.hooks.turnEnd != nil {
		poke, failReason = r.hooks.turnEnd()
	}
	r.st.appendMu.Lock()
	if err := r.reloadIfStale(); err != nil {
		r.h.log.Warn("cannot reload the session before ending the run", "session", r.sessionID, "err", err)
	}
	r.st.mu.Lock()
	pending := len(ledger.PendingInputs(r.events)) - len(r.folding)
	more := (pending > 0 || poke != "") && failReason == "" && r.stepNow()+1 < r.agent.MaxSteps
	if !more {
		r.ending = true
	}
	r.st.mu.Unlock()
	next := ""
	if more {
		next = ledger.NewID("resp")
	}
	evs := []ledger.Event{r.stepEvent(res, next)}
	if more && poke != "" {
		p := r.newEvent(ledger.KindPoke)
		p.Poke = &ledger.Poke{Text: poke}
		evs = append(evs, p)
	}
	err := r.appendLocked(evs...)
	r.st.appendMu.Unlock()
	switch {
	case err != nil:
		return outcome{err: err}, true
	case failReason != "":
		return outcome{status: ledger.RunFailed, reason: failReason}, true
	case !more && poke != "":
		return outcome{status: ledger.RunFailed, reason: fmt.Sprintf("the run reached its bound of %d model passes before the model finished", r.agent.MaxSteps)}, true
	case !more:
		return outcome{status: ledger.RunCompleted}, true
	}
	r.advance(next)
	return outcome{}, false
}

// afterTools decides what follows a pass whose tool calls were all
// answered: the run stops (stopped, the host closing, a task's hook), fails
// at its bound of passes (no next item was minted), or goes on with the
// pass that streams into next.
func (r *run) afterTools(next string) (outcome, bool) {
	if shutDown(r.ctx) || r.h.draining.Load() {
		return outcome{err: ErrClosed}, true
	}
	if r.stopped() {
		status, reason, timeout := doneStatus(r.ctx)
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	if r.hooks != nil && r.hooks.afterTools != nil {
		if stop, status, reason := r.hooks.afterTools(); stop {
			return outcome{status: status, reason: reason}, true
		}
	}
	if next == "" {
		return outcome{status: ledger.RunFailed, reason: fmt.Sprintf("the run reached its bound of %d model passes while the model still called tools", r.agent.MaxSteps)}, true
	}
	r.advance(next)
	return outcome{}, false
}

// streamTries tells how a pass's attempts went.
type streamTries struct {
	attempts  int   // model calls made
	retried   int   // the last attempt a retry was recorded for
	ledgerErr error // a retry could not be recorded
}

// stream runs one model pass with retries of transient failures and the
// agent's fallback models, recording each retry in the ledger and telling
// clients to reset the item.
func (r *run) stream(req model.Request) (model.Result, streamTries, error) {
	var t streamTries
	r.checkBound()
	res, err := model.WithFallback(r.ctx, r.retryPolicy(), r.models(), func(ctx context.Context, m string, attempt int) (model.Result, error) {
		t.attempts = attempt
		req := req
		req.Model = m
		sink := &deltaSink{r: r, open: true, model: m, attempt: attempt}
		defer sink.close()
		if sink.parts = r.st.partListeners(); sink.parts != nil {
			req.RawChunks = true
		}
		ctx, watch := watchChunks(ctx, r.agent.Timeouts)
		onDelta := sink.add
		if watch != nil {
			onDelta = func(d model.Delta) {
				watch.kick()
				sink.add(d)
			}
		}
		chain := r.h.hooks.Load()
		ctx = chain.withCallInfo(ctx, CallInfo{SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name, Purpose: PurposePass, Attempt: attempt, Grants: r.grants})
		res, err := r.modelCall(ctx, req, attempt, func(ctx context.Context) (model.Result, error) {
			res, err := chain.stream(ctx, req, onDelta)
			return res, watch.stop(err)
		})
		if te, ok := errors.AsType[*TimeoutError](err); ok && watch != nil {
			r.emit(Event{Type: EventTimeout, Timeout: te.Kind, Reason: te.Error()})
		}
		return res, err
	}, func(ri model.RetryInfo) error {
		t.retried = ri.Attempt
		r.retryClass = string(ri.Class.Kind)
		r.h.tel.countRetry(ri.Class.Kind)
		// The failed attempt's text is dropped: the retry streams into
		// the same item from its start, and the progress event tells
		// clients to reset it.
		reason := retryReason(ri)
		e := r.newEvent(ledger.KindRetry)
		e.Retry = &ledger.Retry{ResponseID: r.responseID, Attempt: ri.Attempt, Reason: truncate(reason, 2000), DelayMS: ri.Delay.Milliseconds()}
		if err := r.append(e); err != nil {
			t.ledgerErr = err
			return err
		}
		if ri.Fallback != "" {
			r.h.log.Warn("model fallback", "session", r.sessionID, "run", r.id, "from", ri.Model, "to", ri.Fallback, "reason", ri.Class.Reason, "err", ri.Err)
		}
		r.resetLive(r.responseID)
		r.publish(Progress{Type: ProgressRetry, Retry: &RetryInfo{Reason: ri.Class.Reason + ": " + truncate(ri.Err.Error(), 500),
			Attempt: ri.Attempt, DelayMS: ri.Delay.Milliseconds(), Reset: true, Model: ri.Model, Fallback: ri.Fallback}})
		return nil
	})
	return res, t, err
}

// retryReason is a retry's reason in the ledger: the failure as
// classified, and, for a fallback, which model was left for which, and
// why.
func retryReason(ri model.RetryInfo) string {
	reason := fmt.Sprintf("%s: %v", ri.Class.Reason, ri.Err)
	if ri.Fallback == "" {
		return reason
	}
	why := "it is not served"
	if ri.GaveUp != "" {
		why = "its retries ran out after " + ri.GaveUp
	}
	return fmt.Sprintf("model %s: %s; falling back to %s (%s)", ri.Model, reason, ri.Fallback, why)
}

// models returns the models a pass asks, in order: the agent's model, then
// its fallbacks.
func (r *run) models() []string {
	return append([]string{r.agent.Model}, r.agent.Fallback...)
}

// retryPolicy is the agent's retry policy, else the host's.
func (r *run) retryPolicy() model.RetryPolicy {
	if r.agent.Retry != nil {
		return *r.agent.Retry
	}
	return r.h.retry
}

// interrupting returns, among the pending messages ids, those sent to
// stop the run in flight (Input.Overlap), with how.
func interrupting(events []ledger.Event, ids []string) map[string]Overlap {
	var out map[string]Overlap
	if len(ids) == 0 {
		return nil
	}
	for _, e := range events {
		if e.Input != nil && e.Input.Overlap != "" && slices.Contains(ids, e.Input.MessageID) {
			if out == nil {
				out = map[string]Overlap{}
			}
			out[e.Input.MessageID] = Overlap(e.Input.Overlap)
		}
	}
	return out
}

// stepNow is the index of the run's next pass.
func (r *run) stepNow() int { return int(r.step.Load()) }

// advance moves the run to its next pass, streaming into the item next.
func (r *run) advance(next string) {
	r.step.Add(1)
	r.responseID = next
	r.folding = nil
	r.resetLive(next)
}

// snapshotTools fixes the tools of the next pass: the agent's own, then
// those its toolsets offer now.
func (r *run) snapshotTools() {
	r.tools = make(map[string]Tool, len(r.agent.Tools))
	r.specs = r.specs[:0]
	add := func(t Tool, fromSet bool) {
		spec := t.Spec()
		if _, dup := r.tools[spec.Name]; dup || !ValidToolName(spec.Name) {
			if fromSet {
				r.h.log.Warn("tool skipped: its name is invalid or taken", "session", r.sessionID, "tool", spec.Name)
			}
			return
		}
		r.tools[spec.Name] = t
		schema := spec.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		r.specs = append(r.specs, model.ToolSpec{Name: spec.Name, Description: spec.Description, Parameters: schema})
	}
	for _, t := range r.agent.Tools {
		add(t, false)
	}
	for _, ts := range r.agent.Toolsets {
		for _, t := range ts.Tools() {
			if t != nil {
				add(t, true)
			}
		}
	}
}

// uniqueCallIDs returns calls with ids unique in the session: a call whose
// id is empty, or was used by an earlier pass of the session or earlier in
// this one, gets a fresh id. Some models number their calls per reply
// ("call_0", "call_1") or send none, while the ledger's replay, approvals
// and resume pair each result with its call by id: a reused id would pair
// a new call with an old result (and its approval). The model is then
// shown the ids as recorded.
func (r *run) uniqueCallIDs(calls []ledger.ToolCall) []ledger.ToolCall {
	if len(calls) == 0 {
		return calls
	}
	if r.callIDs == nil {
		r.callIDs = map[string]bool{}
		for _, e := range r.view() {
			if e.Step != nil {
				for _, c := range e.Step.ToolCalls {
					r.callIDs[c.ID] = true
				}
			}
		}
	}
	out, cloned := calls, false
	for i, c := range calls {
		// A call id of the events a snapshot stands for may be taken (the
		// set says maybe): renamed, as a taken one is.
		if c.ID == "" || r.callIDs[c.ID] || (r.snap != nil && r.snap.MayHoldCall(c.ID)) {
			if !cloned {
				out, cloned = slices.Clone(calls), true // the model's result is not ours to change
			}
			out[i].ID = ledger.NewID("call")
			r.h.log.Debug("a tool call's id was empty or used before: renamed", "session", r.sessionID, "run", r.id, "id", c.ID, "as", out[i].ID)
		}
		r.callIDs[out[i].ID] = true
	}
	return out
}

func (r *run) stepEvent(res model.Result, next string) ledger.Event {
	e := r.newEvent(ledger.KindStep)
	e.Step = &ledger.Step{ResponseID: r.responseID, NextResponseID: next, Index: r.stepNow(), Inputs: r.folding, Text: res.Text,
		Reasoning: res.Reasoning, ToolCalls: res.ToolCalls, FinishReason: res.FinishReason, Model: res.Model,
		GenerationID: res.GenerationID, Usage: res.Usage, Raw: res.Raw}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// replay returns the messages that replay events for the model, every
// blob the events refer to read back: the request is what it would have
// been with the bytes inline.
func (r *run) replay(events []ledger.Event) ([]ledger.Message, error) {
	events, err := resolveEvents(r.ctx, r.st.store, &r.blobs, events, false)
	if err != nil {
		return nil, err
	}
	return ledger.ReplayMessages(events), nil
}
