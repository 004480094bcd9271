package host_test

import (
	"context"
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
			var out string
			for _, e := range hs.Events("s") {
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
