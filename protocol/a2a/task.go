package a2a

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// ArtifactName names the artifacts of a task: each holds the text of one
// model pass of the run.
const ArtifactName = "response"

// StateOf maps a run's status onto a task's state: approval_required →
// input-required, completed → completed, cancelled → canceled, failed and
// timed_out → failed, interrupted → unknown (the run waits to be resumed),
// and a run in flight, or one whose calls wait for an event or a time
// (waiting: the run goes on by itself), → working.
func StateOf(s ledger.RunStatus) a2a.TaskState {
	switch s {
	case ledger.RunApprovalRequired:
		return a2a.TaskStateInputRequired
	case ledger.RunCompleted:
		return a2a.TaskStateCompleted
	case ledger.RunCancelled:
		return a2a.TaskStateCanceled
	case ledger.RunFailed, ledger.RunTimedOut:
		return a2a.TaskStateFailed
	case ledger.RunInterrupted:
		return a2a.TaskStateUnknown
	}
	return a2a.TaskStateWorking
}

// AtRest tells whether a task in state s waits for nothing of the run: it
// ended (completed, canceled, failed) or waits for a person
// (input-required). A stream ends there.
func AtRest(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired
}

// running is the status of a run in flight: it has no run status yet.
const running ledger.RunStatus = ""

// runView is what a task shows of its run.
type runView struct {
	status    ledger.RunStatus // running while in flight
	reason    string
	at        time.Time
	approvals []host.PendingApproval
	items     []ledger.Item // the run's response items
	inputs    []ledger.Item // the user messages the run answers
}

// viewOf reads run runID in a session's transcript and status; ok is
// false when the transcript holds no response of the run.
func viewOf(runID string, tr ledger.Transcript, st host.Status) (v runView, ok bool) {
	for _, it := range tr.Items {
		if it.RunID != runID {
			continue
		}
		switch it.Kind {
		case ledger.ItemResponse:
			v.items = append(v.items, it)
		case ledger.ItemUser:
			v.inputs = append(v.inputs, it)
		}
	}
	if len(v.items) == 0 {
		return v, false
	}
	last := v.items[len(v.items)-1]
	v.at = last.Time
	if st.RunID == runID {
		v.at = st.Since
		v.reason = st.Reason
		switch st.State {
		case host.StateRunning:
			v.status = running
		case host.StateApprovalRequired:
			v.status = ledger.RunApprovalRequired
			for _, a := range st.Approvals {
				if a.RunID == runID {
					v.approvals = append(v.approvals, a)
				}
			}
		case host.StateWaiting:
			v.status = ledger.RunWaiting
		case host.StateCompleted, host.StateFailed, host.StateCancelled, host.StateTimedOut, host.StateInterrupted:
			v.status = ledger.RunStatus(st.State)
		default:
			v.status = statusOfItem(last)
		}
		return v, true
	}
	// An earlier run of the session: it ended as its last pass shows.
	v.status, v.reason = statusOfItem(last), last.Reason
	return v, true
}

// statusOfItem maps a run's last response item onto the run's status.
func statusOfItem(it ledger.Item) ledger.RunStatus {
	switch it.Status {
	case ledger.StatusStreaming:
		return running
	case ledger.StatusApprovalRequired:
		return ledger.RunApprovalRequired
	case ledger.StatusWaiting:
		return ledger.RunWaiting
	case ledger.StatusFailed:
		return ledger.RunFailed
	case ledger.StatusCancelled:
		return ledger.RunCancelled
	case ledger.StatusTimedOut:
		return ledger.RunTimedOut
	case ledger.StatusInterrupted:
		return ledger.RunInterrupted
	}
	return ledger.RunCompleted
}

// TaskOf builds the task of run runID of session sessionID from the
// session's transcript and status (a snapshot of an attachment, or read
// apart): its state and status message, its history (the user messages
// the run answers, the last historyLength when it is set) and one
// artifact per model pass that has text. ok is false when the transcript
// holds no response of the run.
func TaskOf(sessionID, runID string, tr ledger.Transcript, st host.Status, historyLength *int) (task *a2a.Task, ok bool) {
	v, ok := viewOf(runID, tr, st)
	if !ok {
		return nil, false
	}
	task = &a2a.Task{ID: a2a.TaskID(runID), ContextID: sessionID, Status: statusOf(sessionID, runID, v)}
	history := v.inputs
	if historyLength != nil && *historyLength < len(history) {
		history = history[len(history)-*historyLength:]
	}
	for _, it := range history {
		task.History = append(task.History, userMessage(sessionID, runID, it))
	}
	for _, it := range v.items {
		if it.Text != "" {
			task.Artifacts = append(task.Artifacts, &a2a.Artifact{ID: a2a.ArtifactID(it.ID), Name: ArtifactName,
				Parts: a2a.ContentParts{a2a.TextPart{Text: it.Text}}})
		}
	}
	return task, true
}

// userMessage is a user's message of the transcript as a task's history
// holds it.
func userMessage(sessionID, runID string, it ledger.Item) *a2a.Message {
	m := &a2a.Message{ID: it.ID, ContextID: sessionID, TaskID: a2a.TaskID(runID), Role: a2a.MessageRoleUser}
	if len(it.Parts) == 0 {
		m.Parts = a2a.ContentParts{a2a.TextPart{Text: it.Text}}
		return m
	}
	for _, p := range it.Parts {
		switch {
		case p.Type == ledger.PartText:
			m.Parts = append(m.Parts, a2a.TextPart{Text: p.Text})
		case p.URL != "":
			m.Parts = append(m.Parts, a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: p.Name, MimeType: p.MIME}, URI: p.URL}})
		default:
			// The bytes stay in the ledger: the history names the file.
			m.Parts = append(m.Parts, a2a.DataPart{Data: map[string]any{"file": map[string]any{"name": p.Name, "mimeType": p.MIME, "bytes": len(p.Data)}}})
		}
	}
	return m
}

// statusOf is the task's status: its state, when it began, and a message
// for the states that need one.
func statusOf(sessionID, runID string, v runView) a2a.TaskStatus {
	s := a2a.TaskStatus{State: StateOf(v.status)}
	if !v.at.IsZero() {
		at := v.at.UTC()
		s.Timestamp = &at
	}
	s.Message = statusMessage(sessionID, runID, v.status, v.reason, v.approvals)
	return s
}

// statusMessage is the agent's message that explains a state: the
// reason of a failed, timed out, cancelled or interrupted run, and for a
// run waiting on people, each request and how to decide it. nil for the
// others.
func statusMessage(sessionID, runID string, status ledger.RunStatus, reason string, approvals []host.PendingApproval) *a2a.Message {
	var text string
	var parts a2a.ContentParts
	switch status {
	case ledger.RunFailed, ledger.RunTimedOut, ledger.RunCancelled:
		text = fmt.Sprintf("the run %s", status)
		if reason != "" {
			text += ": " + reason
		}
	case ledger.RunInterrupted:
		text = "the run was interrupted (the process running it stopped); a host resumes it"
	case ledger.RunApprovalRequired:
		var b strings.Builder
		var list []any
		for _, a := range approvals {
			what := a.Tool
			if what == "" {
				what = "the run (" + a.Kind + ")"
			}
			fmt.Fprintf(&b, "%s waits for a person's approval (request %s)", what, a.ApprovalID)
			if a.Summary != "" {
				fmt.Fprintf(&b, ": %s", a.Summary)
			}
			if a.Reason != "" {
				fmt.Fprintf(&b, " (%s)", a.Reason)
			}
			fmt.Fprintf(&b, ". To decide, send a message on this task (taskId %s) whose only part is a data part "+
				`{"approval_id": %q, "approve": true} (or false, with a "reason"; with an "input" object, the call runs with it instead; `+
				`or "response" instead of "approve" answers the call in the tool's place); `+
				"or decide it in the console or with POST /v1/approvals/%s.\n", runID, a.ApprovalID, a.ApprovalID)
			list = append(list, approvalData(a))
		}
		text = strings.TrimSuffix(b.String(), "\n")
		if text == "" {
			text = "the run waits for a person's approval"
		}
		if len(list) > 0 {
			parts = append(parts, a2a.DataPart{Data: map[string]any{"approvals": list}})
		}
	default:
		return nil
	}
	parts = append(a2a.ContentParts{a2a.TextPart{Text: text}}, parts...)
	return &a2a.Message{ID: runID + "-" + string(StateOf(status)), ContextID: sessionID, TaskID: a2a.TaskID(runID),
		Role: a2a.MessageRoleAgent, Parts: parts}
}

// approvalData is a pending request as the input-required status
// message's data part lists it.
func approvalData(a host.PendingApproval) map[string]any {
	d := map[string]any{"approval_id": a.ApprovalID}
	if a.Kind != "" {
		d["kind"] = a.Kind
	}
	if a.Tool != "" {
		d["tool"], d["call_id"] = a.Tool, a.CallID
	}
	if len(a.Input) > 0 {
		var input any
		if json.Unmarshal(a.Input, &input) == nil {
			d["input"] = input
		}
	}
	if a.Summary != "" {
		d["summary"] = a.Summary
	}
	if a.Reason != "" {
		d["reason"] = a.Reason
	}
	if !a.ExpiresAt.IsZero() {
		d["expires_at"] = a.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return d
}
