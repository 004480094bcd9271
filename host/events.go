package host

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Live events: what happened in a run, one [Event] per thing, for logs,
// metrics and alerts (Options.OnEvent). Most are read off the ledger events
// the host appends, at the one place it appends them, so that an event is
// told exactly when what it tells is durable; the others (a timeout that
// fired, a message queued for another host) are told where they happen.
// They reach the hook through a bounded queue and a goroutine of their own,
// so that a slow or panicking hook never stalls or breaks a run.

// EventType names a live [Event].
type EventType string

// The live event types.
const (
	// EventRunStart: a run started, or went on in this host after a
	// restart or its approvals (Resumed).
	EventRunStart EventType = "run-start"
	// EventStep: a model pass finished and is durable: FinishReason,
	// Model, Usage, Cost, DurationMS.
	EventStep EventType = "step"
	// EventRetry: a model pass failed and is retried (Retry).
	EventRetry EventType = "retry"
	// EventCompaction: the session was compacted.
	EventCompaction EventType = "compaction"
	// EventPoke: the host asked the model to go on (a task's reminder).
	EventPoke EventType = "poke"
	// EventQueuedMessage: a message (MessageID) was queued into a run in
	// flight — in this host, in another, or in a run that waits for
	// approvals — to be folded in at its next step.
	EventQueuedMessage EventType = "queued-message"
	// EventAutoResume: a host resumed a run its process left interrupted
	// (the boot sweep, a takeover of a dead host's lease, or a resume on
	// demand): Attempt counts the attempts.
	EventAutoResume EventType = "auto-resume"
	// EventApprovalRequested: a tool call waits for a person (Approval).
	EventApprovalRequested EventType = "approval-requested"
	// EventApprovalDecided: an approval request was decided (Approval).
	EventApprovalDecided EventType = "approval-decided"
	// EventTimeout: one of the agent's timeouts fired (Timeout; Tool for
	// a tool's). A tool's, first-chunk's and chunk's leave the run going;
	// total's and step's end it, and a run-end follows.
	EventTimeout EventType = "timeout"
	// EventRunEnd: the run ended (Status, Reason, Timeout), or parked
	// waiting for approvals (Status approval_required).
	EventRunEnd EventType = "run-end"
)

// Event is one live event of a run (see [Options.OnEvent]). Every event
// names its session, run, agent and step, and the time since the run
// started; the other fields are set by the types that document them.
type Event struct {
	Type      EventType `json:"type"`
	Time      time.Time `json:"time"`
	SessionID string    `json:"sessionId"`
	RunID     string    `json:"runId,omitempty"`
	Agent     string    `json:"agent,omitempty"`
	// Step is the index of the model pass the event belongs to.
	Step int `json:"step"`
	// ElapsedMS is the time since the run's run-start, in milliseconds.
	ElapsedMS int64 `json:"elapsedMs"`
	// Resumed tells, on run-start, that the run went on rather than began.
	Resumed bool `json:"resumed,omitempty"`

	// Of a step.
	FinishReason string        `json:"finishReason,omitempty"`
	Model        string        `json:"model,omitempty"`
	Usage        *ledger.Usage `json:"usage,omitempty"`
	// Cost is the step's billed cost, in USD.
	Cost float64 `json:"cost,omitempty"`
	// DurationMS is how long the step (or the timed out tool call) took.
	DurationMS int64 `json:"durationMs,omitempty"`
	// ToolCalls counts the tool calls the step asked for.
	ToolCalls int `json:"toolCalls,omitempty"`

	// Retry describes a retry.
	Retry *RetryEvent `json:"retry,omitempty"`
	// Timeout names the timeout of a timeout event, and of a run-end that
	// a timeout caused; Tool names the tool whose call timed out.
	Timeout TimeoutKind `json:"timeout,omitempty"`
	Tool    string      `json:"tool,omitempty"`
	// Status and Reason tell how a run ended.
	Status ledger.RunStatus `json:"status,omitempty"`
	Reason string           `json:"reason,omitempty"`
	// MessageID is the message a queued-message event queued.
	MessageID string `json:"messageId,omitempty"`
	// Attempt counts the resume attempts of an auto-resume event.
	Attempt int `json:"attempt,omitempty"`
	// Approval describes an approval event's request (without its token).
	Approval *ApprovalInfo `json:"approval,omitempty"`
}

// RetryEvent describes a retry in an [Event].
type RetryEvent struct {
	// Class is what classification made of the failure ("transient", …),
	// Reason why.
	Class  string `json:"class"`
	Reason string `json:"reason"`
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int `json:"attempt"`
	// DelayMS is the wait before the next attempt.
	DelayMS int64 `json:"delayMs"`
}

// eventQueueSize bounds the events waiting for the hook: past it, events
// are dropped (and counted) rather than stall a run.
const eventQueueSize = 4096

// eventBus hands live events to the hook on a goroutine of its own.
type eventBus struct {
	fn      func(Event)
	log     func(msg string, args ...any)
	ch      chan Event
	dropped atomic.Int64
	warned  atomic.Int64 // unix seconds of the last warning about drops
	done    chan struct{}

	mu     sync.RWMutex // guards closed against sends
	closed bool
}

func newEventBus(fn func(Event), size int, log func(string, ...any)) *eventBus {
	b := &eventBus{fn: fn, log: log, ch: make(chan Event, size), done: make(chan struct{})}
	go b.deliver()
	return b
}

// send queues e for the hook, or drops it when the queue is full.
func (b *eventBus) send(e Event) {
	if b == nil {
		return
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return
	}
	select {
	case b.ch <- e:
	default:
		n := b.dropped.Add(1)
		now := time.Now().Unix()
		if last := b.warned.Load(); now > last && b.warned.CompareAndSwap(last, now) {
			b.log("live events dropped: the OnEvent hook is slower than the runs", "dropped", n)
		}
	}
}

// deliver calls the hook for each event, in order, until the bus closes and
// the queue is drained. A panic in the hook is logged and the next event
// delivered.
func (b *eventBus) deliver() {
	defer close(b.done)
	for e := range b.ch {
		b.call(e)
	}
}

func (b *eventBus) call(e Event) {
	defer func() {
		if p := recover(); p != nil {
			b.log("the OnEvent hook panicked", "event", e.Type, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	b.fn(e)
}

// close stops taking events and waits, until ctx ends, for the hook to have
// seen those queued.
func (b *eventBus) close(ctx context.Context) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.ch)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
	}
}

// DroppedEvents returns how many live events were dropped because the
// OnEvent hook fell behind (see [Options.OnEvent]).
func (h *Host) DroppedEvents() int64 {
	if h.events == nil {
		return 0
	}
	return h.events.dropped.Load()
}

// observing reports whether anything reads the host's live events.
func (h *Host) observing() bool { return h.events != nil }

// emit completes e with the run's ids and times and sends it.
func (r *run) emit(e Event) {
	if !r.h.observing() {
		return
	}
	if e.Step == 0 {
		e.Step = r.stepNow()
	}
	r.h.emitFor(r.sessionID, r.id, r.agent.Name, r.startedAt, e)
}

// emitFor completes e with the session, run and agent it concerns, and the
// time since the run started (when started is known), and sends it.
func (h *Host) emitFor(sessionID, runID, agent string, started time.Time, e Event) {
	if !h.observing() {
		return
	}
	now := time.Now()
	e.Time = now.UTC()
	e.SessionID, e.RunID, e.Agent = sessionID, runID, agent
	if !started.IsZero() {
		e.ElapsedMS = now.Sub(started).Milliseconds()
	}
	h.events.send(e)
}

// emitStart tells that the run goes live, once its run-start is durable.
func (r *run) emitStart() {
	if !r.h.observing() {
		return
	}
	if r.startedAt.IsZero() {
		_, r.startedAt, _ = stepsAndStart(r.view(), r.id)
	}
	r.emit(Event{Type: EventRunStart, Resumed: !r.fresh})
}

// emitEnd tells how the run ended (or that it parked), and which timeout
// ended it, if one did (a chunk timeout was told as it cut the attempt).
func (r *run) emitEnd(status ledger.RunStatus, reason string, timeout TimeoutKind) {
	if timeout == TimeoutTotal || timeout == TimeoutStep {
		r.emit(Event{Type: EventTimeout, Timeout: timeout, Reason: reason})
	}
	r.emit(Event{Type: EventRunEnd, Status: status, Reason: reason, Timeout: timeout})
}

// observe tells the live events that the ledger events evs of the run are
// durable. (Run-start and run-end are told by emitStart and emitEnd, as
// the run goes live and ends.)
func (r *run) observe(evs []ledger.Event) {
	if !r.h.observing() {
		return
	}
	for _, ev := range evs {
		if ev.RunID != "" && ev.RunID != r.id {
			continue // a run this one supersedes
		}
		switch {
		case ev.Step != nil:
			s := ev.Step
			u := s.Usage
			e := Event{Type: EventStep, Step: s.Index, FinishReason: s.FinishReason, Model: s.Model, Usage: &u,
				Cost: u.Billed(), ToolCalls: len(s.ToolCalls)}
			if !r.passStart.IsZero() {
				e.DurationMS = time.Since(r.passStart).Milliseconds()
			}
			r.emit(e)
		case ev.Retry != nil:
			r.emit(Event{Type: EventRetry, Retry: &RetryEvent{Class: r.retryClass, Reason: ev.Retry.Reason,
				Attempt: ev.Retry.Attempt, DelayMS: ev.Retry.DelayMS}})
		case ev.Compaction != nil:
			r.emit(Event{Type: EventCompaction})
		case ev.Poke != nil:
			r.emit(Event{Type: EventPoke})
		case ev.Input != nil && ev.RunID == "":
			r.emit(Event{Type: EventQueuedMessage, MessageID: ev.Input.MessageID})
		case ev.ResumeAttempt != nil:
			r.emit(Event{Type: EventAutoResume, Attempt: ev.ResumeAttempt.Attempt})
		default:
			if e, ok := approvalEvent(ev); ok {
				r.emit(e)
			}
		}
	}
}

// approvalEvent returns the live event of an approval request or
// decision.
func approvalEvent(ev ledger.Event) (Event, bool) {
	switch {
	case ev.ApprovalRequest != nil:
		a := ev.ApprovalRequest
		return Event{Type: EventApprovalRequested, Approval: &ApprovalInfo{ApprovalID: a.ApprovalID, CallID: a.CallID,
			Tool: a.Name, Input: a.Input, Summary: a.Summary, Reason: a.Reason, State: ledger.ApprovalPending, ExpiresAt: a.ExpiresAt}}, true
	case ev.ApprovalDecision != nil:
		d := ev.ApprovalDecision
		return Event{Type: EventApprovalDecided, Reason: d.Reason,
			Approval: &ApprovalInfo{ApprovalID: d.ApprovalID, State: ledger.ApprovalStateOf(d.Decision), Reason: d.Reason}}, true
	}
	return Event{}, false
}

// observeDecided tells the live events of decisions recorded outside a
// run (Session.Decide, a cancel of a parked run): events are the session's
// ledger, add what was appended.
func (h *Host) observeDecided(sessionID string, events, add []ledger.Event) {
	if !h.observing() {
		return
	}
	for _, ev := range add {
		e, ok := approvalEvent(ev)
		if !ok {
			continue
		}
		agent, started := "", time.Time{}
		for _, x := range events {
			if x.RunID == ev.RunID && x.RunStart != nil {
				agent, started = x.RunStart.Agent, x.Time
				break
			}
		}
		h.emitFor(sessionID, ev.RunID, agent, started, e)
	}
}
