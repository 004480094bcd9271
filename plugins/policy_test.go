package plugins_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/plugins"
)

// TestHostilePolicyInRun: a Wasm policy that traps, or spins past the
// agent's PolicyTimeout, denies the call it was asked about — with that
// reason, never allowing it — even beside a policy that allows; the run
// completes, and the module still serves afterwards.
func TestHostilePolicyInRun(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "bombs", bombsWasm(t), plugins.Limits{})
	allow := host.PolicyFunc("allow", func(context.Context, host.PolicyRequest) (host.Decision, error) {
		return host.Decision{Verdict: host.Allow}, nil
	})
	for _, tc := range []struct{ policy, want string }{
		{"trap", "policy trap failed"},
		{"spin", "policy spin failed"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			p, ok := m.Policy(tc.policy)
			if !ok {
				t.Fatalf("no policy %s", tc.policy)
			}
			var published atomic.Int64
			publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
				published.Add(1)
				return host.ToolResult{Output: "published"}, nil
			})
			hs := hosttest.New(t, host.Options{Agent: host.Agent{Tools: []host.Tool{publish}, Policies: []host.Policy{allow, p},
				PolicyTimeout: 300 * time.Millisecond}})
			hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"Hi"}`}}})
			res, err := hs.Host.Session("s").Send(context.Background(), "publish it", host.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != ledger.RunCompleted || published.Load() != 0 || !strings.Contains(res.Text, tc.want) {
				t.Fatalf("%+v, published %d; want a denial with %q", res, published.Load(), tc.want)
			}
			if out, err := callTool(t, m, "ok", `{}`); err != nil || !strings.Contains(out.Output, `"ok":true`) {
				t.Fatalf("the module after the policy: %q, %v", out.Output, err)
			}
		})
	}
}
