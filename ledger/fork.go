package ledger

import (
	"fmt"
	"slices"
)

// ForkPoint is where [ForkEvents] found a fork to start.
type ForkPoint struct {
	// EventID is the id of the fork point's event: a user message's input
	// or a step.
	EventID string
	// Item is the fork point as a transcript shows it: the message id or
	// the step's response id.
	Item string
	// Message is the user message a fork made at a message answers anew;
	// nil for a fork made at a step.
	Message *Input
	// RunID is the run a fork made at a step goes on with; empty for a
	// fork made at a message.
	RunID string
	// Task is the task record of that run, nil for an ordinary run.
	Task *TaskRun
}

// ForkEvents returns the events of a session that a fork made at at copies,
// and where that is. at is the id of an input or step event, a user
// message's id, or a step's response id (what a transcript shows as an
// item id). It is a pure function of the events:
//
//   - at a user message, the fork copies every event before the message's
//     input and answers the message anew; a run still open there whose only
//     later event is its end (an interrupted run that the message's run
//     closed) is copied with that end; a message queued into a run that
//     was working is refused ([ErrForkPointUnfinished]);
//   - at a step, the fork copies every event up to the step, then the tool
//     starts, approval requests and decisions, and results of the step's
//     tool calls, and goes on with the step's run after them; a step cut
//     short, or with a call that has no result, is refused;
//   - the source's own fork record, when the source is a fork, is not
//     copied (the new fork's record names its source; the copies keep
//     their ids).
//
// It returns [ErrForkPointNotFound] when at names nothing of the session.
func ForkEvents(events []Event, at string) ([]Event, ForkPoint, error) {
	i := forkIndex(events, at)
	if i < 0 {
		return nil, ForkPoint{}, fmt.Errorf("%w: %q is no event, message or response id of the session", ErrForkPointNotFound, at)
	}
	e := events[i]
	switch e.Kind {
	case KindInput:
		prefix := copyable(events[:i])
		for _, run := range OpenRuns(prefix) {
			end, ok := onlyEnd(events[i:], run)
			if !ok {
				return nil, ForkPoint{}, fmt.Errorf("%w: message %s was queued while run %s worked; fork at a step of that run instead",
					ErrForkPointUnfinished, e.Input.MessageID, run)
			}
			prefix = append(prefix, end)
		}
		in := *e.Input
		return prefix, ForkPoint{EventID: e.ID, Item: in.MessageID, Message: &in}, nil
	case KindStep:
		s := e.Step
		if s.Partial {
			return nil, ForkPoint{}, fmt.Errorf("%w: step %s was cut short (its run was cancelled)", ErrForkPointUnfinished, s.ResponseID)
		}
		prefix := copyable(events[:i+1])
		calls := map[string]bool{}
		for _, c := range s.ToolCalls {
			calls[c.ID] = true
		}
		answered := map[string]bool{}
		approvals := map[string]bool{}
		for _, x := range events[i+1:] {
			if x.RunID != e.RunID {
				continue
			}
			if x.Step != nil || x.RunEnd != nil {
				break
			}
			switch {
			case x.ToolStart != nil && calls[x.ToolStart.CallID]:
			case x.ToolResult != nil && calls[x.ToolResult.CallID] && !answered[x.ToolResult.CallID]:
				answered[x.ToolResult.CallID] = true
			case x.ApprovalRequest != nil && x.ApprovalRequest.CallID != "" && calls[x.ApprovalRequest.CallID]:
				approvals[x.ApprovalRequest.ApprovalID] = true
			case x.ApprovalDecision != nil && approvals[x.ApprovalDecision.ApprovalID]:
			default:
				continue
			}
			prefix = append(prefix, x)
		}
		for _, c := range s.ToolCalls {
			if !answered[c.ID] {
				return nil, ForkPoint{}, fmt.Errorf("%w: the call %s of %s in step %s has no result (the step is not finished)",
					ErrForkPointUnfinished, c.ID, c.Name, s.ResponseID)
			}
		}
		for _, run := range OpenRuns(prefix) {
			if run == e.RunID {
				continue
			}
			if end, ok := onlyEnd(events[i+1:], run); ok {
				prefix = append(prefix, end)
			}
		}
		var task *TaskRun
		for _, x := range prefix {
			if x.RunStart != nil && x.RunID == e.RunID {
				task = x.RunStart.Task
			}
		}
		return prefix, ForkPoint{EventID: e.ID, Item: s.ResponseID, RunID: e.RunID, Task: task}, nil
	}
	return nil, ForkPoint{}, fmt.Errorf("%w: event %s is a %s, not a user message or a step", ErrForkPointUnfinished, e.ID, e.Kind)
}

// forkIndex returns the index of the event at names, or -1.
func forkIndex(events []Event, at string) int {
	if at == "" {
		return -1
	}
	for i, e := range events {
		switch {
		case e.ID == at,
			e.Input != nil && e.Input.MessageID == at,
			e.Step != nil && e.Step.ResponseID == at:
			return i
		}
	}
	return -1
}

// copyable returns a copy of events without fork records.
func copyable(events []Event) []Event {
	out := make([]Event, 0, len(events))
	for _, e := range events {
		if e.Kind != KindFork {
			out = append(out, e)
		}
	}
	return slices.Clip(out)
}

// onlyEnd returns the run-end of run among events when it is the run's only
// event there.
func onlyEnd(events []Event, run string) (Event, bool) {
	var end Event
	found := false
	for _, e := range events {
		if e.RunID != run {
			continue
		}
		if e.RunEnd == nil || found {
			return Event{}, false
		}
		end, found = e, true
	}
	return end, found
}
