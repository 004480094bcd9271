package host

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Tasks.
//
// A task is a send whose run must end with a typed result. The model gets
// two extra tools: submit_deliverable, whose parameters are the
// deliverable's JSON Schema, and cancel_task, its way out. A submission is
// validated inside the tool call; the problems go back to the model as the
// tool's error result, and it may fix them and submit again. The first
// valid submission ends the run (completed) and the task (submitted). A
// model that ends its turn without calling either tool is poked (a poke
// event, which the model sees as a user message and the transcript does not
// show) up to TaskSpec.MaxPokes times, then the task fails.

// The names of the tools a task adds to its agent. An agent whose own tools
// use one of them cannot run a task.
const (
	SubmitToolName = "submit_deliverable"
	CancelToolName = "cancel_task"
)

// DefaultMaxPokes is the number of pokes of a task when TaskSpec.MaxPokes
// is 0.
const DefaultMaxPokes = 3

// Deliverable describes what a task must produce.
type Deliverable struct {
	// Name names the deliverable to the model, e.g. "invoice". Default:
	// "deliverable".
	Name string
	// Description tells the model what the deliverable is and what makes
	// a good one. Default: none.
	Description string
	// Schema is the JSON Schema of the deliverable's value, the parameters
	// of the submit_deliverable tool. Providers want an object schema
	// there: when the root's "type" is not "object" (an array, a string,
	// a boolean schema, a "type" list…), the tool's parameters are
	// {"type":"object","properties":{"value":<Schema>},"required":["value"]}
	// (with Schema's "$defs" and "definitions" moved to the root, so that
	// its "#/$defs/…" references still resolve), and the deliverable is
	// the "value" argument; problems then point under "/value". Required,
	// unless TaskSpec.Validator or ValidatorName is set; then the default
	// is {}, any JSON value.
	Schema json.RawMessage
}

// TaskSpec is one task for [Host.Task].
type TaskSpec struct {
	// Agent runs the task. Default: nil, the host's Options.Agent. Its
	// tools must not be named submit_deliverable or cancel_task.
	Agent *Agent
	// Prompt is the user message that states the task. Required.
	Prompt string
	// Parts is content sent after the prompt: the documents, images or
	// audio the task is about. Default: none.
	Parts []ledger.Part
	// Deliverable is what the task must produce.
	Deliverable Deliverable
	// Ephemeral keeps the task's session out of the host's storage: it
	// lives in a private in-memory store that is dropped when Task
	// returns, nothing is written to the host's storage, and a crash
	// loses it. By default a task is durable: its session is kept in the
	// host's storage, where it can be read (and its usage counted) like
	// any other, and a host resumes it after a crash. Either way the run
	// is one of the host's: [Host.Cancel] and [Host.IsRunning] reach it by
	// its session id. Default: false, durable.
	Ephemeral bool
	// SessionID is the session the task runs in. A durable task may name
	// an existing session: the model then sees the conversation so far.
	// Default: a new id, "task-<id>".
	SessionID string
	// MaxPokes bounds the pokes sent to a model that ends its turn
	// without submitting; the turn end after the last one fails the task.
	// Default: 0, which means 3; -1 disables pokes (the first such turn
	// end fails the task).
	MaxPokes int
	// Validator checks submissions. Default: nil, which means the host's
	// Options.Validators[ValidatorName] when ValidatorName is set, else
	// [SchemaValidator] of Deliverable.Schema.
	Validator Validator
	// ValidatorName names the validator in the ledger, so that a host
	// that resumes the task's run after a restart (the process died)
	// checks submissions with Options.Validators[ValidatorName]. A task
	// with a Validator and no ValidatorName cannot be checked after a
	// restart: its resumed run fails, saying so. Default: "", the
	// schema's own validator.
	ValidatorName string
	// OnProgress, when set, receives the run's progress, as
	// [SendOptions.OnProgress] does — approval-requested among it: a
	// durable task whose call needs a person waits, in Task, until the
	// request is decided (see [Session.Decide]) and the run ends. A task
	// that is not durable cannot wait: such a call is refused, and the
	// model told so.
	OnProgress func(Progress)
}

// OutcomeStatus is how a task ended.
type OutcomeStatus string

// The task outcomes.
const (
	// OutcomeSubmitted: the model submitted a deliverable the validator
	// accepted; Outcome.Value holds it.
	OutcomeSubmitted OutcomeStatus = "submitted"
	// OutcomeCancelled: the model called cancel_task (Outcome.Reason is
	// its reason), or the task's context was done, or [Host.Cancel]
	// stopped its run.
	OutcomeCancelled OutcomeStatus = "cancelled"
	// OutcomeFailed: the spec was invalid, the model kept stopping
	// without submitting, the model failed (retries exhausted, a fatal
	// error such as 402), the run reached its step bound, or storage
	// failed. Outcome.Reason says which.
	OutcomeFailed OutcomeStatus = "failed"
)

// Outcome is the result of [Host.Task].
type Outcome struct {
	// Status is how the task ended.
	Status OutcomeStatus
	// Value is the validated deliverable (as the validator returned it),
	// when Status is submitted; for a wrapped schema, the "value"
	// argument.
	Value json.RawMessage
	// Reason explains a status other than submitted.
	Reason string
	// SessionID is the task's session (for a task that is not durable,
	// one that no longer exists).
	SessionID string
	// RunID is the task's run, empty when none started.
	RunID string
	// Usage sums the provider-reported usage of the run's passes.
	Usage ledger.Usage
	// Cost sums the billed cost of the run's passes, in USD (see
	// [ledger.Usage.Billed]).
	Cost float64
}

// Task runs a task: it sends spec.Prompt to a session with the
// submit_deliverable and cancel_task tools added to the agent (and a line
// of instructions added to its system prompt), and runs it until the model
// submits a valid deliverable, cancels, or the task fails.
//
// Task never panics and reports everything, model misbehaviour included,
// in the Outcome: a spec that is invalid (a schema that does not compile, a
// tool name taken) fails before any model call; a done ctx cancels it.
//
// A durable task's run records the task (its deliverable, schema,
// validator name and poke bound) in its run-start event: a host that
// resumes the run after the process died ([Host.Resume], the auto-resume
// sweep) gives the model the task's tools again, keeps the pokes already
// spent and a submission already accepted, and ends the run as the task
// would; [Session.TaskOutcome] then reads the outcome from the ledger.
func (h *Host) Task(ctx context.Context, spec TaskSpec) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("task panicked", "session", out.SessionID, "panic", p, "stack", string(debug.Stack()))
			out.Status, out.Value, out.Reason = OutcomeFailed, nil, fmt.Sprintf("task: panic: %v", p)
		}
	}()
	t, agent, err := h.prepareTask(spec)
	out.SessionID = t.sessionID
	if err != nil {
		return t.fail(out, err.Error())
	}
	sess := h.Session(t.sessionID)
	if !spec.Ephemeral {
		if h.IsRunning(t.sessionID) {
			return t.fail(out, fmt.Sprintf("task: session %s has a run in flight; a task needs a run of its own", t.sessionID))
		}
		// A task's run is marked as one in the ledger: refused before
		// its message is written while a live host cannot read that.
		if err := h.featuresWritable(ledger.FeatureTask); err != nil {
			return t.fail(out, "task: "+err.Error())
		}
	} else {
		// The session lives in a private store, dropped when the task
		// returns; it is in the host's session table all the same, so
		// that Host.Cancel and IsRunning reach it.
		sess.private = newMemStore()
	}
	res, err := sess.send(ctx, spec.Prompt, SendOptions{Agent: &agent, Parts: spec.Parts, OnProgress: spec.OnProgress}, t.hooks())
	out.RunID, out.Usage, out.Cost = res.RunID, res.Usage, res.Cost
	if err == nil && res.Status == ledger.RunApprovalRequired {
		// The run waits for a person; whichever host continues it
		// (Session.Decide) runs it as the task, and its end is the
		// task's outcome.
		return h.awaitTask(ctx, sess, out)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		_, reason, _ := doneStatus(ctx)
		out.Status, out.Reason = OutcomeCancelled, reason
	case err != nil:
		out.Status, out.Reason = OutcomeFailed, err.Error()
	case t.submitted:
		out.Status, out.Value = OutcomeSubmitted, t.value
	case t.cancelled:
		out.Status, out.Reason = OutcomeCancelled, t.reason
	case res.Status == ledger.RunCancelled || res.Status == ledger.RunTimedOut:
		out.Status, out.Reason = OutcomeCancelled, res.Reason
	case res.Status == ledger.RunCompleted:
		// Only a run the task's hooks did not steer ends so: the message
		// joined a run already in flight.
		out.Status, out.Reason = OutcomeFailed, "task: the run ended without a deliverable"
	default:
		out.Status, out.Reason = OutcomeFailed, res.Reason
	}
	return out
}

// awaitTask waits for the end of a durable task's run that waits for
// approval, reading the ledger (the run may continue on another host);
// ctx ending first cancels the run.
func (h *Host) awaitTask(ctx context.Context, sess *Session, out Outcome) Outcome {
	delay := 100 * time.Millisecond
	for {
		events, _, err := sess.view(ctx)
		if err == nil {
			if done, ok := OutcomeOf(events, out.RunID); ok {
				done.SessionID = out.SessionID
				return done
			}
		}
		select {
		case <-ctx.Done():
			_, reason, _ := doneStatus(ctx)
			h.Cancel(out.SessionID, reason)
			out.Status, out.Reason = OutcomeCancelled, reason
			return out
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// TaskOutcome reads the outcome of the session's task run runID from the
// ledger, or of its latest task run when runID is empty: what [Host.Task]
// returned, or would have, for a task whose process died and whose run
// another host (or a later process) resumed. ok is false when there is no
// such task run, or when it has not ended yet (it runs, or waits to be
// resumed).
func (s *Session) TaskOutcome(ctx context.Context, runID string) (out Outcome, ok bool, err error) {
	events, _, err := s.view(ctx)
	if err != nil {
		return Outcome{}, false, err
	}
	out, ok = OutcomeOf(events, runID)
	out.SessionID = s.id
	return out, ok, nil
}

// OutcomeOf is [Session.TaskOutcome] over a session's events.
func OutcomeOf(events []ledger.Event, runID string) (Outcome, bool) {
	if runID == "" {
		for _, e := range events {
			if e.RunStart != nil && e.RunStart.Task != nil {
				runID = e.RunID
			}
		}
	}
	view, found := ledger.ProjectRun(events, runID)
	if !found || view.Task == nil || !view.Ended {
		return Outcome{RunID: runID}, false
	}
	out := Outcome{RunID: runID, Usage: view.Usage, Cost: view.Cost}
	switch view.Status {
	case ledger.RunCompleted:
		if view.Deliverable != nil {
			out.Status, out.Value = OutcomeSubmitted, view.Deliverable
		} else {
			out.Status, out.Reason = OutcomeFailed, "task: the run ended without a deliverable"
		}
	case ledger.RunCancelled, ledger.RunTimedOut:
		out.Status, out.Reason = OutcomeCancelled, strings.TrimPrefix(view.Reason, CancelToolName+": ")
	default:
		out.Status, out.Reason = OutcomeFailed, view.Reason
	}
	return out, true
}
