package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/protocol/uistream"
)

// GET /v1/sessions/{id}/events: a session's live events over SSE. The
// first event is a snapshot (the transcript with the live partial text,
// the status); then each progress event of the run in flight, with id
// "RUN:SEQ"; a new snapshot when another run starts or the ledger changes
// otherwise. A client that reconnects with Last-Event-ID goes on after the
// event it names, with no character twice and none missing (or, when that
// run has ended, with a snapshot). Comments keep an idle stream open; the
// stream closes when the key is revoked, the server shuts down, or the
// client falls too far behind (it reconnects from its last id).

// parseEventID reads a Last-Event-ID: "RUN:SEQ".
func parseEventID(id string) (host.Cursor, bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return host.Cursor{}, false
	}
	seq, err := strconv.Atoi(id[i+1:])
	if err != nil || seq < 0 {
		return host.Cursor{}, false
	}
	return host.Cursor{RunID: id[:i], Seq: seq}, true
}

// eventID renders a cursor as an event id; "" for the zero cursor.
func eventID(c host.Cursor) string {
	if c.RunID == "" {
		return ""
	}
	return c.RunID + ":" + strconv.Itoa(c.Seq)
}

// sse writes server-sent events, each within timeout: a client that stops
// reading is dropped, never waited for.
//
// A relay (Server.stream) holds the flushes while it writes what is ready
// and flushes once before it waits: updates that came together leave in
// one write, and none waits for another.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // 0: DefaultStreamWrite
	buf     []byte        // an event's bytes, reused
	pending bool          // written since the last flush
	hold    bool          // event leaves the flush to flushPending
	err     error         // the first write's or flush's error: the stream is over
}

// deadline bounds the writes until the next flush.
func (s *sse) deadline() {
	d := s.timeout
	if d <= 0 {
		d = DefaultStreamWrite
	}
	s.rc.SetWriteDeadline(time.Now().Add(d))
}

// write writes b, bounded by the deadline, without flushing.
func (s *sse) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	if !s.pending {
		s.deadline()
		s.pending = true
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = err
	}
	return s.err
}

// maxIdleBuffer bounds the event buffer a stream keeps between its
// flushes, so that an idle viewer's cost does not grow with the session
// it follows (its first snapshot holds the whole transcript).
const maxIdleBuffer = 4 << 10

// newSSE starts an event stream: its headers go out at once, so that the
// client knows the stream is open before the first event.
func newSSE(w http.ResponseWriter) *sse {
	s := newSSEHeld(w)
	s.flushPending()
	return s
}

// newSSEHeld starts an event stream whose headers leave with the first
// flush: for a stream that writes its first events at once (a new chat),
// one write instead of two.
func newSSEHeld(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w), pending: true}
	s.deadline()
	return s
}

// event writes one event; name and id may be empty.
func (s *sse) event(name, id string, data any) error {
	j, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.deadline()
	b := s.buf[:0]
	if name != "" {
		b = append(append(append(b, "event: "...), name...), '\n')
	}
	if id != "" {
		b = append(append(append(b, "id: "...), id...), '\n')
	}
	b = append(append(append(b, "data: "...), j...), "\n\n"...)
	s.buf = b
	if err := s.write(b); err != nil || s.hold {
		return err
	}
	return s.flushPending()
}

// chunk writes a UI message stream chunk as a data event (its JSON by
// uistream.AppendChunk), without flushing: the caller flushes
// (flushPending) once it has written what one update of the run makes, so
// that the chunks of an update leave in one write.
func (s *sse) chunk(ch uistream.Chunk) error {
	b, err := uistream.AppendChunk(append(s.buf[:0], "data: "...), ch)
	if err != nil {
		return err
	}
	b = append(b, "\n\n"...)
	s.buf = b
	return s.write(b)
}

// flushPending flushes what was written since the last flush.
func (s *sse) flushPending() error {
	if !s.pending || s.err != nil {
		return s.err
	}
	s.pending = false
	return s.flush()
}

// comment writes an SSE comment (a heartbeat) and flushes.
func (s *sse) comment(text string) error {
	s.buf = append(append(append(s.buf[:0], ": "...), text...), "\n\n"...)
	if err := s.write(s.buf); err != nil {
		return err
	}
	return s.flushPending()
}

// done ends a UI message stream: data: [DONE], flushed.
func (s *sse) done() error {
	if err := s.write([]byte("data: [DONE]\n\n")); err != nil {
		return err
	}
	return s.flushPending()
}

func (s *sse) flush() error {
	if s.err != nil {
		return s.err
	}
	if cap(s.buf) > maxIdleBuffer {
		s.buf = nil // a snapshot's bytes are not kept for an idle stream
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

func (s *Server) getEvents(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	var after host.Cursor
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = parseEventID(v)
	}
	a, err := t.host.Session(id).Attach(r.Context(), after)
	if err != nil {
		s.startError(w, err)
		return
	}
	defer a.Close()
	s.metrics.streams.Add(context.Background(), 1)
	defer s.metrics.streams.Add(context.Background(), -1)
	out := newSSE(w)
	s.stream(r.Context(), out, a, apiKey(r), t, "", func(u host.Update, cur host.Cursor) error {
		if u.Snapshot != nil {
			return out.event("snapshot", eventID(cur), u.Snapshot)
		}
		return out.event("progress", eventID(cur), u.Progress)
	}, func(code, message string) {
		if code != codeUnavailable { // at shutdown the stream just ends: the client reconnects
			out.event("error", "", map[string]string{"code": code, "message": message})
		}
	})
}

// stream relays an attachment's updates through send until the client
// leaves, the key is revoked, the server shuts down or the client falls
// behind (the run's progress outgrows its buffer: ErrSlowSubscriber, or a
// write waits past StreamWriteTimeout) — these three are told to stopped,
// with an error code and a message, before the stream ends; it writes
// heartbeats while nothing happens.
//
// When the run's agent paces its text (its smooth option), the text goes
// out a chunk at a time (host.Smoother): a chunk that completes no
// progress event goes without a cursor (an SSE event without an id), so
// that a client that comes back resumes from the event before it, and the
// text's offsets make the repeat harmless. agent names the agent until a
// snapshot names the run's; unpaced (a protocol between programs, such as
// A2A) sends the text as it comes.
// unpaced, as stream's agent, sends text as it comes whatever the run's
// agent says.
const unpaced = "\x00unpaced"

func (s *Server) stream(ctx context.Context, out *sse, a *host.Attachment, key string, t *tenant, agent string, send func(host.Update, host.Cursor) error, stopped func(code, message string)) {
	out.timeout = time.Duration(s.cfg.StreamWriteTimeout)
	var (
		sm        *host.Smoother[host.Cursor] // nil: no pacing
		smAgent   = "\x00"                    // the agent sm paces for
		paceAt    time.Time                   // when the next paced chunk goes; zero: none waits
		lastChunk time.Time
	)
	smoothFor := func(name string) {
		if name == smAgent || agent == unpaced {
			return
		}
		smAgent, sm = name, nil
		if name == "" {
			name = "default"
		}
		if ac, ok := t.cfg.Agents[name]; ok && ac.Smooth != nil {
			sm, _ = host.NewSmoother[host.Cursor](ac.Smooth.options()) // checked with the configuration
		}
	}
	smoothFor(agent)
	sendOut := func(o host.Smoothed[host.Cursor]) error {
		var cur host.Cursor
		if o.Tagged {
			cur = o.Tag
		}
		if o.Progress.Type == host.ProgressText || o.Progress.Type == host.ProgressReasoning {
			lastChunk = time.Now()
		}
		p := o.Progress
		return send(host.Update{Progress: &p}, cur)
	}
	// arm sets when the next chunk goes, when a whole one waits.
	arm := func() {
		if sm == nil || !paceAt.IsZero() || !sm.Ready() {
			return
		}
		paceAt = lastChunk.Add(sm.Delay())
	}
	// The updates that are ready go out as a batch, flushed once
	// (out.hold), so that those that came while the stream was busy leave
	// in one write.
	const maxBatch = 64
	out.hold = true
	defer func() {
		out.hold = false
		out.flushPending()
	}()
	// relay writes one update; false ends the stream.
	relay := func(u host.Update, cur host.Cursor, err error) bool {
		if err != nil {
			switch {
			case errors.Is(err, host.ErrSlowSubscriber):
				stopped(codeTooSlow, "the client fell too far behind; reconnect with Last-Event-ID")
			case errors.Is(err, host.ErrClosed):
				stopped(codeUnavailable, "the server is shutting down; reconnect")
			}
			return false
		}
		if sm == nil && u.Snapshot == nil {
			return send(u, cur) == nil
		}
		var outs []host.Smoothed[host.Cursor]
		if sm != nil {
			outs = sm.Push(u.Progress, cur)
		}
		for _, o := range outs {
			if err := sendOut(o); err != nil {
				return false
			}
		}
		if u.Snapshot != nil {
			if err := send(u, cur); err != nil {
				return false
			}
			smoothFor(u.Snapshot.Status.Agent)
		}
		return true
	}
	// One goroutine reads the attachment and keeps the times: a wait for
	// the next update ends at the next heartbeat or paced chunk, whichever
	// comes first.
	heartbeat := time.Duration(s.cfg.Heartbeat)
	nextBeat := time.Now().Add(heartbeat)
	timer := time.NewTimer(heartbeat)
	defer timer.Stop()
	for {
		wakeAt := nextBeat
		if !paceAt.IsZero() && paceAt.Before(wakeAt) {
			wakeAt = paceAt
		}
		timer.Reset(time.Until(wakeAt))
		u, woke, err := a.NextOrWake(ctx, timer.C)
		if !woke {
			if !relay(u, a.Cursor(), err) {
				return
			}
			for range maxBatch - 1 {
				u, ok := a.TryNext()
				if !ok {
					break
				}
				if !relay(u, a.Cursor(), nil) {
					return
				}
			}
			if out.flushPending() != nil {
				return
			}
			arm()
		}
		now := time.Now()
		if !paceAt.IsZero() && !now.Before(paceAt) {
			paceAt = time.Time{}
			if sm != nil { // (a snapshot may have named an agent that does not pace)
				if o, ok := sm.Next(); ok {
					if err := sendOut(o); err != nil {
						return
					}
				}
				if out.flushPending() != nil {
					return
				}
				arm()
			}
		}
		if !now.Before(nextBeat) {
			nextBeat = now.Add(heartbeat)
			if why := s.revoked(ctx, key, t); why != "" {
				stopped(codeUnauthorized, why)
				return
			}
			if err := out.comment("ping"); err != nil {
				return
			}
		}
	}
}

// revoked tells, at a stream's heartbeat, that key no longer opens tenant
// t — it was revoked, or expired — and why; "" while it does. A key that
// cannot be checked now is not taken for revoked.
func (s *Server) revoked(ctx context.Context, key string, t *tenant) string {
	tenant, why, err := s.keys.tenantOf(ctx, key, s.serves)
	switch {
	case err != nil || tenant == t.name:
		return ""
	case why == keyExpired:
		return "the API key expired"
	}
	return "the API key was revoked"
}
