package host

import (
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/model"
)

// The live item: what the pass in flight has streamed so far, kept in the
// run's live view (transcripts show it) and published to the run's
// progress hub (subscribers follow it). Deltas come through a sink per
// model attempt, from any goroutine.

// liveView is the item a run streams into: the text and reasoning streamed
// so far, counted in code points for the next delta's offset.
type liveView struct {
	responseID              string
	text, reasoning         []byte
	textRunes, reasonsRunes int
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
	// parts are the senders listening to the pass's raw stream
	// (SendOptions.OnPart); model and attempt name the pass for them.
	parts   []func(ModelPart)
	model   string
	attempt int
}

func (s *deltaSink) add(d model.Delta) {
	var typ ProgressType
	switch d.Kind {
	case model.DeltaText:
		typ = ProgressText
	case model.DeltaReasoning:
		typ = ProgressReasoning
	case model.DeltaRaw:
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.open {
			return
		}
		for i, f := range s.parts {
			raw := d.Raw
			if i > 0 {
				raw = slices.Clone(raw) // each listener owns its own
			}
			f(ModelPart{RunID: s.r.id, ResponseID: s.r.responseID, Model: s.model, Attempt: s.attempt, Raw: raw})
		}
		return
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
	l := &r.live
	var offset int
	if typ == ProgressText {
		offset = l.textRunes
		l.text = append(l.text, d.Text...)
		l.textRunes += utf8.RuneCountInString(d.Text)
	} else {
		offset = l.reasonsRunes
		l.reasoning = append(l.reasoning, d.Text...)
		l.reasonsRunes += utf8.RuneCountInString(d.Text)
	}
	// Published under the session's lock (the hub is a leaf), so that the
	// live text and the progress that carries it never part: a viewer's
	// snapshot, taken under the same lock, ends where the progress after
	// its cursor begins.
	r.publish(Progress{Type: typ, Delta: d.Text, Offset: offset})
	r.st.mu.Unlock()
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
	r.live = liveView{responseID: responseID}
	r.st.mu.Unlock()
}

// publish sends p to the run's progress subscribers.
func (r *run) publish(p Progress) {
	if p.ResponseID == "" {
		p.ResponseID = r.responseID
	}
	e := event{typ: p.Type, responseID: p.ResponseID, delta: p.Delta, offset: p.Offset}
	// What the rarer events carry travels as the event itself, whatever
	// fields Progress has: none is left out on the way to a subscriber.
	rest := p
	rest.Seq, rest.Type, rest.SessionID, rest.RunID, rest.TraceID, rest.ResponseID, rest.Delta, rest.Offset = 0, "", "", "", "", "", "", 0
	if rest != (Progress{}) {
		e.more = &rest
	}
	r.hub.Publish(e)
}

// event is a progress event as a run's hub keeps it: compact, since a run
// publishes one per streamed fragment; the ids that every event of the run
// shares are added on the way out (see progress).
type event struct {
	typ        ProgressType
	responseID string
	delta      string
	offset     int
	more       *Progress // what the rarer events carry, the other fields zero
}

// progress returns the event e of the run, published at offset seq.
func (r *run) progress(e event, seq int) Progress {
	var p Progress
	if e.more != nil {
		p = *e.more
	}
	p.Seq, p.Type, p.SessionID, p.RunID, p.TraceID, p.ResponseID, p.Delta, p.Offset = seq, e.typ, r.sessionID, r.id, r.traceID, e.responseID, e.delta, e.offset
	return p
}
