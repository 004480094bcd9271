package ledger

import "time"

// JournalWait is a plugin call's wait that has not completed: the last
// entry of its journal is a JournalWaitEvent or JournalWaitTimer.
type JournalWait struct {
	// RunID, CallID and Name name the call.
	RunID  string
	CallID string
	Name   string
	// Source is the module that made the call.
	Source string
	// At is the place in the call's journal of the entry that completes
	// the wait (JournalWaitDone), the next one.
	At int
	// Event is the event waited for; Until the time, for a timer.
	Event string
	Until time.Time
	// Request is the wait entry's digest, which the entry completing it
	// repeats.
	Request string
	// Since is when the wait was journaled.
	Since time.Time
}

// OpenWaits returns the waits of run runID's calls that have no result:
// each call whose journal ends with a wait not completed yet, in the
// order of their calls' first journal entries.
func OpenWaits(events []Event, runID string) []JournalWait {
	type state struct {
		w    JournalWait
		open bool
	}
	var order []string
	calls := map[string]*state{}
	for _, e := range events {
		switch {
		case e.RunID != runID:
		case e.ToolJournal != nil:
			j := e.ToolJournal
			s := calls[j.CallID]
			if s == nil {
				s = &state{}
				calls[j.CallID] = s
				order = append(order, j.CallID)
			}
			for i, x := range j.Entries {
				switch x.Op {
				case JournalWaitEvent, JournalWaitTimer:
					s.open = true
					s.w = JournalWait{RunID: runID, CallID: j.CallID, Name: j.Name, Source: j.Source, At: j.At + i + 1,
						Request: x.Request, Since: e.Time}
					if x.Op == JournalWaitEvent {
						s.w.Event = x.Key
					} else {
						s.w.Until, _ = time.Parse(time.RFC3339Nano, x.Key)
					}
				default:
					s.open = false
				}
			}
		case e.ToolResult != nil:
			if s := calls[e.ToolResult.CallID]; s != nil {
				s.open = false
			}
		}
	}
	var out []JournalWait
	for _, id := range order {
		if s := calls[id]; s.open {
			out = append(out, s.w)
		}
	}
	return out
}
