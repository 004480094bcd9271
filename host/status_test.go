package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// statusOf returns the session's status, failing the test on an error.
func statusOf(t *testing.T, s *host.Session) host.Status {
	t.Helper()
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSessionStatus: a session's state through its life — idle, running
// (with a message queued into the run), completed, approval_required
// (with its requests), and how runs end: failed, cancelled, timed_out
// (naming the timeout), interrupted.
func TestSessionStatus(t *testing.T) {
	m := hosttest.NewModel()
	m.Delay = 5 * time.Millisecond
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "ok"}, nil
		})
	hs := hosttest.New(t, host.Options{Model: m, Agent: host.Agent{Tools: []host.Tool{publish}}})
	ctx := context.Background()
	s := hs.Host.Session("s")
	if st := statusOf(t, s); st.State != host.StateIdle || st.RunID != "" || st.Queued != 0 {
		t.Fatalf("a new session: %+v, want idle", st)
	}

	m.Enqueue(hosttest.Reply{Text: strings.Repeat("word ", 100)}, hosttest.Reply{Text: "second answer"})
	run, err := s.Start(ctx, "first", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStreaming(t, ctx, run)
	if _, err := s.Start(ctx, "second", host.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, s)
	if st.State != host.StateRunning || st.RunID != run.ID() || st.Step != 0 || st.Since.IsZero() || st.Queued != 1 {
		t.Fatalf("while the run streams, with a message queued: %+v", st)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st = statusOf(t, s)
	if st.State != host.StateCompleted || st.RunID != run.ID() || st.Step != 2 || st.Queued != 0 {
		t.Fatalf("after the run answered both: %+v, want completed after 2 steps", st)
	}

	m.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"x"}`}}})
	res, err := s.Send(ctx, "publish", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	st = statusOf(t, s)
	if st.State != host.StateApprovalRequired || st.RunID != res.RunID || len(st.Approvals) != 1 ||
		st.Approvals[0].Tool != "publish" || st.Approvals[0].Token == "" || !st.Since.Equal(st.Approvals[0].RequestedAt) {
		t.Fatalf("parked: %+v", st)
	}
	if !hs.Host.Cancel("s", "not today") {
		t.Fatal("Cancel found nothing to cancel")
	}
	if st = statusOf(t, s); st.State != host.StateCancelled || st.Reason != "not today" {
		t.Fatalf("after the cancel: %+v", st)
	}

	m.Enqueue(hosttest.Reply{Text: "cut", FinishReason: "length"})
	if res, _ := s.Send(ctx, "go", host.SendOptions{}); res.Status != ledger.RunFailed {
		t.Fatalf("%+v", res)
	}
	if st = statusOf(t, s); st.State != host.StateFailed || st.Reason != "truncated at max tokens" {
		t.Fatalf("after a truncated reply: %+v", st)
	}

	slow := host.Agent{Model: hosttest.DefaultModel, Timeouts: host.AgentTimeouts{Total: 50 * time.Millisecond}}
	m.Enqueue(hosttest.Reply{Wait: time.Hour})
	if res, _ := s.Send(ctx, "go", host.SendOptions{Agent: &slow}); res.Status != ledger.RunTimedOut {
		t.Fatalf("%+v", res)
	}
	if st = statusOf(t, s); st.State != host.StateTimedOut || st.Timeout != host.TimeoutTotal {
		t.Fatalf("after a total timeout: %+v", st)
	}
}

// TestSessionStatusInterruptedAndQueued: a run whose process died (no
// run-end, nobody runs it) is interrupted; a message no run picked up is
// queued.
func TestSessionStatusInterruptedAndQueued(t *testing.T) {
	store := memory.New()
	at := time.Now().UTC().Add(-time.Minute)
	in := func(msg string) ledger.Event {
		return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: at,
			Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("hi")}}}
	}
	ctx := context.Background()
	if err := store.Append(ctx, "q", in("msg_q")); err != nil {
		t.Fatal(err)
	}
	start := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: at, RunID: "run_1",
		RunStart: &ledger.RunStart{Inputs: []string{"msg_1"}, ResponseID: "resp_1", Agent: "default", Model: "m", MaxSteps: 16}}
	first := in("msg_1")
	first.RunID = "run_1"
	if err := store.Append(ctx, "i", first, start); err != nil {
		t.Fatal(err)
	}
	hs := hosttest.New(t, host.Options{Storage: store})
	if st := statusOf(t, hs.Host.Session("q")); st.State != host.StateQueued || st.Queued != 1 || !st.Since.Equal(at) {
		t.Errorf("a message no run picked up: %+v, want queued since it was sent", st)
	}
	if st := statusOf(t, hs.Host.Session("i")); st.State != host.StateInterrupted || st.RunID != "run_1" || !st.Since.Equal(at) {
		t.Errorf("a run nobody runs: %+v, want interrupted", st)
	}
}

// waitStreaming returns once run has streamed some text.
func waitStreaming(t *testing.T, ctx context.Context, run *host.Run) {
	t.Helper()
	sub := run.Subscribe(0)
	defer sub.Close()
	for {
		p, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == host.ProgressText {
			return
		}
	}
}
