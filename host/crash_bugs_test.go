//go:build unix

package host_test

// Regression tests for crash-recovery bugs found while writing
// crash_test.go; each documents the bug and the fix it got.

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestRestartLoopIsBounded: AutoResume.MaxAttempts promises that a run which
// crashes the process on every resume cannot wedge the boot in a loop. With
// an OnInterrupted hook that answers ActionRestart it does: the restart
// ends the dead run and starts a new one without recording an attempt, so
// every boot sees a run with 0 attempts, restarts it, and dies again.
//
// Fix (resume.go, ActionRestart branch): the attempt count carries over to
// the new run — a resume-attempt event for it (Attempt:
// view.ResumeAttempts+1) goes in the same batch as the dead run's run-end
// and the new run-start, and ProjectRun reports the highest attempt number,
// so the sweep gives up after MaxAttempts boots.
func TestRestartLoopIsBounded(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	// Boot 1 sends and dies; with the bound of 3, boot 5 at the latest
	// must give up.
	for boot := 1; boot <= 6; boot++ {
		res := runChild(t, "bootloop", dir, srv.URL(), childSpec{kind: "fresh"}, envBoom+"=1", envAction+"="+string(host.ActionRestart))
		if res.killed {
			continue
		}
		rep, _ := res.sweepReport()
		if res.exit != 0 || rep.GaveUp != 1 {
			t.Fatalf("boot %d: %s, sweep %+v\nstderr:\n%s", boot, res, rep, res.stderr)
		}
		return
	}
	t.Fatal("every one of 6 boots restarted the run that kills the process (AutoResume.MaxAttempts is 3): ActionRestart escapes the attempt bound")
}

// gatedLister holds the boot sweep's listing until the gate opens, so that
// a send lands before the sweep visits its session, as it does on a busy
// host whose sweep has thousands of sessions to go through.
type gatedLister struct {
	*memory.Store
	gate chan struct{}
}

func (g *gatedLister) ListSessions(ctx context.Context) ([]string, error) {
	<-g.gate
	return g.Store.ListSessions(ctx)
}

// TestSendBeforeSweepAnswersOnce: a message sent to a session whose last run
// was interrupted, before the boot sweep resumed that run (or with
// AutoResume off, or after the sweep gave up on it), started a new run while
// the interrupted one stayed open. The sweep (or a manual Resume) then
// re-drives the old run after the new one: its pass replays the whole
// ledger, so the model answers the NEW message a second time, and the
// answer shows under the old message. Runs of a session overlap in the
// ledger, which the host says never happens.
//
// Fix (session.go, Send): after loading the ledger under the session lock,
// every open run is closed — a run-end {interrupted, "superseded by run
// <new>"} in the same batch as the input and the run-start; the new run's
// model sees the superseded run's passes and both messages. And resume
// treats an open run followed by a later run-start as superseded, never
// re-drives it. (Since then, with AutoResume, as here, the send resumes
// the interrupted run first and joins it: see
// TestSendResumesTheInterruptedRun. The run is then answered once too.)
func TestSendBeforeSweepAnswersOnce(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := memory.New()
	crash := &crashAfter{Storage: base}
	crash.n.Store(1) // the input and run-start are durable, then the process dies
	h1, err := host.New(host.Options{Storage: crash, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h1.Session("x").Send(context.Background(), "first message", host.SendOptions{}); err == nil {
		t.Fatal("the crash did not happen")
	}
	h1.Close(context.Background())

	gated := &gatedLister{Store: base, gate: make(chan struct{})}
	h, err := host.New(host.Options{Storage: gated, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"},
		Logger: slog.New(slog.DiscardHandler), AutoResume: &host.AutoResume{}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	res, err := h.Session("x").Send(context.Background(), "second message", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	close(gated.gate)
	select {
	case <-h.SweepDone():
	case <-time.After(10 * time.Second):
		t.Fatal("the boot sweep did not finish")
	}
	evs, _ := base.Load(context.Background(), "x")
	if open := ledger.OpenRuns(evs); len(open) != 0 {
		t.Errorf("open runs: %v", open)
	}
	// Runs never overlap: no event of a run after a later run started.
	started := map[string]int{}
	var order []string
	for i, e := range evs {
		if e.RunStart != nil {
			started[e.RunID] = i
			order = append(order, e.RunID)
		}
	}
	for i, e := range evs {
		if e.RunID == "" {
			continue // a queued message belongs to no run until one folds it in
		}
		for _, later := range order {
			if started[later] > started[e.RunID] && i > started[later] && e.RunID != later {
				t.Errorf("event %d (%s of run %s) follows the start of the later run %s", i, e.Kind, e.RunID, later)
				break
			}
		}
	}
	answers := 0
	var items []string
	for _, it := range ledger.ProjectSession("x", evs).Items {
		items = append(items, string(it.Kind)+": "+it.Text)
		if it.Kind == ledger.ItemResponse && it.Text == "You said: second message" {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the second message was answered %d times; transcript:\n  %s", answers, strings.Join(items, "\n  "))
	}
}
