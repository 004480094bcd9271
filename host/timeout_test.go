package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// quickRetries retries at once, three attempts in all.
var quickRetries = model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

// sleepTool returns a tool that sleeps for d (or until its context ends),
// then answers "slept".
func sleepTool(name string, d time.Duration) host.Tool {
	return host.NewTool(host.ToolSpec{Name: name}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		select {
		case <-time.After(d):
			return host.ToolResult{Output: "slept"}, nil
		case <-ctx.Done():
			return host.ToolResult{}, ctx.Err()
		}
	})
}

// lastResponse returns the session's last response item.
func lastResponse(t *testing.T, s *host.Session) ledger.Item {
	t.Helper()
	tr, err := s.Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := len(tr.Items) - 1; i >= 0; i-- {
		if tr.Items[i].Kind == ledger.ItemResponse {
			return tr.Items[i]
		}
	}
	t.Fatalf("no response item in %+v", tr.Items)
	return ledger.Item{}
}

// runEndOf returns the run-end event of the session's last run.
func runEndOf(t *testing.T, events []ledger.Event) *ledger.RunEnd {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].RunEnd != nil {
			return events[i].RunEnd
		}
	}
	t.Fatalf("no run-end in %s", hosttest.Kinds(events))
	return nil
}

// TestAgentTimeouts: each of the agent's timeouts ends what it bounds as
// documented — total and step end the run timed_out naming themselves,
// with what streamed kept; a tool timeout is a result the model reads and
// the run goes on; a silent stream is retried, and once the retries are
// spent the run ends timed_out naming the chunk bound.
func TestAgentTimeouts(t *testing.T) {
	slowWords := hosttest.Reply{Text: strings.Repeat("word ", 200)}
	for _, c := range []struct {
		name     string
		timeouts host.AgentTimeouts
		script   []hosttest.Reply
		delay    time.Duration // the model's pause before each word
		tools    []host.Tool
		status   ledger.RunStatus
		timeout  host.TimeoutKind
		reason   string // in the run's reason
		requests int    // model calls made, 0: not checked
		check    func(t *testing.T, res host.RunResult, events []ledger.Event)
	}{
		{
			name: "total", timeouts: host.AgentTimeouts{Total: 300 * time.Millisecond},
			script: []hosttest.Reply{slowWords}, delay: 20 * time.Millisecond,
			status: ledger.RunTimedOut, timeout: host.TimeoutTotal, reason: "total timeout of 300ms",
			check: func(t *testing.T, res host.RunResult, events []ledger.Event) {
				if !strings.HasPrefix(res.Text, "word word") {
					t.Errorf("the text that streamed was not kept: %q", res.Text)
				}
			},
		},
		{
			name: "total, across passes", timeouts: host.AgentTimeouts{Total: 300 * time.Millisecond},
			script: []hosttest.Reply{{ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}, {ToolCalls: []hosttest.ToolCall{{Name: "nap"}}},
				{ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}, {ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}, {Text: "done"}},
			tools:  []host.Tool{sleepTool("nap", 120*time.Millisecond)},
			status: ledger.RunTimedOut, timeout: host.TimeoutTotal, reason: "total timeout",
			check: func(t *testing.T, res host.RunResult, events []ledger.Event) {
				// The tool results recorded stay: a timeout rolls nothing back.
				if n := hosttest.CountKind(events, ledger.KindToolResult); n < 2 {
					t.Errorf("%d tool results recorded, want the ones that ran before the timeout", n)
				}
			},
		},
		{
			name: "step", timeouts: host.AgentTimeouts{Step: 300 * time.Millisecond},
			script: []hosttest.Reply{{ToolCalls: []hosttest.ToolCall{{Name: "nap"}, {Name: "nap"}}}, {Text: "never"}},
			tools:  []host.Tool{sleepTool("nap", time.Hour)},
			status: ledger.RunTimedOut, timeout: host.TimeoutStep, reason: "step 0 ran past its step timeout of 300ms", requests: 1,
			check: func(t *testing.T, res host.RunResult, events []ledger.Event) {
				var outs []string
				for _, e := range events {
					if e.ToolResult != nil {
						outs = append(outs, e.ToolResult.Output)
					}
				}
				if len(outs) != 2 || !strings.Contains(outs[0], "the run timed out while the tool ran") ||
					!strings.Contains(outs[1], "the run timed out before this tool call ran") {
					t.Errorf("tool results %q, want the first cut while it ran and the second never run, both saying the run timed out", outs)
				}
			},
		},
		{
			name: "tool", timeouts: host.AgentTimeouts{Tool: 100 * time.Millisecond},
			script: []hosttest.Reply{{ToolCalls: []hosttest.ToolCall{{Name: "nap"}}}, {Text: "the nap took too long"}},
			tools:  []host.Tool{sleepTool("nap", time.Hour)},
			status: ledger.RunCompleted, requests: 2,
			check: func(t *testing.T, res host.RunResult, events []ledger.Event) {
				for _, e := range events {
					if r := e.ToolResult; r != nil && (!r.IsError || r.Output != "error: tool nap timed out after 100ms") {
						t.Errorf("tool result %+v, want the tool timeout", r)
					}
				}
			},
		},
		{
			name: "first chunk, once", timeouts: host.AgentTimeouts{FirstChunk: 100 * time.Millisecond},
			script: []hosttest.Reply{{Wait: time.Hour, Text: "never"}, {Text: "second try"}},
			status: ledger.RunCompleted, requests: 2,
			check: func(t *testing.T, res host.RunResult, events []ledger.Event) {
				if res.Text != "second try" || hosttest.CountKind(events, ledger.KindRetry) != 1 {
					t.Errorf("text %q, ledger %s; want one retry, then the answer", res.Text, hosttest.Kinds(events))
				}
			},
		},
		{
			name: "first chunk, every attempt", timeouts: host.AgentTimeouts{FirstChunk: 50 * time.Millisecond},
			script: []hosttest.Reply{{Wait: time.Hour}, {Wait: time.Hour}, {Wait: time.Hour}},
			status: ledger.RunTimedOut, timeout: host.TimeoutFirstChunk, reason: "gave up after 3 attempts", requests: 3,
		},
		{
			name: "chunk, every attempt", timeouts: host.AgentTimeouts{Chunk: 50 * time.Millisecond},
			script: []hosttest.Reply{{Text: "a b", Stall: time.Hour}, {Text: "a b", Stall: time.Hour}, {Text: "a b", Stall: time.Hour}},
			status: ledger.RunTimedOut, timeout: host.TimeoutChunk, reason: "silent for 50ms (chunk timeout) (gave up after 3 attempts)", requests: 3,
		},
		{
			name: "chunk does not bound the first wait", timeouts: host.AgentTimeouts{Chunk: 50 * time.Millisecond},
			script: []hosttest.Reply{{Wait: 200 * time.Millisecond, Text: "late but steady"}},
			status: ledger.RunCompleted, requests: 1,
		},
		{
			name: "a steady stream outlasts its chunk bound", timeouts: host.AgentTimeouts{FirstChunk: 100 * time.Millisecond, Chunk: 100 * time.Millisecond},
			script: []hosttest.Reply{{Text: strings.Repeat("tick ", 20)}}, delay: 20 * time.Millisecond,
			status: ledger.RunCompleted, requests: 1,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := hosttest.NewModel(c.script...)
			m.Delay = c.delay
			hs := hosttest.New(t, host.Options{Model: m, Retry: quickRetries,
				Agent: host.Agent{Tools: c.tools, Timeouts: c.timeouts, MaxSteps: 8}})
			s := hs.Host.Session("s")
			var ends []host.Progress
			res, err := s.Send(context.Background(), "go", host.SendOptions{OnProgress: func(p host.Progress) {
				if p.Type == host.ProgressRunEnd {
					ends = append(ends, p)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.status || res.Timeout != c.timeout || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("result: status %s, timeout %q, reason %q; want %s, %q, a reason with %q", res.Status, res.Timeout, res.Reason, c.status, c.timeout, c.reason)
			}
			if c.requests > 0 && m.RequestCount() != c.requests {
				t.Errorf("%d model calls, want %d", m.RequestCount(), c.requests)
			}
			events := hs.Events("s")
			end := runEndOf(t, events)
			if end.Status != c.status || end.Timeout != string(c.timeout) || end.Reason != res.Reason {
				t.Errorf("run-end %+v, want status %s, timeout %q, the result's reason", end, c.status, c.timeout)
			}
			if len(ends) != 1 || ends[0].Status != c.status || ends[0].Timeout != c.timeout {
				t.Errorf("run-end progress %+v", ends)
			}
			if c.status == ledger.RunTimedOut {
				if it := lastResponse(t, s); it.Status != ledger.StatusTimedOut || it.Reason != res.Reason {
					t.Errorf("transcript item: %s %q, want timed_out with the reason", it.Status, it.Reason)
				}
			}
			if c.check != nil {
				c.check(t, res, events)
			}
		})
	}
}

// TestTotalTimeoutExcludesApprovalWait: the total timeout counts a run's
// working time, not the time it waited for a person, and a run that
// continues after its decision keeps the time it had used.
func TestTotalTimeoutExcludesApprovalWait(t *testing.T) {
	m := hosttest.NewModel(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"x"}`}}},
		hosttest.Reply{Text: "published"})
	published := 0
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			published++
			return host.ToolResult{Output: "ok"}, nil
		})
	hs := hosttest.New(t, host.Options{Model: m, Agent: host.Agent{Tools: []host.Tool{publish},
		Timeouts: host.AgentTimeouts{Total: 500 * time.Millisecond}}})
	s := hs.Host.Session("s")
	res, err := s.Send(context.Background(), "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 {
		t.Fatalf("%+v %v, want the run parked on one approval", res, err)
	}
	time.Sleep(700 * time.Millisecond) // longer than the total timeout
	run, err := s.Decide(context.Background(), res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = run.Wait(context.Background())
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "published" || published != 1 {
		t.Fatalf("after the decision: %+v %v (published %d), want the run completed within its working time", res, err, published)
	}
}

// TestTruncatedTurnsFail: a pass cut at its max tokens, or by the
// provider's content filter, ends the run failed — never completed — with
// what streamed kept and its tool calls, whose arguments may be cut,
// answered without running.
func TestTruncatedTurnsFail(t *testing.T) {
	for _, c := range []struct {
		name, finish, reason string
		calls                []hosttest.ToolCall
	}{
		{"length", "length", "truncated at max tokens", nil},
		{"content filter", "content_filter", "stopped by the provider's content filter", nil},
		{"length with a tool call", "length", "truncated at max tokens", []hosttest.ToolCall{{Name: "nap", Arguments: `{"a":1}`}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := hosttest.NewModel(hosttest.Reply{Text: "the beginning of", FinishReason: c.finish, ToolCalls: c.calls})
			ran := 0
			nap := host.NewTool(host.ToolSpec{Name: "nap"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
				ran++
				return host.ToolResult{Output: "ok"}, nil
			})
			hs := hosttest.New(t, host.Options{Model: m, Agent: host.Agent{Tools: []host.Tool{nap}}})
			s := hs.Host.Session("s")
			res, err := s.Send(context.Background(), "go", host.SendOptions{})
			if err != nil || res.Status != ledger.RunFailed || res.Reason != c.reason || res.Text != "the beginning of" {
				t.Fatalf("%+v %v, want failed %q with the text kept", res, err, c.reason)
			}
			if ran != 0 || m.RequestCount() != 1 {
				t.Errorf("the tool ran %d times, %d model calls; want none and one", ran, m.RequestCount())
			}
			it := lastResponse(t, s)
			if it.Status != ledger.StatusFailed || it.Reason != c.reason || it.Text != "the beginning of" {
				t.Errorf("transcript item %s %q %q", it.Status, it.Reason, it.Text)
			}
			for _, tc := range it.ToolCalls {
				if tc.Status != ledger.ToolError || !strings.Contains(tc.Output, "not run: the model's reply was "+c.reason) {
					t.Errorf("tool call %+v, want it answered as not run", tc)
				}
			}
		})
	}
}

// TestAgentTimeoutsAreChecked: a negative timeout is refused by New.
func TestAgentTimeoutsAreChecked(t *testing.T) {
	_, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(),
		Agent: host.Agent{Model: "m", Timeouts: host.AgentTimeouts{Step: -time.Second, Chunk: -1}}})
	if err == nil || !strings.Contains(err.Error(), "Agent.Timeouts.Step -1s is negative") || !strings.Contains(err.Error(), "Agent.Timeouts.Chunk") {
		t.Fatalf("New = %v, want both negative timeouts named", err)
	}
}

// TestTotalTimeoutSurvivesResume: a run resumed after its process died
// keeps the working time the ledger says it used (the downtime counts): a
// run that started longer ago than its total timeout ends timed_out when
// resumed, without another model call.
func TestTotalTimeoutSurvivesResume(t *testing.T) {
	store := memory.New()
	long := time.Now().UTC().Add(-time.Hour)
	err := store.Append(context.Background(), "s",
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: long, RunID: "run_1",
			Input: &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("hello")}}},
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: long, RunID: "run_1",
			RunStart: &ledger.RunStart{Inputs: []string{"msg_1"}, ResponseID: "resp_1", Agent: "default", Model: hosttest.DefaultModel, MaxSteps: 16}})
	if err != nil {
		t.Fatal(err)
	}
	hs := hosttest.New(t, host.Options{Storage: store, Agent: host.Agent{Timeouts: host.AgentTimeouts{Total: 30 * time.Minute}}})
	res, err := hs.Host.Resume(context.Background(), "s")
	if err != nil || res.Status != ledger.RunTimedOut || res.Timeout != host.TimeoutTotal {
		t.Fatalf("%+v %v, want the resumed run timed out on its total", res, err)
	}
	if n := hs.Model.RequestCount(); n != 0 {
		t.Errorf("%d model calls, want none", n)
	}
}
