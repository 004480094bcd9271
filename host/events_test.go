package host_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// eventLog collects a host's live events.
type eventLog struct {
	mu  sync.Mutex
	all []host.Event
}

func (l *eventLog) add(e host.Event) {
	l.mu.Lock()
	l.all = append(l.all, e)
	l.mu.Unlock()
}

// wait returns the events once one of type typ arrived.
func (l *eventLog) wait(t *testing.T, typ host.EventType, n int) []host.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		seen := 0
		for _, e := range l.all {
			if e.Type == typ {
				seen++
			}
		}
		all := append([]host.Event(nil), l.all...)
		l.mu.Unlock()
		if seen >= n {
			return all
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %d %s events: %s", n, typ, types(l.all))
	return nil
}

func types(evs []host.Event) string {
	var s []string
	for _, e := range evs {
		t := string(e.Type)
		switch {
		case e.Status != "":
			t += "(" + string(e.Status) + ")"
		case e.Timeout != "":
			t += "(" + string(e.Timeout) + ")"
		case e.Resumed:
			t += "(resumed)"
		}
		s = append(s, t)
	}
	return strings.Join(s, " ")
}

// TestLiveEvents: a run with a retry, a tool call that needs approval, a
// message queued while it waits, the decision and the run's end tells each
// as a live event, in order, every one naming the session, the run, the
// agent and the time since the run started.
func TestLiveEvents(t *testing.T) {
	var log eventLog
	m := hosttest.NewModel(
		hosttest.Reply{Text: "fl", Err: model.ErrStalled},
		hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"x"}`}}},
		hosttest.Reply{Text: "published"})
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "ok"}, nil
		})
	hs := hosttest.New(t, host.Options{Model: m, Retry: quickRetries, OnEvent: log.add,
		Agent: host.Agent{Name: "writer", Tools: []host.Tool{publish}}})
	ctx := context.Background()
	s := hs.Host.Session("s")
	res, err := s.Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := s.Start(ctx, "and tell me", host.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	run, err := s.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	evs := log.wait(t, host.EventRunEnd, 2)
	want := "run-start retry step approval-requested run-end(approval_required) queued-message approval-decided run-start(resumed) step run-end(completed)"
	if got := types(evs); got != want {
		t.Fatalf("events:\n %s\nwant\n %s", got, want)
	}
	for i, e := range evs {
		if e.SessionID != "s" || e.RunID != res.RunID || e.Time.IsZero() {
			t.Errorf("event %d %+v: want session s, run %s, a time", i, e, res.RunID)
		}
		if e.Type != host.EventApprovalDecided && e.Type != host.EventQueuedMessage && e.Agent != "writer" {
			t.Errorf("event %d %s: agent %q", i, e.Type, e.Agent)
		}
	}
	byType := map[host.EventType]host.Event{}
	for _, e := range evs {
		byType[e.Type] = e
	}
	if r := byType[host.EventRetry].Retry; r == nil || r.Class != "transient" || r.Attempt != 1 || !strings.Contains(r.Reason, "stalled") {
		t.Errorf("retry event %+v", r)
	}
	if st := byType[host.EventStep]; st.FinishReason != "stop" || st.Usage == nil || st.Step != 1 || st.ElapsedMS < 0 || st.Model != hosttest.DefaultModel {
		t.Errorf("last step event %+v", st)
	}
	if a := byType[host.EventApprovalRequested].Approval; a == nil || a.Tool != "publish" || a.Token != "" {
		t.Errorf("approval-requested %+v", a)
	}
	if a := byType[host.EventApprovalDecided].Approval; a == nil || a.State != ledger.ApprovalApproved {
		t.Errorf("approval-decided %+v", a)
	}
	if q := byType[host.EventQueuedMessage]; q.MessageID == "" {
		t.Errorf("queued-message %+v", q)
	}
}

// TestLiveEventsOfTimeouts: a slow tool's timeout and a run's total timeout
// are different events: the first leaves the run going, the second ends
// it.
func TestLiveEventsOfTimeouts(t *testing.T) {
	var log eventLog
	m := hosttest.NewModel(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}, hosttest.Reply{Text: "ok"},
		hosttest.Reply{Wait: time.Hour})
	hs := hosttest.New(t, host.Options{Model: m, OnEvent: log.add,
		Agent: host.Agent{Tools: []host.Tool{sleepTool("nap", time.Hour)}, Timeouts: host.AgentTimeouts{Tool: 50 * time.Millisecond}}})
	ctx := context.Background()
	if res, err := hs.Host.Session("s").Send(ctx, "nap", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	short := host.Agent{Model: hosttest.DefaultModel, Timeouts: host.AgentTimeouts{Total: 50 * time.Millisecond}}
	if res, err := hs.Host.Session("s").Send(ctx, "wait", host.SendOptions{Agent: &short}); err != nil || res.Status != ledger.RunTimedOut {
		t.Fatalf("%+v %v", res, err)
	}
	evs := log.wait(t, host.EventRunEnd, 2)
	want := "run-start step timeout(tool) step run-end(completed) run-start timeout(total) run-end(timed_out)"
	if got := types(evs); got != want {
		t.Fatalf("events:\n %s\nwant\n %s", got, want)
	}
	if e := evs[2]; e.Tool != "nap" || e.DurationMS != 50 {
		t.Errorf("tool timeout event %+v", e)
	}
}

// TestSlowOrPanickingHook: a hook that blocks, or panics, never stalls or
// breaks a run.
func TestSlowOrPanickingHook(t *testing.T) {
	release := make(chan struct{})
	for _, c := range []struct {
		name string
		hook func(host.Event)
	}{
		{"blocks", func(host.Event) { <-release }},
		{"panics", func(host.Event) { panic(errors.New("a broken hook")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := hosttest.New(t, host.Options{OnEvent: c.hook})
			if c.name == "blocks" {
				t.Cleanup(func() { close(release) }) // before the host closes
			}
			for i := range 20 {
				res, err := hs.Host.Session("s").Send(context.Background(), "hello", host.SendOptions{})
				if err != nil || res.Status != ledger.RunCompleted {
					t.Fatalf("send %d: %+v %v", i, res, err)
				}
			}
		})
	}
}
