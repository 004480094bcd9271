package host

import (
	"context"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// State is what a session is doing, as [Session.Status] reports it.
type State string

// The states of a session.
const (
	// StateIdle: the session has no run and no message waiting.
	StateIdle State = "idle"
	// StateQueued: messages wait for a run to pick them up (none runs).
	StateQueued State = "queued"
	// StateRunning: a run is in flight, in this host or in another that
	// holds the session's lease.
	StateRunning State = "running"
	// StateApprovalRequired: the session's run is parked until people
	// decide its approval requests.
	StateApprovalRequired State = "approval_required"
	// StateWaiting: the session's run is parked until the events or times
	// its calls wait for come (Status.Waits).
	StateWaiting State = "waiting"
	// StateCompleted, StateFailed, StateCancelled, StateTimedOut: how the
	// session's last run ended.
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	StateTimedOut  State = "timed_out"
	// StateInterrupted: the session's run has no end and no host runs it
	// (its process died); a resume continues it.
	StateInterrupted State = "interrupted"
	// StateDamaged: the session's ledger does not load, for damage the
	// storage will not skip (storage.ErrCorrupt). Session.Status fails
	// then, naming the damage; lists of sessions show the state, with
	// the damage as the reason, and go on.
	StateDamaged State = "damaged"
)

// Status is what a session is doing and how it got there (see
// [Session.Status]).
type Status struct {
	SessionID string `json:"session_id"`
	State     State  `json:"state"`
	// RunID is the run in flight, parked or interrupted, else the last
	// run; "" when the session has none.
	RunID string `json:"run_id,omitempty"`
	// Agent names the agent of that run, as its run-start recorded it.
	Agent string `json:"agent,omitempty"`
	// Step is the number of model passes the run has recorded: while it
	// runs, the index of the pass in flight.
	Step int `json:"step"`
	// Since is when the state began: the run's start (running,
	// interrupted), the last approval request (approval_required), the
	// run's end, or the oldest message waiting (queued).
	Since time.Time `json:"since,omitzero"`
	// Queued counts the messages that no run has picked up yet.
	Queued int `json:"queued"`
	// Reason explains how the last run ended; Timeout names the timeout
	// that ended a timed_out one.
	Reason  string      `json:"reason,omitempty"`
	Timeout TimeoutKind `json:"timeout,omitempty"`
	// Holder names the host that leads the running run, when the storage
	// tells (storage.LeaseInspector); "" otherwise.
	Holder string `json:"holder,omitempty"`
	// Approvals are the requests a parked run waits on, with their tokens
	// — or, for a run whose sub-agent's call waits for a child session
	// parked on approvals (state approval_required too), the child's
	// requests, their SessionID the child's.
	Approvals []PendingApproval `json:"approvals,omitempty"`
	// Waits are the waits of a parked run's calls (state waiting).
	Waits []Waiting `json:"waits,omitempty"`
}

// Status returns what the session is doing: its state, the run it concerns
// and its progress, the messages waiting, and the approvals pending. It is
// read from the ledger — so it is the same on every host sharing the
// storage — and from this host's live view of a run in flight, and, for a
// run another host may lead, from the session's lease (when the storage
// implements storage.LeaseInspector; otherwise a run this host does not
// run is reported interrupted).
func (s *Session) Status(ctx context.Context) (Status, error) {
	events, live, err := s.view(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("host: status of session %s: %w", s.id, err)
	}
	return s.statusOf(ctx, events, live)
}

// statusOf is the status of the session whose ledger is events, with live
// the view of its run in flight in this host, if any.
func (s *Session) statusOf(ctx context.Context, events []ledger.Event, live []ledger.Live) (Status, error) {
	return s.statusAt(ctx, events, live, 0)
}

// maxChildDepth bounds how deep a status looks for a sub-agent's child
// waiting for approvals (see waitingChild).
const maxChildDepth = 8

// statusAt is statusOf for a session depth levels below the one asked
// about (its sub-agents' children).
func (s *Session) statusAt(ctx context.Context, events []ledger.Event, live []ledger.Live, depth int) (Status, error) {
	st := Status{SessionID: s.id, State: StateIdle}
	pending := ledger.PendingInputs(events)
	st.Queued = len(pending)
	open := ledger.OpenRuns(events)
	if len(open) > 0 {
		id := open[len(open)-1]
		st.RunID = id
		st.Step, st.Since, st.Agent = stepsAndStart(events, id)
		switch {
		case ledger.Parked(events, id):
			st.State = StateApprovalRequired
			res := s.h.parkedResult(s.id, events, id)
			st.Approvals, st.Waits = res.Approvals, res.Waits
			for _, a := range st.Approvals {
				st.Since = a.RequestedAt // the last request's
			}
			if res.Status == ledger.RunWaiting {
				st.State = StateWaiting
				for _, w := range st.Waits {
					st.Since = w.Since // the last wait's
				}
			}
		case len(live) > 0 && live[0].RunID == id:
			st.State = StateRunning
		default:
			st.State = StateInterrupted
			if in, ok := s.h.store.(storage.LeaseInspector); ok {
				holder, _, err := in.LeaseHolder(ctx, s.id)
				if err != nil {
					return Status{}, fmt.Errorf("host: status of session %s: %w", s.id, err)
				}
				if holder != "" {
					st.State, st.Holder = StateRunning, holder
				}
			}
		}
		if st.State == StateRunning && depth < maxChildDepth {
			// A run whose sub-agent's child waits for approvals waits for
			// them too: it shows the child's requests.
			child, err := s.waitingChild(ctx, events, st.RunID, depth)
			if err != nil {
				return Status{}, err
			}
			if child.State == StateApprovalRequired {
				st.State, st.Since, st.Approvals = StateApprovalRequired, child.Since, child.Approvals
			}
		}
		return st, nil
	}
	if len(pending) > 0 {
		st.State = StateQueued
		for _, e := range events {
			if e.Input != nil && e.Input.MessageID == pending[0] {
				st.Since = e.Time
				break
			}
		}
		return st, nil
	}
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.RunEnd == nil {
			continue
		}
		st.RunID, st.Since = e.RunID, e.Time
		st.Step, _, st.Agent = stepsAndStart(events, e.RunID)
		st.State, st.Reason, st.Timeout = State(e.RunEnd.Status), e.RunEnd.Reason, TimeoutKind(e.RunEnd.Timeout)
		if e.RunEnd.Status == ledger.RunInterrupted {
			st.State = StateInterrupted
		}
		break
	}
	return st, nil
}

// waitingChild returns the status of the child session of a sub-agent's
// call the run waits for (a call of its last pass with no result, whose
// child session (ChildSessionID) waits for approvals); a zero Status when
// there is none.
func (s *Session) waitingChild(ctx context.Context, events []ledger.Event, runID string, depth int) (Status, error) {
	var calls []ledger.ToolCall
	answered := map[string]bool{}
	for _, e := range events {
		switch {
		case e.RunID != runID:
		case e.Step != nil && len(e.Step.ToolCalls) > 0:
			calls = e.Step.ToolCalls
		case e.ToolResult != nil:
			answered[e.ToolResult.CallID] = true
		}
	}
	for _, c := range calls {
		if answered[c.ID] {
			continue
		}
		child := &Session{h: s.h, id: ChildSessionID(s.id, c.ID)}
		cev, clive, err := child.view(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("host: status of session %s: child %s: %w", s.id, child.id, err)
		}
		if len(cev) == 0 {
			continue
		}
		cst, err := child.statusAt(ctx, cev, clive, depth+1)
		if err != nil {
			return Status{}, err
		}
		if cst.State == StateApprovalRequired {
			return cst, nil
		}
	}
	return Status{}, nil
}

// stepsAndStart returns the number of whole passes the run recorded, the
// time of its run-start and the agent it names.
func stepsAndStart(events []ledger.Event, runID string) (steps int, start time.Time, agent string) {
	for _, e := range events {
		if e.RunID != runID {
			continue
		}
		switch {
		case e.RunStart != nil:
			start, agent = e.Time, e.RunStart.Agent
		case e.Step != nil && !e.Step.Partial:
			steps++
		}
	}
	return steps, start, agent
}
