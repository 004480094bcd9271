package hosttest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

func TestHarnessAndScriptedModel(t *testing.T) {
	lookup := host.NewTool(host.ToolSpec{Name: "lookup",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)},
		func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "found " + string(c.Input)}, nil
		})
	hs := hosttest.New(t, host.Options{Agent: host.Agent{Tools: []host.Tool{lookup}}})
	hs.Model.Enqueue(hosttest.Reply{Text: "scripted answer", Usage: &ledger.Usage{PromptTokens: 7, CompletionTokens: 2, TotalTokens: 9}})
	for _, tc := range []struct {
		session, send, want, kinds string
	}{
		{"scripted", "first", "scripted answer", "input run-start step run-end"},
		{"echo", "just echo this", "You said: just echo this", "input run-start step run-end"},
		{"tool", "please lookup q=gophers", `The lookup tool returned: found {"q":"gophers"}`, "input run-start step tool-result step run-end"},
	} {
		t.Run(tc.session, func(t *testing.T) {
			res, err := hs.Host.Session(tc.session).Send(context.Background(), tc.send, host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted || res.Text != tc.want {
				t.Fatalf("%+v %v", res, err)
			}
			if got := hosttest.Kinds(hs.Events(tc.session)); got != tc.kinds {
				t.Errorf("ledger = %q, want %q", got, tc.kinds)
			}
			if !hosttest.Settled(hs.Events(tc.session)) {
				t.Error("the ledger is not settled")
			}
		})
	}
	reqs := hs.Model.Requests()
	if len(reqs) != 4 || hs.Model.RequestCount() != 4 || reqs[0].Model != hosttest.DefaultModel || len(reqs[2].Tools) != 1 {
		t.Fatalf("requests = %+v", reqs)
	}
	if u := hosttest.Load(t, hs.Store, "scripted")[2].Step.Usage; u.TotalTokens != 9 {
		t.Errorf("scripted usage = %+v", u)
	}
	if u := hosttest.Load(t, hs.Store, "echo")[2].Step.Usage; u.PromptTokens == 0 || u.CompletionTokens == 0 {
		t.Errorf("estimated usage = %+v", u)
	}
}

// TestModelFailuresAreRetried: a scripted failure is classified and retried
// by the host like a provider's.
func TestModelFailuresAreRetried(t *testing.T) {
	hs := hosttest.New(t, host.Options{Retry: model.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	hs.Model.Enqueue(hosttest.Reply{Text: "half", Err: model.ErrStalled}, hosttest.Reply{Text: "whole answer"})
	var shown []string
	res, err := hs.Host.Session("s").Send(context.Background(), "hi", host.SendOptions{OnProgress: func(p host.Progress) {
		switch p.Type {
		case host.ProgressText:
			shown = append(shown, p.Delta)
		case host.ProgressRetry:
			shown = nil
		}
	}})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "whole answer" || strings.Join(shown, "") != "whole answer" {
		t.Fatalf("%+v %v (shown %q)", res, err, shown)
	}
	hs.Model.Enqueue(hosttest.Reply{Err: &model.Error{StatusCode: 402, Message: "no credits"}})
	res, err = hs.Host.Session("s").Send(context.Background(), "again", host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "402") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestWaitLedger(t *testing.T) {
	hs := hosttest.New(t, host.Options{})
	hs.Model.Delay = time.Millisecond
	r, err := hs.Host.Session("w").Start(context.Background(), "a few words to stream", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs := hosttest.WaitLedger(t, hs.Store, "w", 10*time.Second, "the run ended", hosttest.Settled)
	if hosttest.CountKind(evs, ledger.KindRunEnd) != 1 {
		t.Errorf("ledger = %s", hosttest.Kinds(evs))
	}
	if res, err := r.Wait(context.Background()); err != nil || res.Text != "You said: a few words to stream" {
		t.Errorf("%+v %v", res, err)
	}
}

// A scripted model stands in for a provider: it answers the first call with
// a tool call, then (nothing more scripted) with the tool's result.
func ExampleModel() {
	model := hosttest.NewModel(hosttest.Reply{
		Text:      "Let me check.",
		ToolCalls: []hosttest.ToolCall{{Name: "clock", Arguments: `{}`}},
	})
	clock := host.NewTool(host.ToolSpec{Name: "clock"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "12:00"}, nil
	})
	h, err := host.New(host.Options{Storage: memory.New(), Model: model, Agent: host.Agent{Model: "test/model", Tools: []host.Tool{clock}}})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())
	res, err := h.Session("time").Send(context.Background(), "What time is it?", host.SendOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Text)
	fmt.Println(model.RequestCount(), "model calls")
	// Output:
	// The clock tool returned: 12:00
	// 2 model calls
}
