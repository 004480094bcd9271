package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Waits: a plugin's call may wait — until a time, or for an event named by
// a key that someone posts to its session (a webhook, another system's
// approval). The wait is an entry of the call's journal (see [Journal]);
// the call ends there, its instance and the run's goroutine released, and
// the run parks, holding nothing: its status is waiting ([StateWaiting],
// [RunResult.Waits]). When the event is posted ([Session.PostEvent]) or the
// time comes (any host sharing the storage fires it), the entry that
// completes the wait is recorded under the session's lease and the run
// continues on that host: the call is replayed from its journal up to the
// wait, which now answers, and goes on live. Cancelling the run, or its
// total timeout (waiting counts as working time), ends it while it waits.

// WaitError is what a [JournaledTool]'s call returns when it waits: its
// journal holds the wait, and the run parks until it completes. Exactly
// one of Event and Until is set.
type WaitError struct {
	// Event is the key of the event the call waits for.
	Event string
	// Until is the time the call waits until.
	Until time.Time
}

func (e *WaitError) Error() string {
	if e.Event != "" {
		return fmt.Sprintf("the call waits for the event %q", e.Event)
	}
	return "the call waits until " + e.Until.UTC().Format(time.RFC3339)
}

// Waiting is a parked call's wait.
type Waiting struct {
	// CallID and Name name the call.
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	// Event is the key of the event it waits for; Until the time it waits
	// until (a timer).
	Event string    `json:"event,omitempty"`
	Until time.Time `json:"until,omitzero"`
	// Since is when it began to wait.
	Since time.Time `json:"since"`
}

// The bounds of an event.
const (
	// MaxEventKeyBytes bounds an event's key.
	MaxEventKeyBytes = 256
	// MaxEventBytes bounds an event's payload.
	MaxEventBytes = 1 << 20
	// MaxKeptEvents bounds the events a host's storage keeps for calls
	// that do not wait for them yet (all its sessions together; a tenant's,
	// in serve): a post past it is refused (ErrTooManyEvents), nothing
	// kept. Taking an event, or deleting its session, frees its place.
	MaxKeptEvents = 1024
)

// ErrTooManyEvents refuses an event when MaxKeptEvents events are kept
// already.
var ErrTooManyEvents = errors.New("host: too many events kept for calls that do not wait for them yet")

// The storage.KV namespaces of waits: the events posted and not yet taken
// by a call (key: session, NUL, event key; value: the payload), and the
// times at which a session's parked run has a wait to complete (key:
// session, NUL, the time in RFC 3339; any host fires them).
const (
	waitEventsNS = "wait-events"
	waitTimersNS = "wait-timers"
)

// ValidEventKey reports whether key may name an event: 1 to
// MaxEventKeyBytes bytes of UTF-8 without control characters.
func ValidEventKey(key string) bool {
	if key == "" || len(key) > MaxEventKeyBytes || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// PostedEvent is what [Session.PostEvent] did.
type PostedEvent struct {
	// Taken reports whether a call waiting for the event took it now (its
	// run continues); otherwise the event is kept until a call of the
	// session waits for it.
	Taken bool `json:"taken"`
	// RunID is the run that continues, when Taken here; "" when another
	// completion took the event at the same moment.
	RunID string `json:"run_id,omitempty"`
	// Run is a handle on that run (nil when RunID is "").
	Run *Run `json:"-"`
}

// errNoWaitDue refuses to continue a parked run none of whose waits can
// complete now.
var errNoWaitDue = errors.New("host: no wait of the run can complete now")

// PostEvent posts the event key, with payload, to the session: a call of
// its run that waits for key continues with payload (on this host, which
// takes the session's lease); when none waits yet, the event is kept
// durably until one does (the first wait for key in the session takes
// it). It returns once the event is durable. A key names one event: a
// second post of a key that no call has taken replaces the first.
// It needs a storage that keeps values (storage.KV).
func (s *Session) PostEvent(ctx context.Context, key string, payload []byte) (PostedEvent, error) {
	h := s.h
	if !ValidEventKey(key) {
		return PostedEvent{}, fmt.Errorf("%w: an event key is 1 to %d bytes of UTF-8 without control characters", ErrInvalidInput, MaxEventKeyBytes)
	}
	if len(payload) > MaxEventBytes {
		return PostedEvent{}, fmt.Errorf("%w: the event's payload is %d bytes, the limit is %d", ErrInvalidInput, len(payload), MaxEventBytes)
	}
	if !storage.ValidSessionID(s.id) {
		return PostedEvent{}, fmt.Errorf("%w: session id %q", ErrInvalidInput, s.id)
	}
	kv, ok := h.store.(storage.KV)
	if !ok {
		return PostedEvent{}, errors.New("host: PostEvent needs a storage that keeps values (storage.KV)")
	}
	if n, err := kv.Len(ctx, waitEventsNS); err != nil {
		return PostedEvent{}, fmt.Errorf("host: count the events kept: %w", err)
	} else if n >= MaxKeptEvents {
		if _, again, err := kv.Get(ctx, waitEventsNS, eventKey(s.id, key)); err != nil || !again {
			return PostedEvent{}, fmt.Errorf("%w: %d (MaxKeptEvents); post them once calls wait for them, or delete their sessions", ErrTooManyEvents, n)
		}
	}
	// Kept first, then offered: a run that parks meanwhile finds it when
	// it looks after parking (afterParked), or is found parked here.
	if err := kv.Set(ctx, waitEventsNS, eventKey(s.id, key), append([]byte{}, payload...)); err != nil {
		return PostedEvent{}, fmt.Errorf("host: keep the event: %w", err)
	}
	r, err := h.completeWaits(ctx, s.id)
	switch {
	case err == nil && r != nil:
		return PostedEvent{Taken: true, RunID: r.ID(), Run: r}, nil
	case err == nil, errors.Is(err, errNoWaitDue), errors.Is(err, ErrNothingToResume), errors.Is(err, errParked):
	default:
		// Kept: a call that waits for it takes it; this host could not
		// continue the run now (another leads it, say).
		h.log.Warn("waits: the event is kept, but its run did not continue here", "session", s.id, "event", key, "err", err)
	}
	// A completion that ran at the same moment (the parking run's own
	// look, a call that waited for it live) may have taken it: then it is
	// gone from the storage.
	if _, kept, err := kv.Get(ctx, waitEventsNS, eventKey(s.id, key)); err == nil && !kept {
		return PostedEvent{Taken: true}, nil
	}
	return PostedEvent{}, nil
}

func eventKey(session, key string) string { return session + "\x00" + key }

// Event returns the payload of the event key posted to the call's session
// and not taken yet.
func (j *callJournal) Event(ctx context.Context, key string) ([]byte, bool, error) {
	kv, ok := j.r.h.store.(storage.KV)
	if !ok {
		return nil, false, errors.New("waiting for an event needs a storage that keeps values (storage.KV)")
	}
	return kv.Get(ctx, waitEventsNS, eventKey(j.r.sessionID, key))
}

// taken forgets the events that entries completed waits with, once they
// are durable (a crash before leaves the event to a later wait for its
// key, which is the one it was posted for).
func (j *callJournal) taken(entries []ledger.JournalEntry) {
	kv, ok := j.r.h.store.(storage.KV)
	if !ok {
		return
	}
	for _, e := range entries {
		if e.Op == ledger.JournalWaitDone && e.What != "" {
			if err := kv.Delete(context.Background(), waitEventsNS, eventKey(j.r.sessionID, e.What)); err != nil {
				j.r.h.log.Warn("waits: a taken event was not forgotten", "session", j.r.sessionID, "event", e.What, "err", err)
			}
		}
	}
}

// completeWaits records the completion of the waits of the session's
// parked run that can complete now — an event posted, a time come — and
// continues the run (see continueParked); when the run's total timeout has
// passed while it waited, it ends the run timed out instead. It refuses
// with errNoWaitDue when no wait can complete.
func (h *Host) completeWaits(ctx context.Context, id string) (*Run, error) {
	kv, _ := h.store.(storage.KV)
	var taken []string
	var ended bool
	prepare := func(events []ledger.Event) ([]ledger.Event, error) {
		runID, parked := parkedRun(events)
		if !parked {
			return nil, errNoWaitDue
		}
		waits := ledger.OpenWaits(events, runID)
		if len(waits) == 0 {
			return nil, errNoWaitDue
		}
		now := time.Now().UTC()
		agent := h.parkedAgent(ctx, id)
		if total := agent.Timeouts.Total; total > 0 && ledger.ActiveTime(events, runID, now) >= total {
			ended = true
			return endWaiting(events, runID, now, ledger.RunTimedOut, fmt.Sprintf("the run's total timeout (%s) passed while a call waited", total), TimeoutTotal), nil
		}
		var out []ledger.Event
		taken = taken[:0]
		for _, w := range waits {
			var done *ledger.JournalEntry
			switch {
			case w.Event != "":
				if kv == nil {
					continue
				}
				payload, ok, err := kv.Get(ctx, waitEventsNS, eventKey(id, w.Event))
				if err != nil {
					return nil, err
				}
				if ok {
					done = &ledger.JournalEntry{Op: ledger.JournalWaitDone, Request: w.Request, What: w.Event, Answer: payload}
					taken = append(taken, w.Event)
				}
			case !w.Until.IsZero() && !now.Before(w.Until):
				done = &ledger.JournalEntry{Op: ledger.JournalWaitDone, Request: w.Request}
			}
			if done == nil {
				continue
			}
			e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindToolJournal, Time: now, RunID: runID,
				ToolJournal: &ledger.ToolJournal{CallID: w.CallID, Name: w.Name, Source: w.Source, At: w.At, Entries: []ledger.JournalEntry{*done}}}
			out = append(out, e)
		}
		if len(out) == 0 {
			return nil, errNoWaitDue
		}
		return out, nil
	}
	r, err := h.continueParked(ctx, id, prepare)
	if err == nil && kv != nil {
		for _, key := range taken {
			if derr := kv.Delete(context.WithoutCancel(ctx), waitEventsNS, eventKey(id, key)); derr != nil {
				h.log.Warn("waits: a taken event was not forgotten", "session", id, "event", key, "err", derr)
			}
		}
	}
	if ended {
		return nil, err
	}
	return r, err
}

// endWaiting ends a parked run whose calls wait: each call of its last
// pass without a result is answered (it did not finish), then the run
// ends with status.
func endWaiting(events []ledger.Event, runID string, now time.Time, status ledger.RunStatus, reason string, timeout TimeoutKind) []ledger.Event {
	var out []ledger.Event
	waits := map[string]ledger.JournalWait{}
	for _, w := range ledger.OpenWaits(events, runID) {
		waits[w.CallID] = w
	}
	view, _ := ledger.ProjectRun(events, runID)
	answered := map[string]bool{}
	for _, res := range view.Results {
		answered[res.CallID] = true
	}
	if n := len(view.Steps); n > 0 {
		for _, c := range view.Steps[n-1].ToolCalls {
			if answered[c.ID] {
				continue
			}
			msg := "error: " + reason + " before this tool call ran"
			if w, ok := waits[c.ID]; ok {
				msg = "error: " + reason + " while this call waited for " + waitWhat(w)
			}
			out = append(out, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindToolResult, Time: now, RunID: runID,
				ToolResult: &ledger.ToolResult{CallID: c.ID, Name: c.Name, IsError: true, Synthetic: true, Output: msg}})
		}
	}
	return append(out, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: now, RunID: runID,
		RunEnd: &ledger.RunEnd{Status: status, Reason: reason, Timeout: string(timeout)}})
}

// waitWhat names what a wait waits for.
func waitWhat(w ledger.JournalWait) string {
	if w.Event != "" {
		return fmt.Sprintf("the event %q", w.Event)
	}
	return w.Until.UTC().Format(time.RFC3339)
}

// waitingOf returns the waits of a parked run, as its callers see them.
func waitingOf(events []ledger.Event, runID string) []Waiting {
	var out []Waiting
	for _, w := range ledger.OpenWaits(events, runID) {
		out = append(out, Waiting{CallID: w.CallID, Name: w.Name, Event: w.Event, Until: w.Until, Since: w.Since})
	}
	return out
}

// afterParked arranges for the waits of a run that just parked to
// complete: a timer (in this host, and in the storage, where every host
// sharing it looks: waitTimers) at the earliest of its times and of its
// total timeout's end; and, for the events it waits for, a look at
// those posted meanwhile (PostEvent keeps an event before it looks for a
// parked run: one of the two sees the other).
func (h *Host) afterParked(sessionID string, events []ledger.Event, runID string, agent Agent) {
	waits := ledger.OpenWaits(events, runID)
	if len(waits) == 0 {
		return
	}
	var due time.Time
	eventWaits := false
	for _, w := range waits {
		if w.Event != "" {
			eventWaits = true
		} else if due.IsZero() || w.Until.Before(due) {
			due = w.Until
		}
	}
	if total := agent.Timeouts.Total; total > 0 {
		end := time.Now().Add(total - ledger.ActiveTime(events, runID, time.Now()))
		if due.IsZero() || end.Before(due) {
			due = end
		}
	}
	kv, _ := h.store.(storage.KV)
	if !due.IsZero() {
		key := sessionID + "\x00" + due.UTC().Format(time.RFC3339Nano)
		if kv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
			if err := kv.Set(ctx, waitTimersNS, key, nil); err != nil {
				h.log.Warn("waits: the timer was not kept in the storage; this host fires it", "session", sessionID, "err", err)
			}
			cancel()
		}
		time.AfterFunc(time.Until(due), func() { h.fireWaits(sessionID, key) })
	}
	if !eventWaits || kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
	defer cancel()
	for _, w := range waits {
		if w.Event == "" {
			continue
		}
		if _, ok, err := kv.Get(ctx, waitEventsNS, eventKey(sessionID, w.Event)); err != nil || ok {
			// Posted while the run parked (or the store cannot tell):
			// complete it now.
			go h.fireWaits(sessionID, "")
			return
		}
	}
}

// fireWaits completes what waits of the session's parked run can complete,
// and forgets the timer key (from waitTimersNS) that fired, if any.
func (h *Host) fireWaits(sessionID, key string) {
	if h.bg.Err() != nil {
		return // closed
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.leaseTTL*3+h.timeouts.Append)
	defer cancel()
	_, err := h.completeWaits(ctx, sessionID)
	switch {
	case err == nil, errors.Is(err, errNoWaitDue), errors.Is(err, ErrNothingToResume), errors.Is(err, errParked), errors.Is(err, errReconciled):
	case errors.Is(err, ErrLeadElsewhere):
		return // another host leads the session: the timer stays for it (or for the next look)
	default:
		h.log.Warn("waits: could not complete the session's waits", "session", sessionID, "err", err)
		return
	}
	if key == "" {
		return
	}
	if kv, ok := h.store.(storage.KV); ok {
		if err := kv.Delete(ctx, waitTimersNS, key); err != nil {
			h.log.Warn("waits: a fired timer was not forgotten", "session", sessionID, "err", err)
		}
	}
}

// watchWaitTimers fires, every interval, the timers of waits (waitTimersNS)
// that are due, whichever host parked them: a host that died leaves its
// timers to the others, and to itself when it comes back.
func (h *Host) watchWaitTimers(kv storage.KV, interval time.Duration) {
	defer h.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
		keys, err := kv.Keys(ctx, waitTimersNS)
		cancel()
		if err != nil && h.bg.Err() == nil {
			h.log.Warn("waits: cannot list the timers", "err", err)
		}
		now := time.Now()
		for _, key := range keys {
			session, at, ok := strings.Cut(key, "\x00")
			due, err := time.Parse(time.RFC3339Nano, at)
			if !ok || err != nil {
				continue
			}
			if !now.Before(due) {
				h.fireWaits(session, key)
			}
		}
		select {
		case <-t.C:
		case <-h.bg.Done():
			return
		}
	}
}

// park is the outcome of a pass whose calls wait: for people (waiting, the
// requests), which comes first, else in their journals.
func (r *run) park(waiting []PendingApproval) outcome {
	if len(waiting) > 0 {
		return outcome{status: ledger.RunApprovalRequired, parked: true}
	}
	return outcome{status: ledger.RunWaiting, parked: true}
}

// withdrawWaits answers, with msg, the calls of a stopped run that wait
// in their journals.
func (r *run) withdrawWaits(calls []ledger.ToolCall, msg string) error {
	waits := map[string]ledger.JournalWait{}
	for _, w := range ledger.OpenWaits(r.view(), r.id) {
		waits[w.CallID] = w
	}
	for _, c := range calls {
		if w, ok := waits[c.ID]; ok {
			if err := r.appendResult(c, msg+" (it waited for "+waitWhat(w)+")", true); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgetWaits removes what the storage keeps of the session's waits (the
// events posted and not taken, the times to fire) and its interrupt flag
// (see interruptsNS), for its deletion: a
// session made again under its id starts with none. It returns how many
// entries there were.
func (h *Host) forgetWaits(ctx context.Context, sessionID string) (int, error) {
	kv, ok := h.store.(storage.KV)
	if !ok {
		return 0, nil
	}
	n := 0
	var errs []error
	if _, up, err := kv.Get(ctx, interruptsNS, sessionID); err == nil && up {
		errs = append(errs, kv.Delete(ctx, interruptsNS, sessionID))
	}
	for _, ns := range []string{waitEventsNS, waitTimersNS} {
		keys, err := kv.Keys(ctx, ns)
		errs = append(errs, err)
		for _, k := range keys {
			if strings.HasPrefix(k, sessionID+"\x00") {
				if err := kv.Delete(ctx, ns, k); err != nil {
					errs = append(errs, err)
					continue
				}
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}
