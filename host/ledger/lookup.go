package ledger

import "slices"

// Lookups over a session's events: which message a request id names, which
// run picked a message up, and what a run picked up. Like the projections,
// they are pure functions of the events.

// MessageOfRequest returns the id of the message sent with the request id
// requestID (Input.RequestID), "" when there is none or requestID is "".
func MessageOfRequest(events []Event, requestID string) string {
	if requestID == "" {
		return ""
	}
	for _, e := range events {
		if e.Input != nil && e.Input.RequestID == requestID {
			return e.Input.MessageID
		}
	}
	return ""
}

// RunOfMessage returns the run that picked the message msgID up: the last
// run whose run-start, step or run-end lists it among its inputs; "" when
// no run did (the message is pending, or unknown).
func RunOfMessage(events []Event, msgID string) string {
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
