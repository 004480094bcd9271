package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/storage"
)

// appendTimeout bounds one ledger append of a run. Appends run detached from
// the caller's context: work that finished (a paid-for model pass, a tool
// that ran) is recorded even when the caller has just cancelled.
const appendTimeout = 30 * time.Second

// run is one execution of the agent loop over a session's ledger. The loop is
// a function of the ledger: every pass replays the events appended so far.
type run struct {
	h          *Host
	st         *sessionState
	sessionID  string
	agent      Agent
	onProgress func(Progress)

	events     []ledger.Event // the whole ledger, as appended
	runID      string
	responseID string   // the item the next pass streams into
	step       int      // index of the next pass
	folding    []string // queued messages the current pass folded in

	tools map[string]Tool
	specs []provider.ToolSpec
	hooks *runHooks
	live  *liveRun // while the run is the session's run in flight

	lease storage.Lease // the session's lease, when the store has leases
	stale atomic.Bool   // another host may have appended to the session

	onLive func() // called once the run is the session's run in flight
}

// startEvent mints the run-start event, and with it the first response id.
func (r *run) startEvent(inputs []string, now time.Time) ledger.Event {
	r.responseID = ledger.NewID("resp")
	return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: r.runID,
		RunStart: &ledger.RunStart{Inputs: inputs, ResponseID: r.responseID, Agent: r.agent.Name,
			Model: r.agent.Model, MaxSteps: r.agent.MaxSteps, Task: r.taskRecord()}}
}

// taskRecord returns the task the run works on, nil for an ordinary run.
func (r *run) taskRecord() *ledger.TaskRun {
	if r.hooks == nil {
		return nil
	}
	return r.hooks.task
}

func (r *run) newEvent(kind ledger.Kind) ledger.Event {
	return ledger.Event{ID: ledger.NewID("evt"), Kind: kind, Time: time.Now().UTC(), RunID: r.runID}
}

// append makes events durable, then adds them to the run's view of the
// ledger (and to the live view transcripts and queued sends read).
func (r *run) append(ctx context.Context, evs ...ledger.Event) error {
	r.st.appendMu.Lock()
	defer r.st.appendMu.Unlock()
	return r.appendLocked(ctx, evs...)
}

// appendLocked is append with the session's appendMu held.
func (r *run) appendLocked(ctx context.Context, evs ...ledger.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
	defer cancel()
	var err error
	if r.lease != nil {
		err = r.lease.Append(ctx, evs...) // fenced: refused if the lease lapsed
	} else {
		err = r.st.store.Append(ctx, r.sessionID, evs...)
	}
	if err != nil {
		return err
	}
	r.st.mu.Lock()
	if l := r.st.live; l != nil && l.runID == r.runID {
		// Queued sends append to the live view too: it is the one truth.
		l.events = append(l.events, evs...)
		r.events = l.events
	} else {
		r.events = append(r.events, evs...)
	}
	r.st.mu.Unlock()
	return nil
}

// sync refreshes the run's view of the ledger from the live view, which
// queued sends of this host append to, after reloading it from storage when
// another host may have queued a message.
func (r *run) sync(ctx context.Context) {
	r.st.appendMu.Lock()
	if err := r.reloadIfStale(ctx); err != nil {
		r.h.log.Warn("cannot reload the session; going on with what this host saw", "session", r.sessionID, "err", err)
	}
	r.st.appendMu.Unlock()
	r.st.mu.Lock()
	if l := r.st.live; l != nil && l.runID == r.runID {
		r.events = l.events
	}
	r.st.mu.Unlock()
}

func (r *run) emit(p Progress) {
	var joined []*progressQueue
	if r.live != nil {
		if j := r.live.joined.Load(); j != nil {
			joined = *j
		}
	}
	if r.onProgress == nil && len(joined) == 0 {
		return
	}
	p.SessionID, p.RunID = r.sessionID, r.runID
	if p.ResponseID == "" {
		p.ResponseID = r.responseID
	}
	for _, q := range joined {
		q.push(p)
	}
	if r.onProgress != nil {
		r.onProgress(p)
	}
}

// goLive registers the run as the session's run in flight, with a context
// that [Host.Cancel] can cancel; sends queue into it from then on. The
// returned function unregisters it.
func (r *run) goLive(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r.st.mu.Lock()
	r.live = &liveRun{events: r.events, runID: r.runID, responseID: r.responseID, cancel: cancel}
	r.st.live = r.live
	r.st.notifyLocked()
	if r.h.stopping.Load() {
		cancel(ErrClosed)
	}
	r.st.mu.Unlock()
	stopLease := r.holdLease(cancel)
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	r.watchRemote(wctx)
	if r.onLive != nil {
		r.onLive()
	}
	return ctx, func() {
		stopWatch()
		r.st.mu.Lock()
		r.st.live = nil
		r.st.notifyLocked()
		r.st.mu.Unlock()
		r.live = nil
		stopLease()
		cancel(nil)
	}
}

// loop runs model passes and tools until the model stops, the step bound is
// reached, the context is done or something fails, and records the end.
func (r *run) loop(ctx context.Context) (RunResult, error) {
	for {
		stop, status, reason, err := r.pass(ctx)
		if err != nil {
			return r.end(ctx, ledger.RunInterrupted, "", err)
		}
		if stop {
			return r.end(ctx, status, reason, nil)
		}
	}
}

// pass runs one model pass and its tools. It returns stop when the run must
// end with status and reason, and a non-nil error only when the ledger could
// not be written.
func (r *run) pass(ctx context.Context) (stop bool, status ledger.RunStatus, reason string, err error) {
	r.snapshotTools()
	// Messages queued while the run worked join this pass.
	r.sync(ctx)
	r.folding = ledger.PendingInputs(r.events)
	r.emit(Progress{Type: ProgressResponseStart})
	if r.needsCompaction(ctx) {
		if _, err := r.compact(ctx); err != nil {
			// The pass goes on uncompacted; an overflow, should it come,
			// compacts again.
			r.h.log.Warn("compaction failed", "session", r.sessionID, "run", r.runID, "err", err)
		}
	}
	req := provider.Request{Model: r.agent.Model, System: r.agent.System,
		Messages: ledger.ReplayMessages(r.events), Tools: r.specs, MaxTokens: r.agent.MaxTokens}
	var res provider.Result
	var merr error
	var tries streamTries
	for overflowed := false; ; overflowed = true {
		res, tries, merr = r.stream(ctx, req)
		if merr == nil || ctx.Err() != nil || tries.ledgerErr != nil || overflowed || provider.Classify(merr).Kind != provider.ContextOverflow {
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
		req.Messages = ledger.ReplayMessages(r.events)
	}
	if tries.ledgerErr != nil {
		return true, "", "", tries.ledgerErr
	}
	attempts := tries.attempts
	if tries.retried == attempts {
		// Cancelled while waiting to retry: what the failed attempt
		// streamed was declared void; there is nothing to keep.
		res = provider.Result{}
	}
	if merr != nil {
		if ctx.Err() == nil {
			c := provider.Classify(merr)
			reason := fmt.Sprintf("model: %v", merr)
			if attempts > 1 {
				reason = fmt.Sprintf("model: %v (%s; gave up after %d attempts)", merr, c.Reason, attempts)
			} else if c.Kind != provider.Transient {
				reason = fmt.Sprintf("model: %v (%s, not retried)", merr, c.Kind)
			}
			return true, ledger.RunFailed, reason, nil
		}
		if shutDown(ctx) {
			return true, "", "", ErrClosed // the pass restarts on resume
		}
		// Cancelled or timed out mid-pass: keep what streamed.
		status, reason := doneStatus(ctx)
		if res.Text != "" || res.Reasoning != "" {
			step := r.stepEvent(res, "")
			step.Step.Partial = true
			step.Step.ToolCalls = nil // a cut-short pass asked for nothing
			if err := r.append(ctx, step); err != nil {
				return true, status, reason, err
			}
		}
		return true, status, reason, nil
	}

	if len(res.ToolCalls) == 0 {
		// The model ended its turn. A hook may poke it to go on, or fail
		// the run.
		var poke, failReason string
		if r.hooks != nil && r.hooks.turnEnd != nil {
			poke, failReason = r.hooks.turnEnd()
		}
		// Otherwise the run is done — unless messages were queued
		// meanwhile: then it goes on to answer them. The check and the
		// step's append are one decision under appendMu, so that no send
		// can queue into a run that has decided to end.
		r.st.appendMu.Lock()
		if err := r.reloadIfStale(ctx); err != nil {
			r.h.log.Warn("cannot reload the session before ending the run", "session", r.sessionID, "err", err)
		}
		r.st.mu.Lock()
		pending := len(ledger.PendingInputs(r.st.live.events)) - len(r.folding)
		more := (pending > 0 || poke != "") && failReason == "" && r.step+1 < r.agent.MaxSteps
		if !more {
			r.st.live.ending = true
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
		err := r.appendLocked(ctx, evs...)
		r.st.appendMu.Unlock()
		switch {
		case err != nil:
			return true, "", "", err
		case failReason != "":
			return true, ledger.RunFailed, failReason, nil
		case !more && poke != "":
			return true, ledger.RunFailed, fmt.Sprintf("the run reached its bound of %d model passes before the model finished", r.agent.MaxSteps), nil
		case !more:
			return true, ledger.RunCompleted, "", nil
		}
		r.advance(next)
		return false, "", "", nil
	}
	next := ""
	if r.step+1 < r.agent.MaxSteps {
		next = ledger.NewID("resp")
	}
	if err := r.append(ctx, r.stepEvent(res, next)); err != nil {
		return true, "", "", err
	}
	if err := r.runTools(ctx, res.ToolCalls); err != nil {
		return true, "", "", err
	}
	if shutDown(ctx) {
		return true, "", "", ErrClosed
	}
	if ctx.Err() != nil {
		status, reason := doneStatus(ctx)
		return true, status, reason, nil
	}
	if r.hooks != nil && r.hooks.afterTools != nil {
		if stop, status, reason := r.hooks.afterTools(); stop {
			return true, status, reason, nil
		}
	}
	if next == "" {
		return true, ledger.RunFailed, fmt.Sprintf("the run reached its bound of %d model passes while the model still called tools", r.agent.MaxSteps), nil
	}
	r.advance(next)
	return false, "", "", nil
}

// streamTries tells how a pass's attempts went.
type streamTries struct {
	attempts  int   // model calls made
	retried   int   // the last attempt a retry was recorded for
	ledgerErr error // a retry could not be recorded
}

// stream runs one model pass with retries of transient failures, recording
// each retry in the ledger and telling clients to reset the item.
func (r *run) stream(ctx context.Context, req provider.Request) (provider.Result, streamTries, error) {
	var t streamTries
	res, err := provider.WithRetries(ctx, r.h.retry, func(ctx context.Context, attempt int) (provider.Result, error) {
		t.attempts = attempt
		sink := &deltaSink{r: r, open: true}
		defer sink.close()
		return r.h.model.Stream(ctx, req, sink.add)
	}, func(ri provider.RetryInfo) error {
		t.retried = ri.Attempt
		// The failed attempt's text is dropped: the retry streams into
		// the same item from its start, and the progress event tells
		// clients to reset it.
		reason := fmt.Sprintf("%s: %v", ri.Class.Reason, ri.Err)
		e := r.newEvent(ledger.KindRetry)
		e.Retry = &ledger.Retry{ResponseID: r.responseID, Attempt: ri.Attempt, Reason: truncate(reason, 2000), DelayMS: ri.Delay.Milliseconds()}
		if err := r.append(ctx, e); err != nil {
			t.ledgerErr = err
			return err
		}
		r.resetLive(r.responseID)
		r.emit(Progress{Type: ProgressRetry, Retry: &RetryInfo{Reason: ri.Class.Reason + ": " + truncate(ri.Err.Error(), 500),
			Attempt: ri.Attempt, DelayMS: ri.Delay.Milliseconds(), Reset: true}})
		return nil
	})
	return res, t, err
}

// deltaSink takes the deltas of one model call into the live view and the
// progress stream. A Model may call it from any goroutine, even
// concurrently; deltas are taken one at a time, in the order they come, and
// only until the call that was given the sink returns: a late delta of an
// attempt that gave up belongs to no item any more, and is dropped.
type deltaSink struct {
	r    *run
	mu   sync.Mutex // held while a delta is taken, so that close waits for it
	open bool
}

func (s *deltaSink) add(d provider.Delta) {
	var typ ProgressType
	switch d.Kind {
	case provider.DeltaText:
		typ = ProgressText
	case provider.DeltaReasoning:
		typ = ProgressReasoning
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return
	}
	r := s.r
	r.st.mu.Lock()
	l := r.st.live
	var offset int
	if typ == ProgressText {
		offset = l.textRunes
		l.text = append(l.text, d.Text...)
		l.textRunes += utf8.RuneCountInString(d.Text)
	} else {
		offset = l.reasoningRunes
		l.reasoning = append(l.reasoning, d.Text...)
		l.reasoningRunes += utf8.RuneCountInString(d.Text)
	}
	r.st.mu.Unlock()
	r.emit(Progress{Type: typ, Delta: d.Text, Offset: offset})
}

// close stops the sink, once any delta being taken is.
func (s *deltaSink) close() {
	s.mu.Lock()
	s.open = false
	s.mu.Unlock()
}

// resetLive points the live view at the item responseID, with no text yet.
func (r *run) resetLive(responseID string) {
	r.st.mu.Lock()
	l := r.st.live
	l.responseID = responseID
	l.text, l.reasoning, l.textRunes, l.reasoningRunes = nil, nil, 0, 0
	r.st.mu.Unlock()
}

// runHooks let a caller of the loop steer a run (tasks use them). Both are
// called from the run's goroutine.
type runHooks struct {
	// afterTools is called once a pass's tool results are durable; stop
	// ends the run with status and reason.
	afterTools func() (stop bool, status ledger.RunStatus, reason string)
	// turnEnd is called when the model ends its turn (a pass without tool
	// calls). A non-empty poke is sent to the model as a user message,
	// and the run goes on; a non-empty fail ends the run failed with that
	// reason; both empty let the run complete.
	turnEnd func() (poke, fail string)
	// task, when set, is recorded in the run's run-start: the run is a
	// task's, and a host resuming it rebuilds these hooks from it.
	task *ledger.TaskRun
	// deliverable returns what a run that completes delivers, recorded in
	// its run-end.
	deliverable func() json.RawMessage
}

// advance moves the run to its next pass, streaming into the item next.
func (r *run) advance(next string) {
	r.step++
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
		r.specs = append(r.specs, provider.ToolSpec{Name: spec.Name, Description: spec.Description, Parameters: schema})
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

func (r *run) stepEvent(res provider.Result, next string) ledger.Event {
	e := r.newEvent(ledger.KindStep)
	e.Step = &ledger.Step{ResponseID: r.responseID, NextResponseID: next, Index: r.step, Inputs: r.folding, Text: res.Text,
		Reasoning: res.Reasoning, ToolCalls: res.ToolCalls, FinishReason: res.FinishReason, Model: res.Model,
		GenerationID: res.GenerationID, Usage: res.Usage, Raw: res.Raw}
	return e
}

// doneStatus maps a done context to the run status it ends with.
func doneStatus(ctx context.Context) (ledger.RunStatus, string) {
	cause := context.Cause(ctx)
	var ce *CancelledError
	switch {
	case errors.As(cause, &ce):
		return ledger.RunCancelled, ce.Reason
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ledger.RunTimedOut, "the run's deadline passed"
	case cause != nil && !errors.Is(cause, context.Canceled):
		return ledger.RunCancelled, cause.Error()
	}
	return ledger.RunCancelled, "cancelled by the caller"
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

// runTools runs a pass's tool calls in order, persisting each result as it
// finishes. Once ctx is done, the calls not yet run get a synthetic result
// saying so, so that every call the model made is answered. The error is
// non-nil only when the ledger could not be written.
func (r *run) runTools(ctx context.Context, calls []ledger.ToolCall) error {
	for _, c := range calls {
		if shutDown(ctx) {
			return ErrClosed // the calls left run when the run is resumed
		}
		if ctx.Err() != nil {
			if err := r.appendResult(ctx, c, "error: the run was cancelled before this tool call ran", true); err != nil {
				return err
			}
			continue
		}
		if err := r.runTool(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) runTool(ctx context.Context, c ledger.ToolCall) error {
	input := json.RawMessage(c.Arguments)
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	progressInput := input
	if !json.Valid(input) {
		progressInput, _ = json.Marshal(c.Arguments)
	}
	r.emit(Progress{Type: ProgressToolStart, Tool: &ToolInfo{CallID: c.ID, Name: c.Name, Input: progressInput}})

	result := &ledger.ToolResult{CallID: c.ID, Name: c.Name}
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
			if err := r.append(ctx, e); err != nil {
				return err
			}
		}
		out, err := callTool(ctx, tool, spec, ToolCall{ID: c.ID, SessionID: r.sessionID, Name: c.Name, Input: input}, r.h.toolTimeout)
		if shutDown(ctx) {
			// Stopped by the host's shutdown: as after a crash, the call
			// has no result, and the resumed run decides (its effect and
			// idempotency) whether it runs again.
			return ErrClosed
		}
		// The ledger carries text as UTF-8: invalid bytes from a tool
		// become U+FFFD here rather than fail the append.
		result.Source = strings.ToValidUTF8(out.Source, "\uFFFD")
		if err != nil {
			result.IsError, result.Output = true, "error: "+strings.ToValidUTF8(err.Error(), "\uFFFD")
		} else {
			result.Output = strings.ToValidUTF8(out.Output, "\uFFFD")
		}
	}
	result.DurationMS = time.Since(started).Milliseconds()
	e := r.newEvent(ledger.KindToolResult)
	e.ToolResult = result
	if err := r.append(ctx, e); err != nil {
		return err
	}
	r.emit(Progress{Type: ProgressToolEnd, Tool: &ToolInfo{CallID: c.ID, Name: c.Name,
		Output: result.Output, IsError: result.IsError}})
	return nil
}

// end records the run's end and builds its result. storeErr is the ledger
// write that failed, if one did: then the end cannot be recorded either, and
// the run stays open in the ledger (interrupted, resumable).
func (r *run) end(ctx context.Context, status ledger.RunStatus, reason string, storeErr error) (RunResult, error) {
	r.st.appendMu.Lock()
	r.st.mu.Lock()
	l := r.st.live
	if l != nil && l.runID == r.runID {
		l.ending = true // no send queues into the run from now on
	} else {
		l = nil
	}
	r.st.mu.Unlock()
	if storeErr == nil {
		e := r.newEvent(ledger.KindRunEnd)
		// Messages the last pass had folded in, if it left no step,
		// are answered by this end.
		e.RunEnd = &ledger.RunEnd{Status: status, Reason: reason, Inputs: r.unrecordedFolds()}
		if status == ledger.RunCompleted && r.hooks != nil && r.hooks.deliverable != nil {
			e.RunEnd.Deliverable = r.hooks.deliverable()
		}
		storeErr = r.appendLocked(ctx, e)
	}
	var waiters []*waiter
	if l != nil {
		r.st.mu.Lock()
		waiters, l.waiters = l.waiters, nil
		r.st.mu.Unlock()
	}
	r.st.appendMu.Unlock()

	switch {
	case errors.Is(storeErr, ErrClosed):
		status, reason = ledger.RunInterrupted, "the host closed; the run can be resumed"
		r.h.log.Info("run stopped by the host's shutdown; it stays resumable", "session", r.sessionID, "run", r.runID)
	case storeErr != nil:
		status, reason = ledger.RunInterrupted, fmt.Sprintf("storage: %v", storeErr)
		r.h.log.Error("run interrupted: the ledger could not be written",
			"session", r.sessionID, "run", r.runID, "err", storeErr)
	}
	view, _ := ledger.ProjectRun(r.events, r.runID)
	res := RunResult{Status: status, Reason: reason, Text: view.Text, RunID: r.runID,
		ResponseID: r.responseID, Usage: view.Usage, Cost: view.Cost}
	r.emit(Progress{Type: ProgressRunEnd, Status: status, Reason: reason})
	var err error
	if storeErr != nil {
		err = fmt.Errorf("host: session %s run %s: %w", r.sessionID, r.runID, storeErr)
	}
	// Senders whose messages the run answered get its result; the others
	// (queued after its last pass began) go on to a successor run.
	answered := r.answered()
	for _, w := range waiters {
		if answered[w.messageID] {
			wr := res
			wr.MessageID = w.messageID
			w.ch <- waitResult{res: wr, err: err}
		} else {
			w.ch <- waitResult{again: true}
		}
	}
	return res, err
}

// unrecordedFolds returns the messages the current pass folded in when no
// step of the run records them.
func (r *run) unrecordedFolds() []string {
	if len(r.folding) == 0 {
		return nil
	}
	recorded := r.answered()
	var out []string
	for _, id := range r.folding {
		if !recorded[id] {
			out = append(out, id)
		}
	}
	return out
}

// answered returns the messages this run picked up, per its events.
func (r *run) answered() map[string]bool {
	picked := map[string]bool{}
	for _, e := range r.events {
		if e.RunID != r.runID {
			continue
		}
		var ids []string
		switch {
		case e.RunStart != nil:
			ids = e.RunStart.Inputs
		case e.Step != nil:
			ids = e.Step.Inputs
		case e.RunEnd != nil:
			ids = e.RunEnd.Inputs
		}
		for _, id := range ids {
			picked[id] = true
		}
	}
	return picked
}
