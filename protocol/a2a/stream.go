package a2a

import (
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// Stream turns one run's progress and snapshots (host.Update) into the
// events of message/stream and tasks/resubscribe: the task first, then
// each model pass's text as artifact-update events (the artifact's id is
// the response item's; its first chunk creates it, the next ones have
// append set, and the last one lastChunk), and at the end a status-update
// with the task's state and final set. A retried pass's void text is
// replaced: an artifact-update without append, its text empty.
//
// It keeps what it sent of each artifact, so that it can follow a run
// from its progress, from snapshots, or both, and never sends a character
// twice. It is not safe for concurrent use.
type Stream struct {
	taskID, contextID string
	emit              func(event any) error
	// Now stamps the status-update events. Default: time.Now.
	Now func() time.Time

	sent    map[string]int // code points sent, by artifact id
	open    string         // the artifact whose last chunk is not sent yet
	pending map[string]host.PendingApproval
	order   []string // the pending requests' ids, in the order asked
	ended   bool
}

// NewStream returns the stream of task taskID (a run) of context
// contextID (its session). Each event (*a2a.Task,
// *a2a.TaskStatusUpdateEvent, *a2a.TaskArtifactUpdateEvent) goes to emit;
// an error of emit is returned by the method that sent the event.
func NewStream(taskID, contextID string, emit func(event any) error) *Stream {
	return &Stream{taskID: taskID, contextID: contextID, emit: emit, Now: time.Now,
		sent: map[string]int{}, pending: map[string]host.PendingApproval{}}
}

// Ended reports whether the final status-update was sent.
func (s *Stream) Ended() bool { return s.ended }

// Start sends the task, the stream's first event. With withArtifacts
// (tasks/resubscribe: the task as it stands), its artifacts go with it;
// without (message/stream), the task goes without them and their text
// follows as artifact-update events, so that a client that reads only
// those misses nothing. A task at rest (ended, or waiting for a person)
// ends the stream with its final status-update.
func (s *Stream) Start(task *a2a.Task, withArtifacts bool) error {
	first := *task
	if !withArtifacts {
		first.Artifacts = nil
	}
	if err := s.emit(&first); err != nil {
		return err
	}
	for _, a := range task.Artifacts {
		text := artifactText(a)
		if withArtifacts {
			s.sent[string(a.ID)] = utf8.RuneCountInString(text)
			continue
		}
		if err := s.appendText(string(a.ID), text, 0); err != nil {
			return err
		}
	}
	if AtRest(task.Status.State) {
		if err := s.closeArtifact(); err != nil {
			return err
		}
		s.ended = true
		return s.emit(&a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(s.taskID), ContextID: s.contextID, Final: true, Status: task.Status})
	}
	return nil
}

// artifactText is the text of an artifact's text parts.
func artifactText(a *a2a.Artifact) string {
	var text string
	for _, p := range a.Parts {
		if t, ok := p.(a2a.TextPart); ok {
			text += t.Text
		}
	}
	return text
}

// Update converts one update of the session's attachment; done tells
// that the final status-update was sent.
func (s *Stream) Update(u host.Update) (done bool, err error) {
	if s.ended {
		return true, nil
	}
	if u.Snapshot != nil {
		return s.snapshot(u.Snapshot)
	}
	if u.Progress == nil || u.Progress.RunID != s.taskID {
		return false, nil
	}
	return s.progress(*u.Progress)
}

// appendText sends the code points of text that start at offset and were
// not sent yet, into artifact id.
func (s *Stream) appendText(id, text string, offset int) error {
	if s.open != id {
		if err := s.closeArtifact(); err != nil {
			return err
		}
	}
	sent := s.sent[id]
	for skip := sent - offset; skip > 0 && text != ""; skip-- {
		_, n := utf8.DecodeRuneInString(text)
		text = text[n:]
	}
	if text == "" {
		return nil
	}
	s.sent[id] = max(sent, offset) + utf8.RuneCountInString(text)
	s.open = id
	return s.emit(&a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(s.taskID), ContextID: s.contextID, Append: sent > 0,
		Artifact: &a2a.Artifact{ID: a2a.ArtifactID(id), Name: ArtifactName, Parts: a2a.ContentParts{a2a.TextPart{Text: text}}}})
}

// closeArtifact sends the last chunk of the artifact streaming, if any.
func (s *Stream) closeArtifact() error {
	id := s.open
	if id == "" {
		return nil
	}
	s.open = ""
	return s.emit(&a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(s.taskID), ContextID: s.contextID, Append: true, LastChunk: true,
		Artifact: &a2a.Artifact{ID: a2a.ArtifactID(id), Name: ArtifactName, Parts: a2a.ContentParts{a2a.TextPart{Text: ""}}}})
}

// finish ends the stream with the final status-update of the run's
// status.
func (s *Stream) finish(status ledger.RunStatus, reason string) error {
	if err := s.closeArtifact(); err != nil {
		return err
	}
	var approvals []host.PendingApproval
	for _, id := range s.order {
		if a, ok := s.pending[id]; ok {
			approvals = append(approvals, a)
		}
	}
	at := s.Now().UTC()
	s.ended = true
	return s.emit(&a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(s.taskID), ContextID: s.contextID, Final: true,
		Status: a2a.TaskStatus{State: StateOf(status), Timestamp: &at, Message: statusMessage(s.contextID, s.taskID, status, reason, approvals)}})
}

// ask records a pending request of the run.
func (s *Stream) ask(a host.PendingApproval) {
	if _, ok := s.pending[a.ApprovalID]; !ok {
		s.order = append(s.order, a.ApprovalID)
	}
	s.pending[a.ApprovalID] = a
}

// progress converts one progress event of the run.
func (s *Stream) progress(p host.Progress) (done bool, err error) {
	switch p.Type {
	case host.ProgressResponseStart:
		if s.open != p.ResponseID {
			return false, s.closeArtifact()
		}
	case host.ProgressText:
		return false, s.appendText(p.ResponseID, p.Delta, p.Offset)
	case host.ProgressToolStart:
		return false, s.closeArtifact()
	case host.ProgressRetry:
		// The failed attempt's text is void: the artifact is replaced by
		// what the retry streams.
		if p.Retry == nil || !p.Retry.Reset || s.sent[p.ResponseID] == 0 {
			return false, nil
		}
		s.sent[p.ResponseID] = 0
		s.open = p.ResponseID
		return false, s.emit(&a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(s.taskID), ContextID: s.contextID,
			Artifact: &a2a.Artifact{ID: a2a.ArtifactID(p.ResponseID), Name: ArtifactName, Parts: a2a.ContentParts{a2a.TextPart{Text: ""}}}})
	case host.ProgressApprovalRequested:
		if a := p.Approval; a != nil {
			s.ask(host.PendingApproval{SessionID: p.SessionID, RunID: p.RunID, ApprovalID: a.ApprovalID, Kind: a.Kind, CallID: a.CallID,
				Tool: a.Tool, Input: a.Input, Summary: a.Summary, Reason: a.Reason, ExpiresAt: a.ExpiresAt})
		}
	case host.ProgressApprovalDecided:
		if a := p.Approval; a != nil && a.State != ledger.ApprovalVoid {
			delete(s.pending, a.ApprovalID)
		}
	case host.ProgressRunEnd:
		return true, s.finish(p.Status, p.Reason)
	}
	return false, nil
}

// snapshot sends what the snapshot shows of the run that was not sent
// yet, and ends the stream when the run is at rest.
func (s *Stream) snapshot(snap *host.Snapshot) (done bool, err error) {
	v, ok := viewOf(s.taskID, snap.Transcript, snap.Status)
	if !ok {
		return false, nil
	}
	for _, it := range v.items {
		if err := s.appendText(it.ID, it.Text, 0); err != nil {
			return false, err
		}
		if it.Status != ledger.StatusStreaming && s.open == it.ID {
			if err := s.closeArtifact(); err != nil {
				return false, err
			}
		}
	}
	if v.status == running {
		return false, nil
	}
	for _, a := range v.approvals {
		s.ask(a)
	}
	return true, s.finish(v.status, v.reason)
}
