package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
)

// TestToolResultsAreBounded: a tool result past the agent's bound reaches
// the ledger and the model cut, saying how much was cut; -1 keeps it whole.
func TestToolResultsAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 200<<10)
	dump := host.NewTool(host.ToolSpec{Name: "dump"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: huge}, nil
	})
	for _, c := range []struct {
		name  string
		max   int
		want  int
		extra string
	}{
		{"default", 0, host.DefaultMaxToolResultBytes, "[truncated 139264 bytes]"},
		{"own bound", 1000, 1000, "[truncated 203800 bytes]"},
		{"unbounded", -1, len(huge), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := hosttest.NewModel(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "dump"}}}, hosttest.Reply{Text: "ok"})
			hs := hosttest.New(t, host.Options{Model: m, Agent: host.Agent{Tools: []host.Tool{dump}, MaxToolResultBytes: c.max}})
			if _, err := hs.Host.Session("s").Send(context.Background(), "dump", host.SendOptions{}); err != nil {
				t.Fatal(err)
			}
			// Read back whole: a result past Options.BlobThreshold is
			// kept by reference.
			events, err := hs.Host.Session("s").ResolvedEvents(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var out string
			for _, e := range events {
				if e.ToolResult != nil {
					out = e.ToolResult.Output
				}
			}
			if !strings.HasPrefix(out, strings.Repeat("x", c.want)) || !strings.HasSuffix(out, c.extra) || len(out) > c.want+len(c.extra)+1 {
				t.Errorf("the recorded result has %d bytes ending %q; want %d bytes of output then %q", len(out), out[max(0, len(out)-30):], c.want, c.extra)
			}
			reqs := m.Requests()
			if sent := reqs[len(reqs)-1].Messages[len(reqs[len(reqs)-1].Messages)-1].Text(); sent != out {
				t.Errorf("the model saw %d bytes, the ledger holds %d", len(sent), len(out))
			}
		})
	}
}

// TestToolFuelRecorded: the work a metered tool reports, failed calls
// included, reaches the ledger's tool-result and the transcript's tool
// call; a tool that reports none records none.
func TestToolFuelRecorded(t *testing.T) {
	metered := host.NewTool(host.ToolSpec{Name: "metered"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "ok", Fuel: 1234}, nil
	})
	failing := host.NewTool(host.ToolSpec{Name: "failing"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Fuel: 99}, errors.New("ran out")
	})
	plain := host.NewTool(host.ToolSpec{Name: "plain"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "ok"}, nil
	})
	m := hosttest.NewModel(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "metered"}, {Name: "failing"}, {Name: "plain"}}}, hosttest.Reply{Text: "done"})
	hs := hosttest.New(t, host.Options{Model: m, Agent: host.Agent{Tools: []host.Tool{metered, failing, plain}}})
	sess := hs.Host.Session("s")
	if _, err := sess.Send(context.Background(), "go", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"metered": 1234, "failing": 99, "plain": 0}
	got := map[string]int64{}
	for _, e := range hs.Events("s") {
		if e.ToolResult != nil {
			got[e.ToolResult.Name] = e.ToolResult.Fuel
		}
	}
	tr, err := sess.Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]int64{}
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			shown[c.Name] = c.Fuel
		}
	}
	for name, w := range want {
		if got[name] != w || shown[name] != w {
			t.Errorf("%s: the ledger records %d fuel, the transcript shows %d; want %d", name, got[name], shown[name], w)
		}
	}
}
