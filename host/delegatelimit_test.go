package host_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// fanOut is a tree of agents whose models delegate as wide as they are
// told: "parent" calls "worker" wide times at once, each worker calls
// "leaf" wide times, each leaf calls "deep" once, and deep answers. Once
// a model has its tools' results, it answers with them.
type fanOut struct {
	wide   int
	model  *hosttest.Model
	mu     sync.Mutex
	errors []string // the delegate calls' error results the models read
}

func newFanOut(wide int) *fanOut {
	f := &fanOut{wide: wide}
	f.model = &hosttest.Model{Respond: func(req model.Request) hosttest.Reply {
		var results []string
		for _, m := range req.Messages {
			if m.Role == ledger.RoleTool {
				results = append(results, m.Text())
			}
		}
		if len(results) > 0 {
			f.mu.Lock()
			for _, r := range results {
				if strings.Contains(r, "delegation refused") || strings.Contains(r, "could not take the task") {
					f.errors = append(f.errors, r)
				}
			}
			f.mu.Unlock()
			return hosttest.Reply{Text: fmt.Sprintf("%d results", len(results))}
		}
		call := func(tool string, n int) hosttest.Reply {
			var calls []hosttest.ToolCall
			for i := range n {
				calls = append(calls, hosttest.ToolCall{Name: tool, Arguments: fmt.Sprintf(`{"task":"part %d"}`, i)})
			}
			return hosttest.Reply{ToolCalls: calls}
		}
		switch req.Model {
		case "test/parent":
			return call("worker", f.wide)
		case "test/worker":
			return call("leaf", f.wide)
		case "test/leaf":
			return call("deep", 1)
		}
		return hosttest.Reply{Text: "deep answer"}
	}}
	return f
}

func (f *fanOut) agents(t *testing.T) host.Agent {
	t.Helper()
	delegate := func(a host.Agent) host.Tool {
		tool, err := host.NewDelegateTool(host.Delegate{Agent: a})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	deep := host.Agent{Name: "deep", Model: "test/deep"}
	leaf := host.Agent{Name: "leaf", Model: "test/leaf", Tools: []host.Tool{delegate(deep)}}
	worker := host.Agent{Name: "worker", Model: "test/worker", Tools: []host.Tool{delegate(leaf)}}
	return host.Agent{Name: "parent", Model: "test/parent", Tools: []host.Tool{delegate(worker)}}
}

// children counts the child sessions of the store by their agent's depth
// (a child's id is its parent's, a dot, and the call's id).
func children(t *testing.T, store storage.Storage) (total int, byDepth map[int]int) {
	t.Helper()
	ids, err := store.(storage.Lister).ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byDepth = map[int]int{}
	for _, id := range ids {
		if d := strings.Count(id, "."); d > 0 {
			total++
			byDepth[d]++
		}
	}
	return total, byDepth
}

// TestDelegateFanOutBounded: one message whose runs delegate as wide and
// as deep as their models ask starts no more child runs than the host's
// bounds allow — per run, per message's tree and in depth — and each call
// past a bound is an error result its model reads, naming the bound. With
// no bound at all, the same message started 10 + 100 + 100 children.
func TestDelegateFanOutBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits host.DelegateLimits
		check  func(t *testing.T, total int, byDepth map[int]int, errs []string)
	}{
		{"defaults", host.DelegateLimits{}, func(t *testing.T, total int, byDepth map[int]int, errs []string) {
			if total > host.DefaultDelegatesPerMessage {
				t.Errorf("%d child runs (%v), more than the default max_per_message %d", total, byDepth, host.DefaultDelegatesPerMessage)
			}
			if !containsAll(errs, "max_per_message") {
				t.Errorf("no call was refused for max_per_message (%d errors)", len(errs))
			}
		}},
		{"per run", host.DelegateLimits{MaxPerRun: 3, MaxPerMessage: -1}, func(t *testing.T, total int, byDepth map[int]int, errs []string) {
			// 3 workers, 3 leaves each, one deep child each.
			if byDepth[1] != 3 || byDepth[2] != 9 || byDepth[3] != 9 {
				t.Errorf("child runs by depth %v, want 3, 9 and 9", byDepth)
			}
			if !containsAll(errs, "max_per_run") {
				t.Errorf("no call was refused for max_per_run (%d errors)", len(errs))
			}
		}},
		{"per message", host.DelegateLimits{MaxPerRun: -1, MaxPerMessage: 7}, func(t *testing.T, total int, byDepth map[int]int, errs []string) {
			if total != 7 {
				t.Errorf("%d child runs (%v), want max_per_message's 7", total, byDepth)
			}
		}},
		{"depth", host.DelegateLimits{MaxDepth: 2, MaxPerRun: -1, MaxPerMessage: -1}, func(t *testing.T, total int, byDepth map[int]int, errs []string) {
			if byDepth[3] != 0 || byDepth[2] != 100 {
				t.Errorf("child runs by depth %v, want none at depth 3 and 100 at depth 2", byDepth)
			}
			if !containsAll(errs, "max_depth") {
				t.Errorf("no call was refused for max_depth (%d errors)", len(errs))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFanOut(10)
			store := memory.New()
			h, err := host.New(host.Options{Storage: store, Model: f.model, Agent: f.agents(t), Delegation: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			res, err := h.Session("top").Send(t.Context(), "fan out", host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("the message: %v %+v", err, res)
			}
			total, byDepth := children(t, store)
			f.mu.Lock()
			errs := append([]string(nil), f.errors...)
			f.mu.Unlock()
			tc.check(t, total, byDepth, errs)
		})
	}
}

// containsAll reports whether some error of errs names bound.
func containsAll(errs []string, bound string) bool {
	for _, e := range errs {
		if strings.Contains(e, bound+")") {
			return true
		}
	}
	return false
}

// TestDelegateAdmitted: a child run is admitted before it starts
// (DelegateLimits.Admit, with the child's session id); a refusal starts
// nothing, and the calling model reads why.
func TestDelegateAdmitted(t *testing.T) {
	f := newFanOut(2)
	store := memory.New()
	var mu sync.Mutex
	var asked []string
	admit := func(ctx context.Context, id string) (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, id)
		if len(asked) > 1 {
			return nil, fmt.Errorf("no room for %s", id)
		}
		return func() {}, nil
	}
	h, err := host.New(host.Options{Storage: store, Model: f.model, Agent: f.agents(t), Delegation: host.DelegateLimits{Admit: admit}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	if res, err := h.Session("top").Send(t.Context(), "fan out", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("the message: %v %+v", err, res)
	}
	// The first worker was admitted; its leaves, the other worker and
	// its deep children were refused.
	if total, byDepth := children(t, store); total != 1 {
		t.Errorf("%d child runs (%v), want the one admitted", total, byDepth)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errors) == 0 || !strings.Contains(strings.Join(f.errors, "\n"), "no room for top.") {
		t.Errorf("the models read %v, want the refusals", f.errors)
	}
}
