package ledger

import (
	"slices"
	"time"
)

// Lookups over a session's events: which message a request id names, which
// run picked a message up, and what a run picked up. Like the projections,
// they are pure functions of the events.

// MessageOfRequest returns the id of the message sent with the request id
// requestID (Input.RequestID), "" when there is none or requestID is "".
// When the message was appended more than once (see [Aliases]), it is the
// one that answers for them all.
func MessageOfRequest(events []Event, requestID string) string {
	if requestID == "" {
		return ""
	}
	for _, e := range events {
		if e.Input != nil && e.Input.RequestID == requestID {
			if canonical, ok := Aliases(events)[e.Input.MessageID]; ok {
				return canonical
			}
			return e.Input.MessageID
		}
	}
	return ""
}

// Aliases returns the messages appended again under the request id of
// another, each with the one that answers for it: two hosts that took the
// same message at once (a client that retried on another host before
// the first answered) each appended it. The message a run picked up (an
// input appended with its run, or listed by its run-start, a step or its
// run-end) answers for the others of its request id, else the first
// appended. An alias is never pending, never shown, never sent to the
// model, and its answer is that message's. Nil when there are none (the
// common case, found without allocating unless request ids repeat).
func Aliases(events []Event) map[string]string {
	if !requestRepeated(events) {
		return nil
	}
	picked := map[string]bool{}
	byRequest := map[string][]string{}
	var order []string
	for _, e := range events {
		for _, id := range inputsOf(e) {
			picked[id] = true
		}
		if e.Input == nil || e.Input.RequestID == "" {
			continue
		}
		if e.RunID != "" {
			picked[e.Input.MessageID] = true
		}
		req := e.Input.RequestID
		if _, ok := byRequest[req]; !ok {
			order = append(order, req)
		}
		if !slices.Contains(byRequest[req], e.Input.MessageID) {
			byRequest[req] = append(byRequest[req], e.Input.MessageID)
		}
	}
	aliases := map[string]string{}
	for _, req := range order {
		ids := byRequest[req]
		if len(ids) < 2 {
			continue
		}
		canonical := ids[0]
		for _, id := range ids {
			if picked[id] {
				canonical = id
				break
			}
		}
		for _, id := range ids {
			if id != canonical {
				aliases[id] = canonical
			}
		}
	}
	return aliases
}

// requestRepeated reports whether two inputs share a request id: with few
// inputs (the common case) by comparing them, without allocating.
func requestRepeated(events []Event) bool {
	var few [16]string
	reqs := few[:0]
	var seen map[string]bool
	for _, e := range events {
		if e.Input == nil || e.Input.RequestID == "" {
			continue
		}
		req := e.Input.RequestID
		if seen != nil {
			if seen[req] {
				return true
			}
			seen[req] = true
			continue
		}
		if slices.Contains(reqs, req) {
			return true
		}
		if len(reqs) < len(few) {
			reqs = append(reqs, req)
			continue
		}
		seen = make(map[string]bool, 2*len(few))
		for _, r := range reqs {
			seen[r] = true
		}
		seen[req] = true
	}
	return false
}

// RunOfMessage returns the run that picked the message msgID up: the last
// run whose run-start, step or run-end lists it (or, for an alias, the
// message it repeats: see [Aliases]) among its inputs; "" when no run did
// (the message is pending, or unknown).
func RunOfMessage(events []Event, msgID string) string {
	if canonical, ok := Aliases(events)[msgID]; ok {
		msgID = canonical
	}
	runID := ""
	for _, e := range events {
		if slices.Contains(inputsOf(e), msgID) {
			runID = e.RunID
		}
	}
	return runID
}

// RunInputs returns the messages the run runID picked up, in order: those
// its run-start, its steps and its run-end list.
func RunInputs(events []Event, runID string) []string {
	var ids []string
	for _, e := range events {
		if e.RunID == runID {
			ids = append(ids, inputsOf(e)...)
		}
	}
	return ids
}

// inputsOf returns the messages an event says its run picked up.
func inputsOf(e Event) []string {
	switch {
	case e.RunStart != nil:
		return e.RunStart.Inputs
	case e.Step != nil:
		return e.Step.Inputs
	case e.RunEnd != nil:
		return e.RunEnd.Inputs
	}
	return nil
}

// ActiveTime returns how long the run runID has worked by now: the time
// from its run-start to its run-end (or to now, while it is open), less
// the time it was parked waiting for approval decisions — from its last
// event before the decisions to the decision that left no request of it
// pending. Time in which no process ran it (a crash, before a resume)
// counts. It is 0 for a run the events do not start.
func ActiveTime(events []Event, runID string, now time.Time) time.Duration {
	var active time.Duration
	var segStart, last time.Time
	pending := map[string]bool{}
	started, parked := false, false
	for _, e := range events {
		if e.RunID != runID {
			continue
		}
		switch {
		case e.RunStart != nil:
			segStart, started = e.Time, true
		case !started:
			continue
		case e.ApprovalRequest != nil:
			pending[e.ApprovalRequest.ApprovalID] = true
		case e.ApprovalDecision != nil:
			if !parked && len(pending) > 0 {
				active += last.Sub(segStart)
				parked = true
			}
			delete(pending, e.ApprovalDecision.ApprovalID)
			if parked && len(pending) == 0 {
				parked, segStart = false, e.Time
			}
		case e.RunEnd != nil:
			if !parked {
				active += e.Time.Sub(segStart)
			}
			return max(active, 0)
		}
		last = e.Time
	}
	switch {
	case !started:
		return 0
	case parked || len(pending) > 0:
		// Parked (or about to): the wait has not ended.
		if !parked {
			active += last.Sub(segStart)
		}
	default:
		active += now.Sub(segStart)
	}
	return max(active, 0)
}
