package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
)

// fuelPolicy is a metered policy of Go that says each decision used fuel:
// it asks for approval of external calls and denies calls whose input
// says "deny".
type fuelPolicy struct {
	name string
	fuel int64
}

func (p fuelPolicy) Name() string  { return p.name }
func (p fuelPolicy) Metered() bool { return true }
func (p fuelPolicy) Decide(_ context.Context, req host.PolicyRequest) (host.Decision, error) {
	d := host.Decision{Verdict: host.Allow, Source: "src-" + p.name, Fuel: p.fuel}
	switch {
	case strings.Contains(string(req.Input), "deny"):
		d.Verdict, d.Reason = host.Deny, "the input says so"
	case req.Tool.Effect == host.EffectExternal:
		d.Verdict = host.RequireApproval
	}
	return d, nil
}

// policyHook records what each policy call is for, and refuses the calls
// of one tool.
type policyHook struct {
	mu       sync.Mutex
	purposes []string
	metered  []bool
	refuse   string
}

func (h *policyHook) ModelHook(next host.StreamFunc) host.StreamFunc { return next }
func (h *policyHook) ToolHook(next host.CallFunc) host.CallFunc      { return next }
func (h *policyHook) PolicyHook(next host.DecideFunc) host.DecideFunc {
	return func(ctx context.Context, p host.Policy, req host.PolicyRequest) (host.Decision, error) {
		ci, _ := host.CallInfoFrom(ctx)
		h.mu.Lock()
		h.purposes = append(h.purposes, ci.Purpose)
		h.metered = append(h.metered, host.IsMetered(p))
		h.mu.Unlock()
		if req.Tool.Name == h.refuse {
			return host.Decision{}, errors.New("the hook refuses")
		}
		return next(ctx, p, req)
	}
}

// TestPolicyFuelRecorded: the fuel metered policies use is recorded with
// the call they decided on — on its result when it runs or is denied, on
// its approval request when it waits, and again on its result when the
// policies are asked once more after the approval — and sums in the
// transcript and the usage. A PolicyHook wraps every policy call
// (PurposePolicy), and its error denies the call.
func TestPolicyFuelRecorded(t *testing.T) {
	ctx := context.Background()
	var published, looked atomic.Int64
	refused := host.NewTool(host.ToolSpec{Name: "refused", Effect: host.EffectRead}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		t.Error("a call the hook refused ran")
		return host.ToolResult{}, nil
	})
	agent := host.Agent{Tools: []host.Tool{publishTool(&published), lookupTool(&looked), refused},
		Policies: []host.Policy{fuelPolicy{"a", 5}, fuelPolicy{"b", 2}}}
	hook := &policyHook{refuse: "refused"}
	hs := hosttest.New(t, host.Options{Agent: agent, ApprovalSecret: approvalSecret, Hooks: []host.Hook{hook}})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{
		{Name: "lookup", Arguments: `{}`}, {Name: "lookup", Arguments: `{"q":"deny"}`},
		{Name: "refused", Arguments: `{}`}, {Name: "publish", Arguments: `{"title":"Hi"}`}}})
	sess := hs.Host.Session("s")
	res, err := sess.Send(ctx, "go", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 {
		t.Fatalf("%+v, %v; want the publish waiting", res, err)
	}
	run, err := sess.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunCompleted {
		t.Fatalf("%+v, %v", final, err)
	}
	if looked.Load() != 1 || published.Load() != 1 {
		t.Fatalf("looked %d, published %d; want one each", looked.Load(), published.Load())
	}

	byCall := map[string][]int64{}
	for _, e := range hs.Events("s") {
		switch {
		case e.ApprovalRequest != nil:
			byCall[e.ApprovalRequest.Name] = append(byCall[e.ApprovalRequest.Name], e.ApprovalRequest.PolicyFuel)
		case e.ToolResult != nil:
			byCall[e.ToolResult.Name] = append(byCall[e.ToolResult.Name], e.ToolResult.PolicyFuel)
		}
	}
	// lookup: run (7) and denied (7); refused: the hook refused both
	// policies' calls (0); publish: asked (7), then asked again after the
	// approval (7).
	want := map[string][]int64{"lookup": {7, 7}, "refused": {0}, "publish": {7, 7}}
	for name, w := range want {
		if got := byCall[name]; len(got) != len(w) || got[0] != w[0] || got[len(got)-1] != w[len(w)-1] {
			t.Errorf("%s: policy fuel %v, want %v", name, got, w)
		}
	}
	usage, err := sess.Usage(ctx)
	if err != nil || usage.Fuel != 28 {
		t.Errorf("usage fuel %d (%v), want 28 = 7+7+7+7", usage.Fuel, err)
	}
	tr, _ := sess.Transcript(ctx)
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			if c.Name == "publish" && c.PolicyFuel != 14 {
				t.Errorf("the transcript's publish call: policy fuel %d, want 14", c.PolicyFuel)
			}
		}
	}
	for _, e := range hs.Events("s") {
		if r := e.ToolResult; r != nil && r.Name == "refused" && !strings.Contains(r.Output, "the hook refuses") {
			t.Errorf("the refused call's result %q does not say why", r.Output)
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.purposes) != 10 { // 5 asks of the two policies
		t.Errorf("the hook saw %d policy calls, want 10", len(hook.purposes))
	}
	for i, p := range hook.purposes {
		if p != host.PurposePolicy || !hook.metered[i] {
			t.Errorf("policy call %d: purpose %q, metered %v", i, p, hook.metered[i])
		}
	}
}

// fuelValidator is a metered validator of Go: it rejects a deliverable
// without a title, and says each check used fuel.
type fuelValidator struct{ calls atomic.Int64 }

func (v *fuelValidator) Metered() bool { return true }
func (v *fuelValidator) Validate(ctx context.Context, d json.RawMessage) (json.RawMessage, []string, error) {
	res, err := v.ValidateMetered(ctx, d)
	return res.Value, res.Problems, err
}
func (v *fuelValidator) ValidateMetered(_ context.Context, d json.RawMessage) (host.Validation, error) {
	n := v.calls.Add(1)
	res := host.Validation{Fuel: 10 * n, Source: "sha256:validator"}
	if !strings.Contains(string(d), "title") {
		res.Problems = []string{"/title: missing"}
	}
	return res, nil
}

// meteredSeen records, per tool call, whether the hook saw a metered tool
// and the fuel of its result.
type meteredSeen struct {
	mu   sync.Mutex
	seen []string
}

func (h *meteredSeen) ModelHook(next host.StreamFunc) host.StreamFunc { return next }
func (h *meteredSeen) ToolHook(next host.CallFunc) host.CallFunc {
	return func(ctx context.Context, tool host.Tool, call host.ToolCall) (host.ToolResult, error) {
		res, err := next(ctx, tool, call)
		h.mu.Lock()
		defer h.mu.Unlock()
		if host.IsMetered(tool) {
			h.seen = append(h.seen, call.Name)
		}
		return res, err
	}
}

// TestValidatorFuelRecorded: a metered validator's fuel is the
// submission's — on submit_deliverable's result, rejected or accepted,
// with the validator's source — and counts in the usage; the hooks see the
// submission as a metered call.
func TestValidatorFuelRecorded(t *testing.T) {
	v := &fuelValidator{}
	hook := &meteredSeen{}
	hs := hosttest.New(t, host.Options{Hooks: []host.Hook{hook}})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: host.SubmitToolName, Arguments: `{"x":1}`}}})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: host.SubmitToolName, Arguments: `{"title":"Hi"}`}}})
	out := hs.Host.Task(context.Background(), host.TaskSpec{Prompt: "submit", SessionID: "task",
		Deliverable: host.Deliverable{Schema: json.RawMessage(`{"type":"object"}`)}, Validator: v})
	if out.Status != host.OutcomeSubmitted {
		t.Fatalf("outcome %+v", out)
	}
	var fuel []int64
	for _, e := range hs.Events("task") {
		if r := e.ToolResult; r != nil && r.Name == host.SubmitToolName {
			fuel = append(fuel, r.Fuel)
			if r.Source != "sha256:validator" {
				t.Errorf("the submission's source %q, want the validator's", r.Source)
			}
		}
	}
	if len(fuel) != 2 || fuel[0] != 10 || fuel[1] != 20 {
		t.Errorf("the submissions' fuel %v, want [10 20]", fuel)
	}
	if u, err := hs.Host.Session("task").Usage(context.Background()); err != nil || u.Fuel != 30 {
		t.Errorf("usage fuel %d (%v), want 30", u.Fuel, err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.seen) != 2 {
		t.Errorf("the hook saw metered calls %v, want the two submissions", hook.seen)
	}
}
