package cli_test

// chat's --on-interrupted and --overlap: a run a process left interrupted
// is left so (leave) until the next message or /resume; a message sent
// while another process's run works is refused (reject).

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// leftRun records in the file storage at dir a run of session id that a
// process which died mid-pass left, answering text.
func leftRun(t *testing.T, dir, id, text string) {
	t.Helper()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	runID, msgID := ledger.NewID("run"), ledger.NewID("msg")
	now := time.Now().UTC()
	if err := fs.Append(context.Background(), id,
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
			Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(text)}}},
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
			RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: ledger.NewID("resp"), Agent: "default", Model: fakemodel.DefaultModel, MaxSteps: 16}},
	); err != nil {
		t.Fatal(err)
	}
}

// TestChatOnInterruptedLeave: with --on-interrupted leave, the next chat
// in a session whose run a process left interrupted does not resume it:
// its message is answered by a run of its own, the left run shows
// interrupted. Interactive, /resume goes on with a left run.
func TestChatOnInterruptedLeave(t *testing.T) {
	dir := t.TempDir()
	store := "file:" + dir
	leftRun(t, dir, "left", "dead")
	code, out, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "left", "--on-interrupted", "leave", "next")
	if code != 0 || strings.Contains(out, "resuming") || !strings.Contains(out, "You said: next") || strings.Contains(out, "You said: dead") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	tr := transcriptOf(t, store, "left")
	if len(tr.Items) != 4 || tr.Items[1].Status != "interrupted" || tr.Items[3].Text != "You said: next" {
		t.Errorf("transcript %+v", tr.Items)
	}

	leftRun(t, dir, "again", "dead too")
	code, out, errOut = run(t, "/resume\n/resume\n", "chat", "--offline", "--storage", store, "--session", "again", "--on-interrupted", "leave")
	if code != 0 || !strings.Contains(out, "[resuming an interrupted run]") || !strings.Contains(out, "You said: dead too") ||
		!strings.Contains(out, "[no interrupted run to resume]") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if tr := transcriptOf(t, store, "again"); len(tr.Items) != 2 || tr.Items[1].Status != "completed" {
		t.Errorf("transcript %+v", tr.Items)
	}

	if code, _, errOut := run(t, "", "chat", "--offline", "--storage", store, "--on-interrupted", "retry", "hi"); code != 2 || !strings.Contains(errOut, "want resume, restart, fail or leave") {
		t.Errorf("a bad --on-interrupted: exit %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "chat", "--offline", "--storage", store, "--overlap", "drop", "hi"); code != 2 || !strings.Contains(errOut, "want queue, reject, interrupt or rollback") {
		t.Errorf("a bad --overlap: exit %d %s", code, errOut)
	}
}

// TestChatOverlapReject: a chat with --overlap reject, sent while another
// chat's run works in the session (both on Redis), is refused with exit 75
// and a line naming the run; nothing is appended.
func TestChatOverlapReject(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	// The model's answers wait for release: the first chat's run works
	// until the test lets it go on.
	release := make(chan struct{})
	target, _ := url.Parse(strings.TrimSuffix(model.URL(), "/v1"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			proxy.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	}))
	defer gate.Close()
	store := ledgerOf(t, srv.URL())
	args := func(extra ...string) []string {
		return append([]string{"chat", "--storage", srv.URL(), "--base-url", gate.URL + "/v1", "--model", "fake/echo", "--session", "busy"}, extra...)
	}
	firstDone, runID := startFirstChat(t, store, "busy", args("first"))
	before, _ := store.Load(context.Background(), "busy")
	code, _, errOut := run(t, "", args("--overlap", "reject", "meanwhile")...)
	if code != 75 || !strings.Contains(errOut, "session busy is busy: run "+runID+" is working") || !strings.Contains(errOut, "nothing was sent") {
		t.Errorf("the overlapping chat: exit %d\n%s", code, errOut)
	}
	if after, _ := store.Load(context.Background(), "busy"); ledger.PendingInputs(after) != nil || countInputs(after) != countInputs(before) {
		t.Errorf("the refused message was appended")
	}
	close(release)
	firstCode, firstOut, firstErr := firstDone()
	if firstCode != 0 || !strings.Contains(firstOut, "You said: first") {
		t.Errorf("the first chat: exit %d %s %s", firstCode, firstOut, firstErr)
	}
}

// startFirstChat runs a chat with args in the background and waits until
// its run started in session; it returns a function that waits for the
// chat's end (its exit code and output), and the run's id.
func startFirstChat(t *testing.T, store storage.Storage, session string, args []string) (done func() (int, string, string), runID string) {
	t.Helper()
	var code int
	var out, errOut string
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		code, out, errOut = run(t, "", args...)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		evs, _ := store.Load(context.Background(), session)
		if open := ledger.OpenRuns(evs); len(open) > 0 {
			runID = open[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first chat's run did not start")
		}
	}
	return func() (int, string, string) {
		<-finished
		return code, out, errOut
	}, runID
}

// countInputs counts the messages of a ledger.
func countInputs(evs []ledger.Event) int {
	n := 0
	for _, e := range evs {
		if e.Input != nil {
			n++
		}
	}
	return n
}

// TestChatOverlapInterrupt: a chat with --overlap interrupt, sent while
// another chat's run works in the session (both on Redis, the first's pass
// held by the model), stops that run — the first chat exits 130 naming the
// interrupting message — and is answered by a run of its own.
func TestChatOverlapInterrupt(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	// The model answers "second" at once; every other pass waits until
	// its caller gives up on it (the interrupted run's does).
	target, _ := url.Parse(strings.TrimSuffix(model.URL(), "/v1"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"second"`)) {
			proxy.ServeHTTP(w, r)
			return
		}
		<-r.Context().Done()
	}))
	defer gate.Close()
	store := ledgerOf(t, srv.URL())
	args := func(extra ...string) []string {
		return append([]string{"chat", "--storage", srv.URL(), "--base-url", gate.URL + "/v1", "--model", "fake/echo", "--session", "cut"}, extra...)
	}
	firstDone, _ := startFirstChat(t, store, "cut", args("first"))
	code, out, errOut := run(t, "", args("--overlap", "interrupt", "second")...)
	if code != 0 || !strings.Contains(out, "You said: second") {
		t.Fatalf("the interrupting chat: exit %d\n%s\n%s", code, out, errOut)
	}
	firstCode, firstOut, firstErr := firstDone()
	if firstCode != 130 || !strings.Contains(firstErr, "cancelled: interrupted by message msg_") {
		t.Errorf("the interrupted chat: exit %d\n%s\n%s", firstCode, firstOut, firstErr)
	}
	evs, _ := store.Load(context.Background(), "cut")
	if ledger.OpenRuns(evs) != nil || ledger.PendingInputs(evs) != nil {
		t.Errorf("the session holds an open run or a pending message: %+v", evs)
	}
}
