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
	"github.com/agentichost/agentic/storage/memory"
)

// recordingPublish is a tool with an external effect and a schema that
// records the inputs it ran with.
type recordingPublish struct {
	mu   sync.Mutex
	runs []string
}

func (p *recordingPublish) tool() host.Tool {
	return host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","minLength":3}},"required":["title"],"additionalProperties":false}`)},
		func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			p.mu.Lock()
			p.runs = append(p.runs, string(c.Input))
			p.mu.Unlock()
			return host.ToolResult{Output: "published " + string(c.Input)}, nil
		})
}

func (p *recordingPublish) ran() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.runs...)
}

// lastCall is the last tool call of the session's transcript.
func lastCall(t *testing.T, sess *host.Session) ledger.ItemToolCall {
	t.Helper()
	tr, err := sess.Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var call ledger.ItemToolCall
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			call = c
		}
	}
	return call
}

// TestDecideEdit: a person approves a call with another input: it is
// checked against the tool's schema first (a bad one is refused, nothing
// recorded), the tool runs with it once, the ledger and the transcript keep
// it beside the model's, and the model reads the edited call's result. A
// token decides an edit as the tenant does.
func TestDecideEdit(t *testing.T) {
	ctx := context.Background()
	for _, withToken := range []bool{false, true} {
		name := "tenant"
		if withToken {
			name = "token"
		}
		t.Run(name, func(t *testing.T) {
			var pub recordingPublish
			hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{pub.tool()}}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Frday"}`})
			sess := hs.Host.Session("s")
			res, err := sess.Send(ctx, "publish it", host.SendOptions{})
			if err != nil || res.Status != ledger.RunApprovalRequired {
				t.Fatalf("%+v %v", res, err)
			}
			a := res.Approvals[0]
			decide := func(d host.ApprovalDecision) (*host.Run, error) {
				if withToken {
					return sess.DecideWithToken(ctx, a.Token, d)
				}
				return sess.Decide(ctx, a.ApprovalID, d)
			}
			before := len(hs.Events("s"))
			for _, bad := range []struct {
				d    host.ApprovalDecision
				want string
			}{
				{host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"Fr"}`)}, "does not match tool publish's schema"},
				{host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"Friday","extra":1}`)}, "does not match tool publish's schema"},
				{host.ApprovalDecision{Approve: true, Input: json.RawMessage(`["Friday"]`)}, "not a JSON object"},
				{host.ApprovalDecision{Input: json.RawMessage(`{"title":"Friday"}`)}, "set Approve"},
				{host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"Friday"}`), Response: "done"}, "an edit and a response at once"},
			} {
				if _, err := decide(bad.d); !errors.Is(err, host.ErrInvalidDecision) || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("%+v: %v, want ErrInvalidDecision saying %q", bad.d, err, bad.want)
				}
			}
			if n := len(hs.Events("s")); n != before {
				t.Fatalf("refused decisions recorded %d events", n-before)
			}
			r, err := decide(host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{ "title": "Friday" }`), By: "alice", Reason: "typo"})
			if err != nil {
				t.Fatal(err)
			}
			done, err := r.Wait(ctx)
			if err != nil || done.Status != ledger.RunCompleted {
				t.Fatalf("%+v %v", done, err)
			}
			if got := pub.ran(); len(got) != 1 || got[0] != `{"title":"Friday"}` {
				t.Fatalf("the tool ran with %q, want the edited input once", got)
			}
			var decision *ledger.ApprovalDecision
			for _, e := range hs.Events("s") {
				if e.ApprovalDecision != nil {
					decision = e.ApprovalDecision
				}
			}
			if decision == nil || decision.Decision != ledger.DecisionEdit || string(decision.Input) != `{"title":"Friday"}` ||
				decision.InputDigest != ledger.InputDigest(`{"title":"Friday"}`) || decision.By != "alice" {
				t.Errorf("the decision recorded: %+v", decision)
			}
			call := lastCall(t, sess)
			if string(call.Input) != `{"title":"Frday"}` || string(call.EditedInput) != `{"title":"Friday"}` || call.Approval != ledger.ApprovalApproved ||
				call.DecidedBy != "alice" || call.Output != `published {"title":"Friday"}` {
				t.Errorf("the transcript's call: %+v", call)
			}
			// The model's next pass read the edited call's result.
			reqs := hs.Model.Requests()
			last := reqs[len(reqs)-1].Messages
			if got := last[len(last)-1].Text(); !strings.Contains(got, `published {"title":"Friday"}`) {
				t.Errorf("the model read %q", got)
			}
			if _, err := decide(host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalDecided) {
				t.Errorf("a second decision: %v", err)
			}
		})
	}
}

// TestDecideRespond: a person answers a call in the tool's place: the
// tool never runs, the model reads the person's text as its result, and
// the transcript says the call was responded to.
func TestDecideRespond(t *testing.T) {
	ctx := context.Background()
	var pub recordingPublish
	hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{pub.tool()}}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Friday"}`})
	sess := hs.Host.Session("s")
	res, err := sess.Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	r, err := sess.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Response: "I published it by hand an hour ago: https://blog.example/friday", By: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := r.Wait(ctx); err != nil || done.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", done, err)
	}
	if got := pub.ran(); len(got) != 0 {
		t.Fatalf("the tool ran: %q", got)
	}
	call := lastCall(t, sess)
	if call.Approval != ledger.ApprovalResponded || call.Status != ledger.ToolDone || call.Output != "I published it by hand an hour ago: https://blog.example/friday" || call.DecidedBy != "bob" {
		t.Errorf("the transcript's call: %+v", call)
	}
	reqs := hs.Model.Requests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Text(); got != "I published it by hand an hour ago: https://blog.example/friday" {
		t.Errorf("the model read %q", got)
	}
}

// TestDecideEditPolicies: the agent's policies decide an edited call
// again: one that denies the edited input stands (the tool does not run),
// and an edit made before the policy's code changed is void with its
// approval — the model's call, as it asked, is asked about again.
func TestDecideEditPolicies(t *testing.T) {
	ctx := context.Background()
	var source atomic.Value
	source.Store("sha256:v1")
	policy := host.PolicyFunc("guard", func(_ context.Context, req host.PolicyRequest) (host.Decision, error) {
		if strings.Contains(string(req.Input), "forbidden") {
			return host.Decision{Verdict: host.Deny, Reason: "not that title", Source: source.Load().(string)}, nil
		}
		return host.Decision{Verdict: host.RequireApproval, Summary: "publish?", Source: source.Load().(string)}, nil
	})
	t.Run("denied", func(t *testing.T) {
		var pub recordingPublish
		hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{pub.tool()}, Policies: []host.Policy{policy}},
			hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Friday"}`})
		res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
		run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"forbidden"}`)})
		if err != nil {
			t.Fatal(err)
		}
		final, err := run.Wait(ctx)
		if err != nil || final.Status != ledger.RunCompleted || len(pub.ran()) != 0 || !strings.Contains(final.Text, "denied by policy guard: not that title") {
			t.Fatalf("%+v %v; ran %q", final, err, pub.ran())
		}
	})
	t.Run("policy changed", func(t *testing.T) {
		source.Store("sha256:v1")
		var pub recordingPublish
		hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{pub.tool()}, Policies: []host.Policy{policy}},
			hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Frday"}`})
		res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
		source.Store("sha256:v2")
		run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"Friday"}`)})
		if err != nil {
			t.Fatal(err)
		}
		again, err := run.Wait(ctx)
		if err != nil || again.Status != ledger.RunApprovalRequired || len(again.Approvals) != 1 || len(pub.ran()) != 0 {
			t.Fatalf("after the policy changed: %+v %v; ran %q", again, err, pub.ran())
		}
		if got := string(again.Approvals[0].Input); got != `{"title":"Frday"}` {
			t.Errorf("asked again about %s, want the model's call as it asked", got)
		}
		run, _ = hs.Host.Session("s").Decide(ctx, again.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, Input: json.RawMessage(`{"title":"Friday"}`)})
		if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunCompleted || len(pub.ran()) != 1 || pub.ran()[0] != `{"title":"Friday"}` {
			t.Fatalf("%+v %v; ran %q", final, err, pub.ran())
		}
	})
}

// TestApprovalDoesNotBlockIndependentCalls: in a pass whose first call
// waits for a person, the calls after it that need none run before the
// run parks, whatever their order; the decision then runs the waiting call
// alone, once, and the next model pass sees every result.
func TestApprovalDoesNotBlockIndependentCalls(t *testing.T) {
	ctx := context.Background()
	var published, looked atomic.Int64
	hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{publishTool(&published), lookupTool(&looked)}},
		hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`}, hosttest.ToolCall{Name: "lookup", Arguments: `{}`}, hosttest.ToolCall{Name: "lookup", Arguments: `{}`})
	sess := hs.Host.Session("s")
	res, err := sess.Send(ctx, "publish and look", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if looked.Load() != 2 || published.Load() != 0 {
		t.Fatalf("before the decision: looked %d, published %d; want both lookups run and the publish waiting", looked.Load(), published.Load())
	}
	requests := hs.Model.RequestCount()
	run, err := sess.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := run.Wait(ctx); err != nil || done.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", done, err)
	}
	if looked.Load() != 2 || published.Load() != 1 || hs.Model.RequestCount() != requests+1 {
		t.Errorf("after the decision: looked %d, published %d, %d more model passes; want 2, 1, 1", looked.Load(), published.Load(), hs.Model.RequestCount()-requests)
	}
	last := hs.Model.Requests()[hs.Model.RequestCount()-1].Messages
	var results int
	for _, m := range last {
		if m.Role == ledger.RoleTool {
			results++
		}
	}
	if results != 3 {
		t.Errorf("the next pass saw %d tool results, want 3", results)
	}
}
