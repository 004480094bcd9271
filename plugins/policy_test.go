package plugins_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
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

// TestApprovalPolicyHotReload: a run parks on the C side_effects policy,
// loaded by a directory watcher into a running host's registry. The
// policy's file is replaced by another build of it (another hash) while
// the run waits; the watcher swaps it in. The approval then given is
// void — the policy's code is not the one that asked — and the new module
// asks again: a new approval-request, bound to the new hash, and the call
// has not run. Approved again, it runs once.
func TestApprovalPolicyHotReload(t *testing.T) {
	ctx := context.Background()
	v1 := cExampleWasm(t, "side_effects")
	v2 := plugintest.CPlugin(t, "../examples/plugins/side_effects", []string{"side_effects.c", cKit + "/agentic.c"}, []string{cKit}, []string{"-O1"})
	if hashOf(v1) == hashOf(v2) {
		t.Fatal("the two builds are the same module")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "side_effects.wasm"), v1, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, _ := newRuntime(t)
	ch := newChanges()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{OnChange: ch.observe})
	defer reg.Close(context.Background())
	w, err := reg.Watch(ctx, "acme", dir, plugins.WatchOptions{Debounce: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	policy, ok := reg.Policy("acme", "side_effects")
	if !ok {
		t.Fatalf("no policy; changes %+v", ch.all)
	}

	var published atomic.Int64
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		published.Add(1)
		return host.ToolResult{Output: "published"}, nil
	})
	hs := hosttest.New(t, host.Options{Agent: host.Agent{Tools: []host.Tool{publish}, Policies: []host.Policy{policy}},
		ApprovalSecret: []byte("0123456789abcdef0123456789abcdef")})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"Hi"}`}}})
	sess := hs.Host.Session("s")
	res, err := sess.Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 || res.Approvals[0].Policy != "side_effects" {
		t.Fatalf("%+v, %v; want the run parked on side_effects", res, err)
	}
	first := ledger.Approvals(hs.Events("s"), res.RunID)
	if len(first) != 1 || first[0].Request.PolicySource != hashOf(v1) {
		t.Fatalf("approvals %+v, want one bound to %s", first, hashOf(v1))
	}

	// Another build replaces the file, written aside and renamed in, as a
	// deploy would; the watcher swaps it in.
	tmp := filepath.Join(dir, ".side_effects.wasm.tmp")
	if err := os.WriteFile(tmp, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "side_effects.wasm")); err != nil {
		t.Fatal(err)
	}
	ch.wait(t, "the policy's reload", func(c plugins.Change) bool {
		return c.Kind == plugins.Replaced && c.Name == "side_effects" && c.Hash == hashOf(v2) && c.Previous == hashOf(v1)
	})

	run, err := sess.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := run.Wait(ctx)
	if err != nil || again.Status != ledger.RunApprovalRequired || len(again.Approvals) != 1 || again.Approvals[0].ApprovalID == res.Approvals[0].ApprovalID {
		t.Fatalf("after the reload: %+v, %v; want the run waiting on a new request", again, err)
	}
	if published.Load() != 0 {
		t.Fatal("a void approval ran the call")
	}
	events := hs.Events("s")
	approvals := ledger.Approvals(events, res.RunID)
	if len(approvals) != 2 || approvals[0].State != ledger.ApprovalVoid || !strings.Contains(approvals[0].Decision.Reason, hashOf(v2)) ||
		approvals[1].State != ledger.ApprovalPending || approvals[1].Request.PolicySource != hashOf(v2) || approvals[1].Request.Policy != "side_effects" {
		t.Fatalf("approvals %+v, want the first void and a new one bound to %s", approvals, hashOf(v2))
	}
	if n := hosttest.CountKind(events, ledger.KindApprovalRequest); n != 2 {
		t.Fatalf("%d approval requests, want 2", n)
	}

	run, err = sess.Decide(ctx, again.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("approved again: %+v, %v, published %d", final, err, published.Load())
	}
}
