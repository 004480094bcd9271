package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
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
// client falls too far behind (it reconnects from its last id). A
// snapshot's transcript is the transcript API's (ledger.WireTranscript);
// with ?limit=N, only its last N items and a page (eventSnapshot).

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
	conn    *streamConn   // the connection taken over from net/http (newEventStream); nil: w
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
	if s.conn != nil {
		s.conn.conn.SetWriteDeadline(time.Now().Add(d))
		return
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
	if s.conn != nil {
		s.conn.pending = append(s.conn.pending, b...)
		return nil
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
	if s.conn != nil {
		s.err = s.conn.flush()
		return s.err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

// streamConn is the connection of an event stream that its relay took
// over from net/http (HTTP/1.x): an idle viewer then costs one goroutine,
// the relay's, instead of net/http's connection goroutine and its
// background read of the connection, and none of net/http's buffers for
// the connection. What is written is sent as HTTP/1.1 chunks, as net/http
// sends a stream, and the connection closes with the stream. Since
// nothing reads the connection, a client that left is seen at the next
// write, at the next heartbeat (alive), or when a stream of its bound is
// refused (sweepStreams).
type streamConn struct {
	conn    net.Conn
	pending []byte // the bytes written since the last flush
	frame   []byte // a chunk's framing, reused
}

// newEventStream starts an event stream as newSSE does, and takes its
// connection over from net/http when it can (a GET over HTTP/1.x; HTTP/2
// multiplexes its streams on net/http's goroutines, and a HEAD has no
// body): the stream is then the caller's to end (sse.end).
func newEventStream(w http.ResponseWriter, r *http.Request) *sse {
	if r.ProtoMajor != 1 || r.Method != http.MethodGet {
		return newSSE(w)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return newSSE(w)
	}
	// A read deadline net/http may have left (the server's ReadTimeout)
	// would read as the client's leaving at the next heartbeat (alive).
	conn.SetReadDeadline(time.Time{})
	// The response's head, as net/http would write it. The reader net/http
	// hands over holds nothing of use: a client sends nothing after the
	// GET, and "Connection: close" tells it not to.
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	var head strings.Builder
	head.WriteString("HTTP/1.1 200 OK\r\n")
	h.Write(&head)
	head.WriteString("\r\n")
	s := &sse{conn: &streamConn{conn: conn}} // no reference to w: net/http's buffers for the connection go
	s.deadline()
	if _, err := io.WriteString(conn, head.String()); err != nil {
		s.err = err
	}
	return s
}

// flush sends what was written as one chunk.
func (c *streamConn) flush() error {
	if len(c.pending) == 0 {
		return nil
	}
	c.frame = strconv.AppendInt(c.frame[:0], int64(len(c.pending)), 16)
	c.frame = append(c.frame, "\r\n"...)
	bufs := net.Buffers{c.frame, c.pending, crlf}
	_, err := bufs.WriteTo(c.conn)
	c.reset()
	return err
}

var crlf = []byte("\r\n")

// reset empties pending, and lets a large one go.
func (c *streamConn) reset() {
	if cap(c.pending) > maxIdleBuffer {
		c.pending = nil
	} else {
		c.pending = c.pending[:0]
	}
}

// end ends a stream that newEventStream took over: the last chunk, when
// every write before it went whole, and the connection closed. After a
// write that failed midway nothing more is written: the client's HTTP
// reader then sees the stream cut short (an error, and no event made of
// the torn chunk and what would follow it). A stream net/http serves ends
// with its handler.
func (s *sse) end() {
	if s.conn == nil {
		return
	}
	if s.err == nil {
		s.conn.conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(s.conn.conn, "0\r\n\r\n")
	}
	s.conn.conn.Close()
}

func (s *Server) getEvents(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	q, ok := pageQuery(w, r)
	if !ok {
		return
	}
	if q.After != "" || q.Before != "" {
		writeError(w, http.StatusBadRequest, codeInvalid, "after and before page the transcript (GET /v1/sessions/{id}/transcript); an event stream takes limit alone")
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
	s.metrics.streams.Add(context.Background(), 1)
	key := apiKey(r)
	relay := func(ctx context.Context, out *sse) {
		defer a.Close()
		defer s.metrics.streams.Add(context.Background(), -1)
		s.stream(ctx, out, a, key, t, "", func(u host.Update, cur host.Cursor) error {
			if u.Snapshot != nil {
				return out.event("snapshot", eventID(cur), wireSnapshot(u.Snapshot, q.Limit))
			}
			return out.event("progress", eventID(cur), u.Progress)
		}, func(code, message string) {
			if code != codeUnavailable { // at shutdown the stream just ends: the client reconnects
				out.event("error", "", map[string]string{"code": code, "message": message})
			}
		})
	}
	out := newEventStream(w, r)
	if out.conn == nil {
		relay(r.Context(), out)
		return
	}
	// The connection is the stream's: net/http's goroutine and buffers for
	// it go, and a goroutine of the stream's own relays it. Its context
	// keeps the request's values and deadline (stream_max_age), not its
	// end (net/http's, when the handler returns); the lease's cancel ends
	// it, so that a sweep that finds the client gone ends the stream.
	lease := detach(r.Context())
	base := context.WithoutCancel(r.Context())
	ctx, cancel := context.WithCancel(base)
	if dl, ok := r.Context().Deadline(); ok {
		cancel()
		ctx, cancel = context.WithDeadline(base, dl)
	}
	if lease != nil {
		ended := lease.cancel
		lease.cancel = func() { cancel(); ended() }
		lease.hold(out.conn.alive)
	}
	s.relays.Go(func() {
		defer cancel()
		defer lease.close()
		defer out.end()
		defer func() {
			// As net/http does for a handler: the stream ends, the
			// process goes on.
			if v := recover(); v != nil {
				s.log.Error("event stream panicked", "tenant", t.name, "session", id, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		relay(ctx, out)
	})
}

// eventSnapshot is a snapshot as a session's event stream sends it: its
// transcript as the transcript API gives it (ledger.WireTranscript: no raw
// provider payloads, no bodies of tool calls' traffic), and with a limit
// (?limit=N) the last N items of it and what lies before them (Page).
type eventSnapshot struct {
	Transcript ledger.Transcript `json:"transcript"`
	Status     host.Status       `json:"status"`
	Cursor     host.Cursor       `json:"cursor"`
	Page       *transcriptPage   `json:"page,omitempty"`
}

// wireSnapshot makes snap an eventSnapshot, of its last limit items when
// limit > 0.
func wireSnapshot(snap *host.Snapshot, limit int) eventSnapshot {
	tr := snap.Transcript
	var page *transcriptPage
	if limit > 0 {
		items, pg, _ := transcriptQuery{Limit: limit}.page(tr.Items) // (the last items: no id to miss)
		tr.Items, page = items, &pg
	}
	return eventSnapshot{Transcript: ledger.WireTranscript(tr), Status: snap.Status, Cursor: snap.Cursor, Page: page}
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
	sendOut := func(o *host.Smoothed[host.Cursor]) error {
		return sendSmoothed(o, &lastChunk, send)
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
		for i := range outs {
			if err := sendOut(&outs[i]); err != nil {
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
				if sendPaced(sm, &lastChunk, send) != nil {
					return
				}
				if out.flushPending() != nil {
					return
				}
				arm()
			}
		}
		if !now.Before(nextBeat) {
			nextBeat = now.Add(heartbeat)
			if out.conn != nil && !out.conn.alive() {
				return // the client left
			}
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

// sendSmoothed sends a paced chunk of text (stream), with its cursor when
// it completes a progress event, and notes when text went (lastChunk).
func sendSmoothed(o *host.Smoothed[host.Cursor], lastChunk *time.Time, send func(host.Update, host.Cursor) error) error {
	var cur host.Cursor
	if o.Tagged {
		cur = o.Tag
	}
	if o.Progress.Type == host.ProgressText || o.Progress.Type == host.ProgressReasoning {
		*lastChunk = time.Now()
	}
	p := o.Progress
	return send(host.Update{Progress: &p}, cur)
}

// sendPaced sends the next paced chunk, if one is whole. It is a call of
// its own so that the chunk's copies stay out of stream's frame: the
// stack of an idle viewer's relay holds that frame, and a frame small
// enough lets the runtime shrink the stack back after the first
// snapshot's encoding grew it (BenchmarkIdleViewers).
//
//go:noinline
func sendPaced(sm *host.Smoother[host.Cursor], lastChunk *time.Time, send func(host.Update, host.Cursor) error) error {
	o, ok := sm.Next()
	if !ok {
		return nil
	}
	return sendSmoothed(&o, lastChunk, send)
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
