package host_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// perReplyIDs is a model that numbers its tool calls per reply, as some
// do: each reply's calls are id, id (twice), whatever came before.
type perReplyIDs struct {
	id       string
	mu       sync.Mutex
	requests []model.Request
}

func (m *perReplyIDs) Stream(_ context.Context, req model.Request, _ func(model.Delta)) (model.Result, error) {
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == ledger.RoleTool {
		return model.Result{Text: "done", FinishReason: "stop", Model: req.Model}, nil
	}
	call := ledger.ToolCall{ID: m.id, Name: "count", Arguments: "{}"}
	return model.Result{FinishReason: "tool_calls", Model: req.Model, ToolCalls: []ledger.ToolCall{call, call}}, nil
}

// TestReusedCallIDs: a model that reuses a tool call id within a reply
// and across passes and runs (or sends none) gets every call run and
// answered: the host gives the calls ids unique in the session, and the
// model is shown each call with its own result.
func TestReusedCallIDs(t *testing.T) {
	for _, id := range []string{"call_0", ""} {
		t.Run(strconv.Quote(id), func(t *testing.T) {
			var runs atomic.Int64
			count := host.NewTool(host.ToolSpec{Name: "count", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(context.Context, host.ToolCall) (host.ToolResult, error) {
					return host.ToolResult{Output: strconv.FormatInt(runs.Add(1), 10)}, nil
				})
			m := &perReplyIDs{id: id}
			store := memory.New()
			h, err := host.New(host.Options{Storage: store, Model: m,
				Agent: host.Agent{Model: hosttest.DefaultModel, Tools: []host.Tool{count}, MaxSteps: 4}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			for i := range 2 {
				res, err := h.Session("s").Send(t.Context(), "count", host.SendOptions{})
				if err != nil || res.Status != ledger.RunCompleted || res.Text != "done" {
					t.Fatalf("run %d: %+v, %v", i+1, res, err)
				}
			}
			if n := runs.Load(); n != 4 {
				t.Errorf("the tool ran %d times, want 4 (two calls in each of two runs)", n)
			}
			seen := map[string]bool{}
			for _, e := range hosttest.Load(t, store, "s") {
				if e.Step == nil {
					continue
				}
				for _, c := range e.Step.ToolCalls {
					if c.ID == "" || seen[c.ID] {
						t.Errorf("call id %q recorded twice or empty", c.ID)
					}
					seen[c.ID] = true
				}
			}
			// The last request shows each call followed by its own result.
			last := m.requests[len(m.requests)-1].Messages
			var pending []string
			results := 0
			for _, msg := range last {
				switch msg.Role {
				case ledger.RoleAssistant:
					if len(pending) > 0 {
						t.Fatalf("calls %q unanswered before the next assistant message", pending)
					}
					for _, c := range msg.ToolCalls {
						pending = append(pending, c.ID)
					}
				case ledger.RoleTool:
					if len(pending) == 0 || pending[0] != msg.ToolCallID {
						t.Fatalf("a tool message for %q, want one for %q", msg.ToolCallID, pending)
					}
					if msg.Parts[0].Text == ledger.MissingResult {
						t.Errorf("call %s answered as missing", msg.ToolCallID)
					}
					pending = pending[1:]
					results++
				}
			}
			if results != 4 || len(pending) != 0 {
				t.Errorf("the model saw %d results (want 4), %q unanswered", results, pending)
			}
		})
	}
}
