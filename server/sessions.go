package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Sessions: send a message (a run starts, or the message joins the run in
// flight), list, read, cancel.

// messageRequest is the body of POST /v1/sessions/{id}/messages.
type messageRequest struct {
	// Text is the message. Required unless Parts has content.
	Text string `json:"text"`
	// Parts is content after the text (images, audio, files).
	Parts []ledger.Part `json:"parts,omitempty"`
	// Agent names the tenant's agent that runs the message. Default:
	// "default".
	Agent string `json:"agent,omitempty"`
	// Overlap is what the message does while the session's run works:
	// queue, reject, interrupt or rollback (see host.Agent.Overlap).
	// Default: "", the agent's rule.
	Overlap string `json:"overlap,omitempty"`
}

// messageResponse answers an accepted message.
type messageResponse struct {
	SessionID string `json:"session_id"`
	MessageID string `json:"message_id"`
	RunID     string `json:"run_id"`
	// TraceID is the run's OpenTelemetry trace, when the server traces.
	TraceID string `json:"trace_id,omitempty"`
}

// resultResponse answers ?wait=true, or a task's outcome.
type resultResponse struct {
	SessionID  string                 `json:"session_id"`
	MessageID  string                 `json:"message_id"`
	RunID      string                 `json:"run_id"`
	TraceID    string                 `json:"trace_id,omitempty"`
	ResponseID string                 `json:"response_id,omitempty"`
	Status     ledger.RunStatus       `json:"status"`
	Reason     string                 `json:"reason,omitempty"`
	Timeout    host.TimeoutKind       `json:"timeout,omitempty"`
	Text       string                 `json:"text"`
	Usage      ledger.Usage           `json:"usage"`
	Cost       float64                `json:"cost"`
	Approvals  []host.PendingApproval `json:"approvals,omitempty"`
	Waits      []host.Waiting         `json:"waits,omitempty"`
}

func resultOf(sessionID string, res host.RunResult) resultResponse {
	return resultResponse{SessionID: sessionID, MessageID: res.MessageID, RunID: res.RunID, ResponseID: res.ResponseID,
		Status: res.Status, Reason: res.Reason, Timeout: res.Timeout, Text: res.Text, Usage: res.Usage, Cost: res.Cost,
		Approvals: res.Approvals, Waits: res.Waits}
}

// traceOf is a run's OpenTelemetry trace id when the server traces, ""
// otherwise.
func (s *Server) traceOf(runID string) string {
	if !s.tracing {
		return ""
	}
	return host.TraceIDOf(runID)
}

// agentFor returns the tenant's agent name, answering 400 when it has no
// such agent.
func (t *tenant) agentFor(w http.ResponseWriter, name string) (*host.Agent, bool) {
	if name == "" {
		name = "default"
	}
	a, ok := t.agents[name]
	if !ok {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"agent\": tenant %s has no agent %q", t.name, name)
		return nil, false
	}
	return &a, true
}

// admitRun decides whether a new run may start for a message to session
// id: not while the server shuts down, past the tenant's budget, past the
// process's runs in flight (max_runs) or the tenant's concurrent runs (a
// message to a session whose run is in flight joins it: no new run). It answers a admitRefusal itself. Admitted, the run's place
// under the bound is held until release is called — once Start returned,
// when the run is in flight (or the message joined one, or was refused) —
// so that requests at once cannot all pass the bound.
func (s *Server) admitRun(w http.ResponseWriter, r *http.Request, t *tenant, id string) (release func(), ok bool) {
	release, no := s.admission(r, t, id)
	if no != nil {
		no.write(w)
		return nil, false
	}
	return release, true
}

// runSlots counts a tenant's runs in flight in this host: the sessions
// whose runs were admitted (counted from their admission on, so that
// requests at once cannot all pass the bound) or told by the live events
// (runs resumed, continued after approvals), each counted while an
// admission of it is in progress or its run is in flight
// (host.IsRunning), and forgotten otherwise.
type runSlots struct {
	mu       sync.Mutex
	sessions map[string]int  // session id → admissions in progress
	queue    []chan struct{} // the admissions waiting for a place, first first
}

// wake tells the first admission waiting for a place to look again: a
// run ended, or an admission gave its place back.
func (rs *runSlots) wake() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.wakeLocked()
}

func (rs *runSlots) wakeLocked() {
	if len(rs.queue) > 0 {
		select {
		case rs.queue[0] <- struct{}{}:
		default:
		}
	}
}

// queued returns how many admissions wait for a place.
func (rs *runSlots) queued() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.queue)
}

// errQueueFull and errQueueTimeout are why an admission left the queue
// without a place.
var (
	errQueueFull    = errors.New("the queue is full")
	errQueueTimeout = errors.New("the wait timed out")
)

// wait waits, first come first served, behind at most max others, for a
// place for a run of session id while limit runs are in flight, up to
// timeout or ctx's end; it returns the place as reserve does.
func (rs *runSlots) wait(ctx context.Context, h *host.Host, id string, limit, max int, timeout time.Duration) (release func(), err error) {
	rs.mu.Lock()
	if len(rs.queue) >= max {
		rs.mu.Unlock()
		return nil, errQueueFull
	}
	me := make(chan struct{}, 1)
	rs.queue = append(rs.queue, me)
	if len(rs.queue) == 1 {
		me <- struct{}{} // first: look at once (a place may have freed meanwhile)
	}
	rs.mu.Unlock()
	leave := func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if i := slices.Index(rs.queue, me); i >= 0 {
			rs.queue = slices.Delete(rs.queue, i, i+1)
			rs.wakeLocked()
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-me:
		case <-timer.C:
			leave()
			return nil, errQueueTimeout
		case <-ctx.Done():
			leave()
			return nil, ctx.Err()
		}
		rs.mu.Lock()
		if len(rs.queue) == 0 || rs.queue[0] != me {
			rs.mu.Unlock()
			continue // not first yet: the first was told
		}
		release, ok := rs.reserveLocked(h, id, limit)
		if ok {
			rs.queue = rs.queue[1:]
			rs.wakeLocked() // the next may fit too
		}
		rs.mu.Unlock()
		if ok {
			return release, nil
		}
	}
}

// countLocked counts the runs in flight, forgetting the sessions that have
// none.
func (rs *runSlots) countLocked(h *host.Host) int {
	n := 0
	for id, admitting := range rs.sessions {
		if admitting > 0 || h.IsRunning(id) {
			n++
		} else {
			delete(rs.sessions, id)
		}
	}
	return n
}

// reserve holds a place for a run of session id, unless limit runs are
// in flight; a session counted already takes no second place.
func (rs *runSlots) reserve(h *host.Host, id string, limit int) (release func(), ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.queue) > 0 {
		// Others wait for a place: a newcomer does not overtake them.
		if _, counted := rs.sessions[id]; !counted {
			return nil, false
		}
	}
	return rs.reserveLocked(h, id, limit)
}

// reserveLocked is reserve with rs.mu held.
func (rs *runSlots) reserveLocked(h *host.Host, id string, limit int) (release func(), ok bool) {
	if rs.sessions == nil {
		rs.sessions = map[string]int{}
	}
	n := rs.countLocked(h)
	if _, counted := rs.sessions[id]; !counted && n >= limit {
		return nil, false
	}
	rs.sessions[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			rs.mu.Lock()
			rs.sessions[id]--
			rs.wakeLocked() // the place may be free again (no run started)
			rs.mu.Unlock()
		})
	}, true
}

// observe counts session id's run, which went live.
func (rs *runSlots) observe(id string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.sessions == nil {
		rs.sessions = map[string]int{}
	}
	if _, ok := rs.sessions[id]; !ok {
		rs.sessions[id] = 0
	}
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var req messageRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	agent, ok := t.agentFor(w, req.Agent)
	if !ok {
		return
	}
	switch host.Overlap(req.Overlap) {
	case "", host.OverlapQueue, host.OverlapReject, host.OverlapInterrupt, host.OverlapRollback:
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"overlap\": %q is not queue, reject, interrupt or rollback", req.Overlap)
		return
	}
	wait, ok := boolParam(w, r, "wait")
	if !ok {
		return
	}
	key, retry, ok := s.idempotent(w, r, t, id, req)
	if !ok {
		return
	}
	release := func() {}
	if !retry {
		// A retry starts no run: it is answered as the first time, even
		// when no new run could start now.
		if release, ok = s.admitRun(w, r, t, id); !ok {
			return
		}
	}
	run, err := t.host.Session(id).Start(r.Context(), req.Text, host.StartOptions{Parts: req.Parts, RequestID: key, Agent: agent, Overlap: host.Overlap(req.Overlap)})
	release()
	if err != nil {
		s.startError(w, err)
		return
	}
	if !wait {
		writeJSON(w, http.StatusAccepted, messageResponse{SessionID: id, MessageID: run.MessageID(), RunID: run.ID(), TraceID: s.traceOf(run.ID())})
		return
	}
	// Waiting is bounded by the request; the run is not: a client that
	// leaves leaves the run going.
	res, err := run.Wait(r.Context())
	if errors.Is(err, host.ErrUnreadable) {
		// Accepted, queued for a server that reads the session.
		writeJSON(w, http.StatusAccepted, messageResponse{SessionID: id, MessageID: res.MessageID})
		return
	}
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.startError(w, err)
		return
	}
	out := resultOf(id, res)
	out.TraceID = s.traceOf(res.RunID)
	writeJSON(w, http.StatusOK, out)
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

// idempotent reads the request's Idempotency-Key, and tells whether the
// session holds a message sent with it already (retry). The same key with
// another message is refused (422): a retry sends the same message. It
// answers the admitRefusal itself.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, t *tenant, id string, req messageRequest) (key string, retry, ok bool) {
	key = r.Header.Get("Idempotency-Key")
	if key == "" {
		return "", false, true
	}
	if len(key) > maxIdempotencyKey || !utf8.ValidString(key) {
		writeError(w, http.StatusBadRequest, codeInvalid, "the Idempotency-Key header: want 1 to %d bytes of UTF-8 text", maxIdempotencyKey)
		return "", false, false
	}
	events, err := t.host.Session(id).Events(r.Context())
	if err != nil {
		readError(w, id, err)
		return "", false, false
	}
	for _, e := range events {
		if e.Input == nil || e.Input.RequestID != key {
			continue
		}
		var parts []ledger.Part
		if req.Text != "" {
			parts = append(parts, ledger.TextPart(req.Text))
		}
		parts = append(parts, req.Parts...)
		sent, _ := json.Marshal(e.Input.Parts)
		now, _ := json.Marshal(asStored(parts, e.Input.Parts))
		if !bytes.Equal(sent, now) {
			writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the Idempotency-Key %q was sent with another message (%s): a retry sends the same message", key, e.Input.MessageID)
			return "", false, false
		}
		return key, true, true
	}
	return key, false, true
}

// boolParam reads the query parameter name as a boolean (absent: false),
// answering 400 when it is not one.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "query parameter %s=%q: want true or false", name, v)
		return false, false
	}
	return b, true
}

// startError answers a failed Start or Wait.
func (s *Server) startError(w http.ResponseWriter, err error) {
	if q, ok := errors.AsType[*host.BlobQuotaError](err); ok {
		// The attachments are past the tenant's quota: nothing appended.
		writeError(w, http.StatusRequestEntityTooLarge, codeBlobQuota, "%s", blobQuotaMessage(q))
		return
	}
	if fe, ok := errors.AsType[*host.FeatureError](err); ok {
		// A rolling deploy is under way: nothing was written.
		var e apiError
		e.Error.Code, e.Error.Message, e.Error.Features = codeFeature, err.Error(), fe.Features
		for _, h := range fe.Hosts {
			e.Error.Hosts = append(e.Error.Hosts, h.String())
		}
		writeJSON(w, http.StatusConflict, e)
		return
	}
	switch {
	case errors.Is(err, host.ErrUnreadable), isDecodeError(err):
		// A newer build wrote the session: another host answers.
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, codeUnreadable, "%v (this server's build cannot read the session: a server of a newer build serves it)", err)
	case errors.Is(err, host.ErrInvalidInput):
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
	case errors.Is(err, host.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down; the run is left for another host")
	case errors.Is(err, host.ErrBusy):
		// The agent rejects overlapping turns: nothing was appended.
		var e apiError
		e.Error.Code, e.Error.Message = codeConflict, err.Error()
		if busy, ok := errors.AsType[*host.BusyError](err); ok {
			e.Error.RunID = busy.RunID
		}
		writeJSON(w, http.StatusConflict, e)
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		// A burst of connections and files took every descriptor: a
		// shortage that passes, as the streams end.
		s.log.Warn("cannot start the run: out of file descriptors", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the server is out of file descriptors (too many connections and files open at once): the message could not be accepted; retry shortly")
	default:
		s.log.Error("cannot start the run", "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "the message could not be accepted: %v", err)
	}
}

// sessionSummary is an entry of GET /v1/sessions.
type sessionSummary struct {
	ID     string      `json:"id"`
	Status host.Status `json:"status"`
	// LastActivity is when the session's ledger last changed.
	LastActivity time.Time `json:"last_activity,omitzero"`
	// Usage and Cost sum the session's model calls.
	Usage ledger.Usage `json:"usage"`
	Cost  float64      `json:"cost"`
}

// listSessions pages the tenant's sessions in id order: ?limit (1 to 200,
// default 50) after ?after (an id).
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, t *tenant) {
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			writeError(w, http.StatusBadRequest, codeInvalid, "limit %q: want 1 to 200", v)
			return
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	if after != "" && !storage.ValidSessionID(after) {
		writeError(w, http.StatusBadRequest, codeInvalid, "query parameter after=%q: want a session id", after)
		return
	}
	ids, err := t.store().(storage.Lister).ListSessions(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot list the sessions: %v", err)
		return
	}
	slices.Sort(ids)
	start, _ := slices.BinarySearch(ids, after)
	if start < len(ids) && ids[start] == after {
		start++
	}
	page := ids[start:min(start+limit, len(ids))]
	out := struct {
		Sessions []sessionSummary `json:"sessions"`
		Next     string           `json:"next,omitempty"`
	}{Sessions: []sessionSummary{}}
	for _, id := range page {
		o, err := t.host.Session(id).Overview(r.Context())
		if errors.Is(err, storage.ErrCorrupt) {
			// One damaged ledger does not hide the others: it shows as
			// damaged, its own routes say where.
			out.Sessions = append(out.Sessions, sessionSummary{ID: id, Status: host.Status{State: host.StateDamaged, Reason: err.Error()}})
			continue
		}
		if err != nil {
			readError(w, id, err)
			return
		}
		out.Sessions = append(out.Sessions, sessionSummary{ID: id, Status: o.Status, LastActivity: o.LastActivity,
			Usage: o.Usage.Total, Cost: o.Usage.Cost})
	}
	if start+limit < len(ids) {
		out.Next = page[len(page)-1]
	}
	writeJSON(w, http.StatusOK, out)
}

// exists answers 404 and returns false when the tenant has no session id.
func (s *Server) exists(w http.ResponseWriter, r *http.Request, t *tenant, id string) bool {
	events, err := t.host.Session(id).Events(r.Context())
	if err != nil {
		readError(w, id, err)
		return false
	}
	if len(events) == 0 {
		notFound(w, "session", id)
		return false
	}
	return true
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	o, err := t.host.Session(id).Overview(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	forks, err := t.host.Session(id).Forks(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ID         string              `json:"id"`
		Status     host.Status         `json:"status"`
		Usage      ledger.SessionUsage `json:"usage"`
		ForkedFrom *ledger.Fork        `json:"forked_from,omitempty"`
		Forks      []string            `json:"forks,omitempty"`
	}{id, o.Status, o.Usage, o.ForkedFrom, forks})
}

func (s *Server) getTranscript(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	q, ok := pageQuery(w, r)
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	tr, err := t.host.Session(id).Transcript(r.Context())
	if err == nil {
		tr.Forks, err = t.host.Session(id).Forks(r.Context())
	}
	if err != nil {
		readError(w, id, err)
		return
	}
	if q == (transcriptQuery{}) {
		writeJSON(w, http.StatusOK, ledger.WireTranscript(tr))
		return
	}
	var pg transcriptPage
	if tr.Items, pg, err = q.page(tr.Items); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ledger.Transcript
		Page transcriptPage `json:"page"`
	}{ledger.WireTranscript(tr), pg})
}

// maxTranscriptPage bounds a page of a transcript (?limit).
const maxTranscriptPage = 1000

// transcriptQuery is a request for a page of a transcript: at most Limit
// items after the item After, or before the item Before, or the last
// Limit items. The zero query is the whole transcript.
type transcriptQuery struct {
	After, Before string
	Limit         int
}

// transcriptPage tells a client what lies around a page of a transcript.
type transcriptPage struct {
	// HasEarlier and HasLater tell whether items come before the page's
	// first and after its last: ask with before=FIRST or after=LAST.
	HasEarlier bool `json:"has_earlier"`
	HasLater   bool `json:"has_later"`
}

// pageQuery reads a transcript's ?limit, ?after and ?before, answering a
// bad one 400.
func pageQuery(w http.ResponseWriter, r *http.Request) (transcriptQuery, bool) {
	v := r.URL.Query()
	q := transcriptQuery{After: v.Get("after"), Before: v.Get("before")}
	if q.After != "" && q.Before != "" {
		writeError(w, http.StatusBadRequest, codeInvalid, "after and before: give one of them")
		return q, false
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxTranscriptPage {
			writeError(w, http.StatusBadRequest, codeInvalid, "limit: want 1 to %d, got %q", maxTranscriptPage, l)
			return q, false
		}
		q.Limit = n
	} else if q.After != "" || q.Before != "" {
		q.Limit = 100
	}
	return q, true
}

// page cuts items to the query's page.
func (q transcriptQuery) page(items []ledger.Item) ([]ledger.Item, transcriptPage, error) {
	index := func(id string) (int, error) {
		i := slices.IndexFunc(items, func(it ledger.Item) bool { return it.ID == id })
		if i < 0 {
			return 0, fmt.Errorf("no item %s in the transcript", id)
		}
		return i, nil
	}
	from, to := max(len(items)-q.Limit, 0), len(items) // the last Limit items
	switch {
	case q.After != "":
		i, err := index(q.After)
		if err != nil {
			return nil, transcriptPage{}, fmt.Errorf("after: %w", err)
		}
		from, to = i+1, min(i+1+q.Limit, len(items))
	case q.Before != "":
		i, err := index(q.Before)
		if err != nil {
			return nil, transcriptPage{}, fmt.Errorf("before: %w", err)
		}
		from, to = max(i-q.Limit, 0), i
	}
	return items[from:to:to], transcriptPage{HasEarlier: from > 0, HasLater: to < len(items)}, nil
}

// resumeRequest is the body of POST /v1/sessions/{id}/resume.
type resumeRequest struct {
	// Action is what to do with the interrupted run: "resume" (go on
	// where it stopped), "restart" (its messages again, from scratch) or
	// "fail". Default: "resume".
	Action string `json:"action,omitempty"`
}

// resumeSession resumes the session's interrupted run on demand — one its
// agent left interrupted (on_interrupted: leave), or one a host gave up
// on — with the agent it started with.
func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var req resumeRequest
	if !s.decodeOptionalBody(w, r, &req) {
		return
	}
	switch host.ResumeAction(req.Action) {
	case "", host.ActionResume, host.ActionRestart, host.ActionFail:
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"action\": %q: want resume, restart or fail", req.Action)
		return
	}
	wait, ok := boolParam(w, r, "wait")
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	agent, err := t.runAgent(r.Context(), id)
	if err != nil {
		readError(w, id, err)
		return
	}
	release, ok := s.admitRun(w, r, t, id)
	if !ok {
		return
	}
	run, err := t.host.Session(id).StartResume(r.Context(), host.ResumeOptions{Action: host.ResumeAction(req.Action), Agent: &agent})
	release()
	switch {
	case errors.Is(err, host.ErrNothingToResume):
		writeError(w, http.StatusConflict, codeConflict, "session %s has no interrupted run to resume: %v", id, err)
		return
	case errors.Is(err, host.ErrLeadElsewhere):
		writeError(w, http.StatusConflict, codeConflict, "another host runs session %s", id)
		return
	case err != nil:
		s.startError(w, err)
		return
	}
	if !wait {
		writeJSON(w, http.StatusAccepted, messageResponse{SessionID: id, MessageID: run.MessageID(), RunID: run.ID()})
		return
	}
	res, err := run.Wait(r.Context())
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.startError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resultOf(id, res))
}

func (s *Server) cancelSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var req struct {
		Reason string `json:"reason,omitempty"`
	}
	if !s.decodeOptionalBody(w, r, &req) {
		return
	}
	if !s.exists(w, r, t, id) {
		return
	}
	reason := req.Reason
	if reason == "" {
		reason = "cancelled through the API"
	}
	writeJSON(w, http.StatusOK, map[string]bool{"cancelled": t.host.Cancel(id, reason)})
}

// postEvent posts the event {key} to the session, its payload the body
// (any bytes, up to host.MaxEventBytes): a plugin's call that waits for it
// continues (the run goes on on this server), or, when none waits yet, the
// event is kept until the first wait for its key. 202 once it is durable.
func (s *Server) postEvent(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	if !host.ValidEventKey(key) {
		writeError(w, http.StatusBadRequest, codeInvalid, "event key %.80q: want 1 to %d bytes of UTF-8 without control characters", key, host.MaxEventKeyBytes)
		return
	}
	payload, ok := s.readBody(w, r, host.MaxEventBytes, "the event payload limit, 1 MiB")
	if !ok {
		return
	}
	if !s.exists(w, r, t, id) {
		return
	}
	posted, err := t.host.Session(id).PostEvent(r.Context(), key, payload)
	if errors.Is(err, host.ErrTooManyEvents) {
		writeError(w, http.StatusConflict, codeConflict, "%v", err)
		return
	}
	if err != nil {
		s.startError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, struct {
		Event string `json:"event"`
		host.PostedEvent
	}{key, posted})
}

// asStored returns a request's parts as the ledger keeps them beside
// stored, the parts of the message sent first: an attachment the ledger
// keeps by reference to a blob is compared by its digest and size.
func asStored(parts, stored []ledger.Part) []ledger.Part {
	out := slices.Clone(parts)
	for i := range out {
		if i < len(stored) && stored[i].Blob != "" && len(out[i].Data) > 0 {
			out[i].Blob, out[i].Size, out[i].Data = storage.BlobDigest(out[i].Data), int64(len(out[i].Data)), nil
		}
	}
	return out
}

// blobQuotaMessage names the configuration a *host.BlobQuotaError passes.
func blobQuotaMessage(q *host.BlobQuotaError) string {
	if q.Limit == "size" {
		return fmt.Sprintf("an attachment of %d bytes is larger than the tenant's max_blob_bytes (%d)", q.Size, q.Max)
	}
	return fmt.Sprintf("the attachments (%d new bytes) would bring the tenant's blobs to %d bytes, past its blob_quota_bytes (%d; %d used)",
		q.Size, q.Used+q.Size, q.Max, q.Used)
}

// readError answers a request about a session that could not be read: 503,
// unreadable when this build cannot decode it (a newer build wrote it: a
// server of that build serves it), else unavailable (the storage failed).
func readError(w http.ResponseWriter, id string, err error) {
	w.Header().Set("Retry-After", "5")
	if isDecodeError(err) {
		writeError(w, http.StatusServiceUnavailable, codeUnreadable, "cannot read session %s: %v (this server's build cannot read it: a server of a newer build serves it)", id, err)
		return
	}
	writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read session %s: %v", id, err)
}

// isDecodeError reports whether err comes of an event this build cannot
// decode.
func isDecodeError(err error) bool {
	_, ok := errors.AsType[*ledger.DecodeError](err)
	return ok
}
