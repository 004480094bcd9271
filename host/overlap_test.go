package host_test

// Overlapping turns (Agent.Overlap): an agent that rejects them refuses a
// message while the session's run works — in this host, in another, or
// parked for approvals — with a *BusyError naming the run, and appends
// nothing.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
)

// gateTool returns a tool that blocks until release is closed, and a
// channel that receives once per call as it starts.
func gateTool(release <-chan struct{}) (host.Tool, <-chan struct{}) {
	started := make(chan struct{}, 16)
	return host.NewTool(host.ToolSpec{Name: "gate", Effect: host.EffectRead}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return host.ToolResult{Output: "opened"}, nil
	}), started
}

// busyRun starts a run of session id that waits in the gate tool, and
// returns it once the tool runs.
func busyRun(t *testing.T, ctx context.Context, h *host.Host, m *hosttest.Model, id string, started <-chan struct{}) *host.Run {
	t.Helper()
	m.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "gate"}}}, hosttest.Reply{Text: "done"})
	run, err := h.Session(id).Start(ctx, "work", host.StartOptions{RequestID: "req-work"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the gate tool did not run")
	}
	return run
}

// checkBusy checks that err refuses a message overlapping run runID.
func checkBusy(t *testing.T, err error, runID string, state host.State) {
	t.Helper()
	busy, ok := errors.AsType[*host.BusyError](err)
	if !ok || !errors.Is(err, host.ErrBusy) || busy.RunID != runID || busy.State != state {
		t.Fatalf("want a BusyError for run %s (%s), got %v", runID, state, err)
	}
}

func TestOverlapReject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := make(chan struct{})
	gate, started := gateTool(release)
	reject := host.Agent{Model: hosttest.DefaultModel, Tools: []host.Tool{gate}, Overlap: host.OverlapReject}
	hs := hosttest.New(t, host.Options{Agent: reject})
	run := busyRun(t, ctx, hs.Host, hs.Model, "o", started)
	before := hs.Events("o")

	// Send and Start are refused, and nothing is appended.
	_, err := hs.Host.Session("o").Send(ctx, "meanwhile", host.SendOptions{})
	checkBusy(t, err, run.ID(), host.StateRunning)
	_, err = hs.Host.Session("o").Start(ctx, "meanwhile", host.StartOptions{})
	checkBusy(t, err, run.ID(), host.StateRunning)
	if after := hs.Events("o"); len(after) != len(before) {
		t.Errorf("a refused message was appended: %s, then %s", kinds(before), kinds(after))
	}
	// A retry of the accepted message is answered as the first, not
	// refused; a message to a queueing agent joins the run.
	again, err := hs.Host.Session("o").Start(ctx, "work", host.StartOptions{RequestID: "req-work"})
	if err != nil || again.MessageID() != run.MessageID() {
		t.Fatalf("the retry: %v, message %v", err, again)
	}
	queue := reject
	queue.Overlap = host.OverlapQueue
	joined, err := hs.Host.Session("o").Start(ctx, "joins", host.StartOptions{Agent: &queue})
	if err != nil || joined.ID() != run.ID() {
		t.Fatalf("the queueing agent's message: %v", err)
	}
	close(release)
	res, err := joined.Wait(ctx)
	if err != nil || res.Status != ledger.RunCompleted || res.RunID != run.ID() {
		t.Fatalf("the queued message's answer: %+v %v", res, err)
	}
	// Once the run ended, the next message starts a run of its own.
	res, err = hs.Host.Session("o").Send(ctx, "after", host.SendOptions{})
	if err != nil || res.Text != "You said: after" || res.RunID == run.ID() {
		t.Fatalf("after the run: %+v %v", res, err)
	}
}

// TestOverlapRejectParked: a run parked for approvals is a turn not over:
// a message of an agent that rejects overlapping turns is refused.
func TestOverlapRejectParked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "published"}, nil
	})
	hs := hosttest.New(t, host.Options{Agent: host.Agent{Tools: []host.Tool{publish}, Overlap: host.OverlapReject}})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish"}}})
	res, err := hs.Host.Session("p").Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	before := hs.Events("p")
	_, err = hs.Host.Session("p").Send(ctx, "meanwhile", host.SendOptions{})
	checkBusy(t, err, res.RunID, host.StateApprovalRequired)
	if after := hs.Events("p"); len(after) != len(before) {
		t.Errorf("a refused message was appended: %s", kinds(after))
	}
}

// TestOverlapRejectOnRedis: a message of a rejecting agent that reaches a
// host while another leads the session's run is refused, naming that run;
// nothing is queued.
func TestOverlapRejectOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := make(chan struct{})
	gate, started := gateTool(release)
	m := hosttest.NewModel()
	both := func(o *host.Options) {
		o.Model = m
		o.Agent.Tools = []host.Tool{gate}
		o.Agent.Overlap = host.OverlapReject
	}
	store := mhOpen(t, srv.URL())
	a := mhHost(t, mhOpen(t, srv.URL()), "host-a", "", both)
	b := mhHost(t, mhOpen(t, srv.URL()), "host-b", "", both)
	run := busyRun(t, ctx, a, m, "r", started)
	before := hosttest.Load(t, store, "r")
	_, err := b.Session("r").Send(ctx, "meanwhile", host.SendOptions{})
	checkBusy(t, err, run.ID(), host.StateRunning)
	if after := hosttest.Load(t, store, "r"); len(after) != len(before) {
		t.Errorf("a refused message was queued: %s", kinds(after))
	}
	close(release)
	if res, err := run.Wait(ctx); err != nil || res.Text != "done" {
		t.Fatalf("the run: %+v %v", res, err)
	}
	hosttest.WaitLedger(t, store, "r", 10*time.Second, "the lease released", func([]ledger.Event) bool {
		holder, _, err := store.LeaseHolder(ctx, "r")
		return err == nil && holder == ""
	})
	if res, err := b.Session("r").Send(ctx, "after", host.SendOptions{}); err != nil || res.Text != "You said: after" {
		t.Fatalf("after the run, on host B: %+v %v", res, err)
	}
}
