package a2a

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The fixed clock of the golden files.
var (
	t0      = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	expires = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
)

const (
	sessionID = "a2a_0123456789abcdef01234567"
	runID     = "run_01KBG00000000000000000000"
)

func prog(p host.Progress) host.Update {
	p.RunID, p.SessionID = runID, sessionID
	return host.Update{Progress: &p}
}

func respStart(id string) host.Update {
	return prog(host.Progress{Type: host.ProgressResponseStart, ResponseID: id})
}

func text(id string, offset int, delta string) host.Update {
	return prog(host.Progress{Type: host.ProgressText, ResponseID: id, Offset: offset, Delta: delta})
}

func runEnd(status ledger.RunStatus, reason string) host.Update {
	return prog(host.Progress{Type: host.ProgressRunEnd, Status: status, Reason: reason})
}

// user and resp are transcript items of the run.
func user(id, text string) ledger.Item {
	return ledger.Item{ID: id, Kind: ledger.ItemUser, RunID: runID, Text: text, Time: t0}
}

func resp(id, text string, status ledger.ItemStatus, reason string) ledger.Item {
	return ledger.Item{ID: id, Kind: ledger.ItemResponse, RunID: runID, Text: text, Status: status, Reason: reason, Time: t0.Add(time.Second)}
}

func snap(status host.Status, items ...ledger.Item) host.Update {
	status.SessionID = sessionID
	return host.Update{Snapshot: &host.Snapshot{Transcript: ledger.Transcript{SessionID: sessionID, Items: items}, Status: status}}
}

var pending = host.PendingApproval{SessionID: sessionID, RunID: runID, ApprovalID: "apr_1", CallID: "call_1", Tool: "publish_post",
	Input: json.RawMessage(`{"title":"Hello","body":"World"}`), Summary: `publish_post {"title":"Hello"}`, Reason: "the tool has an external effect",
	RequestedAt: t0, ExpiresAt: expires}

// goldenStreams are runs as an A2A client reads them (testdata/NAME.sse):
// the first task, then what the updates make of it.
var goldenStreams = []struct {
	name          string
	task          host.Update // a snapshot: the task the stream starts with
	withArtifacts bool        // tasks/resubscribe; else message/stream
	updates       []host.Update
}{
	{
		name: "stream-tool-run",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "look up account 42"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			respStart("resp_1"), text("resp_1", 0, "Let me "), text("resp_1", 7, "look."),
			prog(host.Progress{Type: host.ProgressToolStart, ResponseID: "resp_1", Tool: &host.ToolInfo{CallID: "call_1", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`)}}),
			prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "resp_1", Tool: &host.ToolInfo{CallID: "call_1", Name: "get_account", Output: `{"plan":"team"}`}}),
			respStart("resp_2"), text("resp_2", 0, "The plan "), text("resp_2", 9, "is team."),
			runEnd(ledger.RunCompleted, ""),
		},
	},
	{
		// A text delta the stream had from the task already is not sent
		// twice; a retry's void text is replaced.
		name: "stream-retry",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "hi"), resp("resp_1", "Hel", ledger.StatusStreaming, "")),
		updates: []host.Update{
			text("resp_1", 0, "Hel"), text("resp_1", 3, "lo"),
			prog(host.Progress{Type: host.ProgressRetry, ResponseID: "resp_1", Retry: &host.RetryInfo{Reason: "HTTP 503", Attempt: 1, DelayMS: 10, Reset: true}}),
			text("resp_1", 0, "Hello!"),
			runEnd(ledger.RunCompleted, ""),
		},
	},
	{
		name: "stream-input-required",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "publish_post title=Hello body=World"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			text("resp_1", 0, "Publishing."),
			prog(host.Progress{Type: host.ProgressApprovalRequested, ResponseID: "resp_1", Approval: &host.ApprovalInfo{ApprovalID: "apr_1", CallID: "call_1",
				Tool: "publish_post", Input: pending.Input, Summary: pending.Summary, Reason: pending.Reason, State: ledger.ApprovalPending, ExpiresAt: expires}}),
			runEnd(ledger.RunApprovalRequired, ""),
		},
	},
	{
		name: "stream-timed-out",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "think"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			text("resp_1", 0, "Thinking"),
			runEnd(ledger.RunTimedOut, "total: the run took longer than 5s"),
		},
	},
	{
		name: "stream-failed",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "hi"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			runEnd(ledger.RunFailed, "model: rate_limited: HTTP 429"),
		},
	},
	{
		name: "stream-cancelled",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "hi"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			text("resp_1", 0, "Partial"),
			runEnd(ledger.RunCancelled, "cancelled through A2A (tasks/cancel)"),
		},
	},
	{
		// tasks/resubscribe mid-run: the task with its text so far, then
		// the rest, live.
		name:          "resubscribe-live",
		task:          snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "count"), resp("resp_1", "one two ", ledger.StatusStreaming, "")),
		withArtifacts: true,
		updates: []host.Update{
			text("resp_1", 4, "two "), text("resp_1", 8, "three"),
			runEnd(ledger.RunCompleted, ""),
		},
	},
	{
		// Another host runs it: snapshots only.
		name: "stream-snapshots",
		task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0, Holder: "host-b"}, user("msg_1", "count"), resp("resp_1", "", ledger.StatusStreaming, "")),
		updates: []host.Update{
			snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0, Holder: "host-b"}, user("msg_1", "count"), resp("resp_1", "one ", ledger.StatusCompleted, "")),
			snap(host.Status{State: host.StateCompleted, RunID: runID, Since: t0.Add(2 * time.Second)}, user("msg_1", "count"),
				resp("resp_1", "one ", ledger.StatusCompleted, ""), resp("resp_2", "two", ledger.StatusCompleted, "")),
		},
	},
	{
		// tasks/resubscribe on a task that ended: the task, and its end.
		name:          "resubscribe-ended",
		task:          snap(host.Status{State: host.StateCompleted, RunID: runID, Since: t0.Add(2 * time.Second)}, user("msg_1", "hi"), resp("resp_1", "You said: hi", ledger.StatusCompleted, "")),
		withArtifacts: true,
	},
}

// streamOf runs a golden stream through a Stream, as the server writes it.
func streamOf(t *testing.T, name string, task host.Update, withArtifacts bool, updates []host.Update) []byte {
	t.Helper()
	var out bytes.Buffer
	st := NewStream(runID, sessionID, func(ev any) error {
		b, err := json.Marshal(Result(json.RawMessage("1"), ev))
		if err != nil {
			return err
		}
		out.WriteString("data: ")
		out.Write(b)
		out.WriteString("\n\n")
		return nil
	})
	st.Now = func() time.Time { return t0.Add(3 * time.Second) }
	first, ok := TaskOf(sessionID, runID, task.Snapshot.Transcript, task.Snapshot.Status, nil)
	if !ok {
		t.Fatalf("%s: no task in the first snapshot", name)
	}
	if err := st.Start(first, withArtifacts); err != nil {
		t.Fatal(err)
	}
	for _, u := range updates {
		if st.Ended() {
			t.Fatalf("%s: an update after the end", name)
		}
		if _, err := st.Update(u); err != nil {
			t.Fatal(err)
		}
	}
	if !st.Ended() {
		t.Fatalf("%s: the stream did not end", name)
	}
	return out.Bytes()
}

func TestGoldenStreams(t *testing.T) {
	for _, g := range goldenStreams {
		t.Run(g.name, func(t *testing.T) {
			golden(t, g.name+".sse", streamOf(t, g.name, g.task, g.withArtifacts, g.updates))
		})
	}
}

// goldenTasks are tasks as tasks/get and message/send answer them
// (testdata/task-NAME.json).
var goldenTasks = []struct {
	name    string
	task    host.Update
	history *int
}{
	{name: "working", task: snap(host.Status{State: host.StateRunning, RunID: runID, Since: t0}, user("msg_1", "hi"), resp("resp_1", "Hel", ledger.StatusStreaming, ""))},
	{name: "completed", task: snap(host.Status{State: host.StateCompleted, RunID: runID, Since: t0.Add(2 * time.Second)},
		user("msg_1", "look up account 42"), resp("resp_1", "Let me look.", ledger.StatusCompleted, ""), resp("resp_2", "The plan is team.", ledger.StatusCompleted, ""))},
	{name: "input-required", task: snap(host.Status{State: host.StateApprovalRequired, RunID: runID, Since: t0, Approvals: []host.PendingApproval{pending}},
		user("msg_1", "publish_post title=Hello body=World"), resp("resp_1", "", ledger.StatusApprovalRequired, ""))},
	{name: "failed", task: snap(host.Status{State: host.StateTimedOut, RunID: runID, Since: t0, Reason: "total: the run took longer than 5s", Timeout: host.TimeoutTotal},
		user("msg_1", "think"), resp("resp_1", "Thinking", ledger.StatusTimedOut, "total: the run took longer than 5s"))},
	{name: "canceled-earlier-run", task: snap(host.Status{State: host.StateRunning, RunID: "run_later", Since: t0},
		user("msg_1", "hi"), resp("resp_1", "Partial", ledger.StatusCancelled, "cancelled through A2A (tasks/cancel)"),
		ledger.Item{ID: "msg_2", Kind: ledger.ItemUser, RunID: "run_later", Text: "again"})},
	{name: "interrupted", task: snap(host.Status{State: host.StateInterrupted, RunID: runID, Since: t0}, user("msg_1", "hi"), resp("resp_1", "Hel", ledger.StatusInterrupted, ""))},
	{name: "history-1", history: ptr(1), task: snap(host.Status{State: host.StateCompleted, RunID: runID, Since: t0},
		user("msg_1", "first"), user("msg_2", "second, queued into the run"), resp("resp_1", "Both read.", ledger.StatusCompleted, ""))},
}

func ptr[T any](v T) *T { return &v }

func TestGoldenTasks(t *testing.T) {
	for _, g := range goldenTasks {
		t.Run(g.name, func(t *testing.T) {
			task, ok := TaskOf(sessionID, runID, g.task.Snapshot.Transcript, g.task.Snapshot.Status, g.history)
			if !ok {
				t.Fatal("no task")
			}
			b, err := json.MarshalIndent(Result(json.RawMessage(`"req-1"`), task), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "task-"+g.name+".json", append(b, '\n'))
		})
	}
	if _, ok := TaskOf(sessionID, "run_other", goldenTasks[0].task.Snapshot.Transcript, goldenTasks[0].task.Snapshot.Status, nil); ok {
		t.Error("a run the transcript does not hold has a task")
	}
}

func TestGoldenCard(t *testing.T) {
	card := Card(CardOptions{Name: "default", URL: "https://agents.example.com/a2a/default"})
	b, err := json.MarshalIndent(card, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "card.json", append(b, '\n'))
}
