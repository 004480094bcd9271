package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/file"
)

func waitEventWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/wait_event")
}

// waitHostStore is a host on a file store in dir with the wait_event
// plugin's tools, whose model is the fake one; its store, and the module.
func waitHostStore(t *testing.T, dir string, mutate ...func(*host.Options)) (*host.Host, *file.Store, *plugins.Module) {
	t.Helper()
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	store, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rt := plugintest.Runtime(t, plugins.Options{})
	m := plugintest.Load(t, rt, plugins.Source{Name: "wait_event", Wasm: waitEventWasm(t), Tenant: "acme"})
	client, err := provider.New(provider.Config{BaseURL: model.URL(), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	opts := host.Options{Storage: store, Model: client, Agent: host.Agent{Model: "fake/echo", Tools: m.Tools()}}
	for _, f := range mutate {
		f(&opts)
	}
	return hosttest.New(t, opts).Host, store, m
}

// waitEnd waits for the session's run to end (a state other than waiting
// or running) and returns its status.
func waitEnd(t *testing.T, s *host.Session) host.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := s.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		switch st.State {
		case host.StateWaiting, host.StateRunning, host.StateQueued:
		default:
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session is still %s", st.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// toolResults returns the session's tool results.
func toolResults(t *testing.T, store *file.Store, session string) []ledger.ToolResult {
	t.Helper()
	evs, err := store.Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.ToolResult
	for _, e := range evs {
		if e.ToolResult != nil {
			out = append(out, *e.ToolResult)
		}
	}
	return out
}

// TestWaitEvent: a call that waits for an event parks its run, holding no
// run in flight (the progress stream says tool-waiting); the session shows
// it waiting for the event; posting the
// event continues the run, whose call returns the payload.
func TestWaitEvent(t *testing.T) {
	h, store, _ := waitHostStore(t, t.TempDir())
	ctx := context.Background()
	s := h.Session("w1")
	var waiting []host.Progress
	res, err := s.Send(ctx, "please wait_event key=order-42-paid", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressToolWaiting {
			waiting = append(waiting, p)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunWaiting || len(res.Waits) != 1 || res.Waits[0].Event != "order-42-paid" || res.Waits[0].Name != "wait_event" {
		t.Fatalf("Send: %s %q waits %+v, want waiting for the event order-42-paid", res.Status, res.Reason, res.Waits)
	}
	if len(waiting) != 1 || waiting[0].Tool == nil || waiting[0].Tool.Name != "wait_event" || waiting[0].Wait == nil || waiting[0].Wait.Event != "order-42-paid" {
		t.Errorf("the progress stream's tool-waiting events: %+v, want one naming the call and its event", waiting)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != host.StateWaiting || len(st.Waits) != 1 || st.Waits[0].Event != "order-42-paid" {
		t.Fatalf("status %s waits %+v, want waiting", st.State, st.Waits)
	}
	if n := h.Running(); n != 0 {
		t.Errorf("%d runs in flight while the call waits, want 0", n)
	}
	posted, err := s.PostEvent(ctx, "order-42-paid", []byte(`{"paid":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if !posted.Taken {
		t.Errorf("PostEvent: %+v, want the waiting call to take it", posted)
	}
	if end := waitEnd(t, s); end.State != host.StateCompleted {
		t.Fatalf("the run ended %s: %s", end.State, end.Reason)
	}
	results := toolResults(t, store, "w1")
	if len(results) != 1 || results[0].IsError || !strings.Contains(results[0].Output, `"payload":"{\"paid\":true}"`) {
		t.Fatalf("tool results %+v, want the event's payload", results)
	}
}

// TestWaitEventPostedFirst: an event posted before any call waits for it
// is kept, and the first wait for its key takes it at once.
func TestWaitEventPostedFirst(t *testing.T) {
	h, store, _ := waitHostStore(t, t.TempDir())
	ctx := context.Background()
	s := h.Session("w2")
	posted, err := s.PostEvent(ctx, "early", []byte("first"))
	if err != nil || posted.Taken {
		t.Fatalf("PostEvent: %+v, %v; want kept, not taken", posted, err)
	}
	res, err := s.Send(ctx, "please wait_event key=early", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunCompleted {
		t.Fatalf("Send: %s %q, want completed at once", res.Status, res.Reason)
	}
	if r := toolResults(t, store, "w2"); len(r) != 1 || !strings.Contains(r[0].Output, `"payload":"first"`) {
		t.Fatalf("tool results %+v", r)
	}
	// Taken: the next wait for the key waits.
	res, err = s.Send(ctx, "please wait_event key=early", host.SendOptions{})
	if err != nil || res.Status != ledger.RunWaiting {
		t.Fatalf("a second wait: %s, %v; want waiting (the event was taken)", res.Status, err)
	}
}

// TestWaitTimer: a call that waits a second parks its run; the host fires
// the time and the run completes by itself.
func TestWaitTimer(t *testing.T) {
	h, store, _ := waitHostStore(t, t.TempDir())
	s := h.Session("w3")
	start := time.Now()
	res, err := s.Send(context.Background(), "please wait_seconds seconds=1", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunWaiting || len(res.Waits) != 1 || res.Waits[0].Until.IsZero() {
		t.Fatalf("Send: %s waits %+v, want waiting until a time", res.Status, res.Waits)
	}
	if end := waitEnd(t, s); end.State != host.StateCompleted {
		t.Fatalf("the run ended %s: %s", end.State, end.Reason)
	}
	if time.Since(start) < time.Second {
		t.Errorf("the wait of a second ended after %s", time.Since(start))
	}
	if r := toolResults(t, store, "w3"); len(r) != 1 || r[0].IsError || !strings.Contains(r[0].Output, `"slept":1`) {
		t.Fatalf("tool results %+v", r)
	}
}

// TestWaitCancelAndTimeout: cancelling a run whose call waits ends it
// cancelled, the call answered so; a run whose total timeout passes while
// its call waits ends timed out.
func TestWaitCancelAndTimeout(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		h, store, _ := waitHostStore(t, t.TempDir())
		s := h.Session("w4")
		if res, err := s.Send(context.Background(), "please wait_event key=never", host.SendOptions{}); err != nil || res.Status != ledger.RunWaiting {
			t.Fatalf("Send: %v %v", res.Status, err)
		}
		if !h.Cancel("w4", "the user gave up") {
			t.Fatal("Cancel found nothing to cancel")
		}
		end := waitEnd(t, s)
		if end.State != host.StateCancelled {
			t.Fatalf("the run ended %s, want cancelled", end.State)
		}
		if r := toolResults(t, store, "w4"); len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Output, "cancelled") {
			t.Fatalf("tool results %+v, want the call answered cancelled", r)
		}
	})
	t.Run("total timeout", func(t *testing.T) {
		h, store, _ := waitHostStore(t, t.TempDir(), func(o *host.Options) { o.Agent.Timeouts.Total = 1500 * time.Millisecond })
		s := h.Session("w5")
		if res, err := s.Send(context.Background(), "please wait_event key=never", host.SendOptions{}); err != nil || res.Status != ledger.RunWaiting {
			t.Fatalf("Send: %v %v", res.Status, err)
		}
		end := waitEnd(t, s)
		if end.State != host.StateTimedOut {
			t.Fatalf("the run ended %s (%s), want timed_out", end.State, end.Reason)
		}
		r := toolResults(t, store, "w5")
		if len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Output, "while this call waited for the event \"never\"") {
			t.Fatalf("tool results %+v", r)
		}
	})
}

// TestWaitOutsideARun: a call that keeps no journal cannot wait for an
// event: it fails, saying so.
func TestWaitOutsideARun(t *testing.T) {
	rt := plugintest.Runtime(t, plugins.Options{})
	m := plugintest.Load(t, rt, plugins.Source{Name: "wait_event", Wasm: waitEventWasm(t)})
	tool := moduleTool(t, m, "wait_event")
	_, err := tool.Call(context.Background(), host.ToolCall{ID: "c1", Name: "wait_event", Input: json.RawMessage(`{"key":"k"}`)})
	if err == nil || !strings.Contains(err.Error(), "only a durable call waits") {
		t.Fatalf("err = %v, want the refusal", err)
	}
}

// TestWaitHoldsNothing: while a call waits, its run holds no goroutine
// and its plugin no instance: 20 calls waiting, the goroutines are those
// of the host before them (give or take a few that are no wait's), and
// every instance the module made is idle or gone.
func TestWaitHoldsNothing(t *testing.T) {
	h, _, m := waitHostStore(t, t.TempDir())
	ctx := context.Background()
	// A first run (an event posted before its wait) warms what stays: the
	// model's connections, the host's idle run goroutine, the pool.
	if _, err := h.Session("warm").PostEvent(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if res, err := h.Session("warm").Send(ctx, "please wait_event key=k", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("the warm-up: %v %v", res.Status, err)
	}
	// settle waits for the goroutines to be no more than limit, or, with
	// limit < 0, for their number to stay the same over 20 looks.
	settle := func(limit int) int {
		n, same := runtime.NumGoroutine(), 0
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if (limit >= 0 && n <= limit) || (limit < 0 && same == 20) {
				break
			}
			time.Sleep(10 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				same++
			} else {
				same = 0
			}
			n = m
		}
		return n
	}
	before := settle(-1)
	const waiting = 20
	for i := range waiting {
		res, err := h.Session(fmt.Sprintf("w%d", i)).Send(ctx, "please wait_event key=never", host.SendOptions{})
		if err != nil || res.Status != ledger.RunWaiting {
			t.Fatalf("send %d: %v %v", i, res.Status, err)
		}
	}
	// A goroutine or two may come meanwhile that are no wait's (an idle
	// run driver more, a model connection under load): a wait that held
	// one would show as 20.
	if n := settle(before); n > before+4 {
		t.Errorf("%d goroutines with %d calls waiting, %d before them", n, waiting, before)
	}
	if n := h.Running(); n != 0 {
		t.Errorf("%d runs in flight, want 0", n)
	}
	st := m.Stats()
	if held := st.Instantiated - st.Discarded - st.Evicted - int64(st.Idle); held != 0 {
		t.Errorf("%d instances held by waiting calls (stats %+v), want 0", held, st)
	}
}

// TestDeleteForgetsEvents: an event kept for a session (no call waited
// for it) goes with the session's deletion: a session made again under
// its id does not find it.
func TestDeleteForgetsEvents(t *testing.T) {
	h, _, _ := waitHostStore(t, t.TempDir())
	ctx := context.Background()
	s := h.Session("gone")
	if res, err := s.Send(ctx, "hello", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("send: %v %v", res.Status, err)
	}
	if _, err := s.PostEvent(ctx, "stale", []byte("old")); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Delete(ctx, host.DeleteOptions{})
	if err != nil || rep.IndexEntries < 1 {
		t.Fatalf("delete: %+v %v, want the kept event among its index entries", rep, err)
	}
	res, err := s.Send(ctx, "please wait_event key=stale", host.SendOptions{})
	if err != nil || res.Status != ledger.RunWaiting {
		t.Fatalf("a wait in the session made again: %s %v, want waiting (the old event gone)", res.Status, err)
	}
}

// TestWaitWithApproval: a pass whose calls both wait for an event and ask
// a person parks approval_required, not waiting — people come first — in
// the run's result and the session's status; once the person approved,
// the run parks again, waiting for the event alone, and the event ends it.
func TestWaitWithApproval(t *testing.T) {
	var published atomic.Int32
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		published.Add(1)
		return host.ToolResult{Output: "published"}, nil
	})
	h, _, _ := waitHostStore(t, t.TempDir(), func(o *host.Options) {
		o.Agent.Tools = append(o.Agent.Tools, publish)
	})
	ctx := context.Background()
	s := h.Session("wa")
	res, err := s.Send(ctx, "please wait_event key=order-7-paid and publish", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 || res.Approvals[0].Tool != "publish" {
		t.Fatalf("Send: %s approvals %+v waits %+v, want approval_required for publish", res.Status, res.Approvals, res.Waits)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != host.StateApprovalRequired {
		t.Fatalf("status %s, want approval_required while a person is asked and a call waits", st.State)
	}
	run, err := s.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err = run.Wait(ctx); err != nil || res.Status != ledger.RunWaiting || published.Load() != 1 {
		t.Fatalf("after the approval: %s %v (published %d), want waiting for the event", res.Status, err, published.Load())
	}
	if st, err = s.Status(ctx); err != nil || st.State != host.StateWaiting {
		t.Fatalf("status after the approval: %s %v, want waiting", st.State, err)
	}
	if _, err := s.PostEvent(ctx, "order-7-paid", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if end := waitEnd(t, s); end.State != host.StateCompleted {
		t.Fatalf("the run ended %s: %s", end.State, end.Reason)
	}
}
