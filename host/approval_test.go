package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// publishTool is a tool with an external effect that counts its runs.
func publishTool(runs *atomic.Int64) host.Tool {
	return host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`)},
		func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			runs.Add(1)
			return host.ToolResult{Output: "published " + string(c.Input)}, nil
		})
}

func lookupTool(runs *atomic.Int64) host.Tool {
	return host.NewTool(host.ToolSpec{Name: "lookup", Effect: host.EffectRead}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		runs.Add(1)
		return host.ToolResult{Output: "found"}, nil
	})
}

var approvalSecret = []byte("0123456789abcdef0123456789abcdef")

// approvalHost builds a host whose model first asks for calls, then
// answers from the tool results (hosttest's default reply).
func approvalHost(t *testing.T, store storage.Storage, agent host.Agent, calls ...hosttest.ToolCall) *hosttest.Harness {
	t.Helper()
	hs := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: approvalSecret})
	if len(calls) > 0 {
		hs.Model.Enqueue(hosttest.Reply{ToolCalls: calls})
	}
	return hs
}

// TestApprovalParksAndContinues: by default a call with an external effect
// waits for a person: the run parks durably (no run-end, approval_required
// in the transcript, listed in the inbox, a restarted host's boot sweep
// leaves it alone), and Decide continues it — the tool runs once, and the
// model's answer closes the run. A call the policy allows in the same
// pass runs before the run parks; a message sent while it waits is
// queued and answered by the continuation.
func TestApprovalParksAndContinues(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	var published, looked atomic.Int64
	agent := host.Agent{Tools: []host.Tool{publishTool(&published), lookupTool(&looked)}}
	hs := approvalHost(t, store, agent, hosttest.ToolCall{Name: "lookup", Arguments: `{}`}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	sess := hs.Host.Session("s")
	var progress []host.Progress
	res, err := sess.Send(ctx, "publish it", host.SendOptions{OnProgress: func(p host.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 || res.Approvals[0].Tool != "publish" || res.Approvals[0].Token == "" {
		t.Fatalf("result %+v, want approval_required with one request", res)
	}
	if published.Load() != 0 || looked.Load() != 1 {
		t.Fatalf("published %d, looked %d: want the lookup run and the publish waiting", published.Load(), looked.Load())
	}
	requested := false
	for _, p := range progress {
		if p.Type == host.ProgressApprovalRequested && p.Approval.Tool == "publish" && p.Approval.Token != "" && p.RunID == res.RunID && p.SessionID == "s" {
			requested = true
		}
	}
	if !requested {
		t.Error("no approval-requested progress event")
	}
	events := hs.Events("s")
	if hosttest.CountKind(events, ledger.KindRunEnd) != 0 || !ledger.Parked(events, res.RunID) {
		t.Fatalf("the run is not parked: %s", hosttest.Kinds(events))
	}
	tr, _ := sess.Transcript(ctx)
	last := tr.Items[len(tr.Items)-1]
	if last.Status != ledger.StatusApprovalRequired || last.ToolCalls[1].Status != ledger.ToolApprovalRequired || last.ToolCalls[1].Approval != ledger.ApprovalPending {
		t.Fatalf("transcript item %+v", last)
	}
	inbox, err := hs.Host.PendingApprovals(ctx)
	if err != nil || len(inbox) != 1 || inbox[0].ApprovalID != res.Approvals[0].ApprovalID || inbox[0].SessionID != "s" {
		t.Fatalf("inbox %+v, %v", inbox, err)
	}

	// A message sent meanwhile waits, queued.
	queued, err := sess.Send(ctx, "and another thing", host.SendOptions{})
	if err != nil || queued.Status != ledger.RunApprovalRequired || queued.RunID != res.RunID {
		t.Fatalf("a send while parked: %+v, %v", queued, err)
	}

	// Another host on the same storage, as after a restart: its boot
	// sweep does not treat the parked run as interrupted.
	hs2 := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: approvalSecret, AutoResume: &host.AutoResume{}})
	<-hs2.Host.SweepDone()
	if rep := hs2.Host.LastSweep(); rep.Parked != 1 || rep.Resumed != 0 {
		t.Fatalf("boot sweep %+v, want the parked session left alone", rep)
	}
	if published.Load() != 0 {
		t.Fatal("the sweep ran the call")
	}

	run, err := hs2.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	final, err := run.Wait(ctx)
	if err != nil || final.Status != ledger.RunCompleted {
		t.Fatalf("after approval: %+v, %v", final, err)
	}
	if published.Load() != 1 {
		t.Fatalf("published %d times, want once", published.Load())
	}
	events = hs.Events("s")
	if !strings.Contains(hosttest.Kinds(events), "approval-decision tool-start tool-result step run-end") {
		t.Fatalf("ledger: %s", hosttest.Kinds(events))
	}
	if hosttest.CountKind(events, ledger.KindResumeAttempt) != 0 {
		t.Error("continuing after a decision was counted as a resume attempt")
	}
	if _, err := hs2.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalDecided) {
		t.Fatalf("a second decision: %v", err)
	}
	if inbox, _ := hs.Host.PendingApprovals(ctx); len(inbox) != 0 {
		t.Fatalf("inbox after the decision: %+v", inbox)
	}
	// The queued message was folded into the continued run.
	msgRun := ledger.RunOfMessage(events, queued.MessageID)
	if msgRun != res.RunID {
		t.Errorf("the queued message was answered by run %q, want the continued run %s", msgRun, res.RunID)
	}
	tr, _ = sess.Transcript(ctx)
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			if c.Name == "publish" && (c.Status != ledger.ToolDone || c.Approval != ledger.ApprovalApproved) {
				t.Errorf("the publish call shows %s, %s", c.Status, c.Approval)
			}
		}
	}
}

// TestApprovalDenied: a denial is a normal branch: the model gets a result
// saying who denied it and why, and the run completes.
func TestApprovalDenied(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	hs := approvalHost(t, nil, host.Agent{Tools: []host.Tool{publishTool(&published)}}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	res, err := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: false, Reason: "not today", By: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	final, err := run.Wait(ctx)
	if err != nil || final.Status != ledger.RunCompleted || !strings.Contains(final.Text, "a person denied this call (bob): not today") {
		t.Fatalf("after the denial: %+v, %v", final, err)
	}
	if published.Load() != 0 {
		t.Fatal("a denied call ran")
	}
}

// TestPolicies: deny beats require_approval beats allow; a policy that
// fails, panics or runs out of time denies (never allows); ToolApprovals
// override: never denies, always runs without asking (a deny stands), ask
// asks even what the policies allow.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	verdict := func(v host.Verdict) host.Policy {
		return host.PolicyFunc(string(v), func(context.Context, host.PolicyRequest) (host.Decision, error) {
			return host.Decision{Verdict: v, Reason: "says " + string(v)}, nil
		})
	}
	failing := host.PolicyFunc("broken", func(context.Context, host.PolicyRequest) (host.Decision, error) {
		return host.Decision{}, errors.New("it trapped")
	})
	panicking := host.PolicyFunc("panicky", func(context.Context, host.PolicyRequest) (host.Decision, error) { panic("boom") })
	slow := host.PolicyFunc("slow", func(ctx context.Context, _ host.PolicyRequest) (host.Decision, error) {
		<-ctx.Done()
		return host.Decision{Verdict: host.Allow}, nil // too late: the deadline passed
	})
	for _, tc := range []struct {
		name      string
		policies  []host.Policy
		overrides map[string]host.ApprovalMode
		want      string // "ran", "parked", or a denial's text
	}{
		{"allow", []host.Policy{verdict(host.Allow)}, nil, "ran"},
		{"require beats allow", []host.Policy{verdict(host.Allow), verdict(host.RequireApproval)}, nil, "parked"},
		{"deny beats require", []host.Policy{verdict(host.RequireApproval), verdict(host.Deny), verdict(host.Allow)}, nil, "denied by policy deny: says deny"},
		{"failing", []host.Policy{verdict(host.Allow), failing}, nil, "policy broken failed: it trapped"},
		{"panicking", []host.Policy{panicking}, nil, "policy panicky failed: it panicked: boom"},
		{"timing out", []host.Policy{slow}, nil, "policy slow failed"},
		{"never", []host.Policy{verdict(host.Allow)}, map[string]host.ApprovalMode{"publish": host.ApproveNever}, "never allowed"},
		{"always", nil, map[string]host.ApprovalMode{"publish": host.ApproveAlways}, "ran"},
		{"always, but a deny stands", []host.Policy{verdict(host.Deny)}, map[string]host.ApprovalMode{"publish": host.ApproveAlways}, "says deny"},
		{"ask", []host.Policy{verdict(host.Allow)}, map[string]host.ApprovalMode{"publish": host.ApproveAsk}, "parked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var published atomic.Int64
			agent := host.Agent{Tools: []host.Tool{publishTool(&published)}, Policies: tc.policies, ToolApprovals: tc.overrides,
				PolicyTimeout: 50 * time.Millisecond}
			hs := approvalHost(t, nil, agent, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
			res, err := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			switch tc.want {
			case "ran":
				if res.Status != ledger.RunCompleted || published.Load() != 1 {
					t.Fatalf("%+v, published %d", res, published.Load())
				}
			case "parked":
				if res.Status != ledger.RunApprovalRequired || published.Load() != 0 {
					t.Fatalf("%+v, published %d", res, published.Load())
				}
			default:
				if res.Status != ledger.RunCompleted || published.Load() != 0 || !strings.Contains(res.Text, tc.want) {
					t.Fatalf("%+v, published %d; want a denial with %q", res, published.Load(), tc.want)
				}
			}
		})
	}
}

// TestApprovalTokens: a token decides exactly the request it was minted
// for, once, before it expires; every other use is refused with its own
// error and changes nothing.
func TestApprovalTokens(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	agent := host.Agent{Tools: []host.Tool{publishTool(&published)}}
	park := func(t *testing.T, hs *hosttest.Harness, session string) host.RunResult {
		t.Helper()
		hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"Hi"}`}}})
		res, err := hs.Host.Session(session).Send(ctx, "publish it", host.SendOptions{})
		if err != nil || res.Status != ledger.RunApprovalRequired {
			t.Fatalf("%+v %v", res, err)
		}
		return res
	}
	store := memory.New()
	hs := approvalHost(t, store, agent)
	a, b := park(t, hs, "a"), park(t, hs, "b")
	tokA, tokB := a.Approvals[0].Token, b.Approvals[0].Token
	unchanged := func(t *testing.T, what string) {
		t.Helper()
		for _, id := range []string{"a", "b"} {
			if ev := hs.Events(id); hosttest.CountKind(ev, ledger.KindApprovalDecision) != 0 {
				t.Fatalf("%s: session %s has a decision", what, id)
			}
		}
	}

	forged := tokA[:len(tokA)-4] + "AAAA"
	for _, tc := range []struct {
		name    string
		session string
		token   string
		want    error
	}{
		{"forged", "a", forged, host.ErrApprovalTokenInvalid},
		{"garbage", "a", "not-a-token", host.ErrApprovalTokenInvalid},
		{"another session's", "a", tokB, host.ErrApprovalTokenMismatch},
	} {
		if _, err := hs.Host.Session(tc.session).DecideWithToken(ctx, tc.token, host.ApprovalDecision{Approve: true}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		unchanged(t, tc.name)
	}
	// Another tenant's host, same secret and storage.
	other := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: approvalSecret, Tenant: "globex"})
	if _, err := other.Host.Session("a").DecideWithToken(ctx, tokA, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalTokenMismatch) {
		t.Errorf("another tenant's: %v", err)
	}
	// Another secret: the signature does not match.
	stranger := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: []byte(strings.Repeat("x", 32))})
	if _, err := stranger.Host.Session("a").DecideWithToken(ctx, tokA, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalTokenInvalid) {
		t.Errorf("another secret's: %v", err)
	}
	unchanged(t, "other hosts")

	run, err := hs.Host.Session("a").DecideWithToken(ctx, tokA, host.ApprovalDecision{Approve: true, By: "link"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(ctx); err != nil || res.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("approved by token: %+v, %v, published %d", res, err, published.Load())
	}
	if _, err := hs.Host.Session("a").DecideWithToken(ctx, tokA, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalDecided) {
		t.Errorf("replayed: %v", err)
	}
	if published.Load() != 1 {
		t.Fatal("the replay ran the call again")
	}
}

// TestApprovalTampered: a request whose recorded input digest was changed
// in the ledger no longer matches its token; and a call whose input does
// not match the digest it was approved for is refused, not run.
func TestApprovalTampered(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	agent := host.Agent{Tools: []host.Tool{publishTool(&published)}}
	store := memory.New()
	hs := approvalHost(t, store, agent, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
	tok := res.Approvals[0].Token

	// A copy of the ledger whose request says another input digest.
	tampered := memory.New()
	for _, e := range hs.Events("s") {
		if e.ApprovalRequest != nil {
			a := *e.ApprovalRequest
			a.InputDigest = ledger.InputDigest(`{"title":"Something else"}`)
			e.ApprovalRequest = &a
		}
		if err := tampered.Append(ctx, "s", e); err != nil {
			t.Fatal(err)
		}
	}
	ht := hosttest.New(t, host.Options{Storage: tampered, Agent: agent, ApprovalSecret: approvalSecret})
	if _, err := ht.Host.Session("s").DecideWithToken(ctx, tok, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalTokenInvalid) {
		t.Fatalf("a token for a tampered request: %v", err)
	}
	// Decided without the token, the tampered request does not run the
	// call: its input is not the one the digest names.
	run, err := ht.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	final, err := run.Wait(ctx)
	if err != nil || published.Load() != 0 || !strings.Contains(final.Text, "not the one that was approved") {
		t.Fatalf("%+v, %v, published %d", final, err, published.Load())
	}
}

// TestApprovalPolicyChanged: when the policy's code changed between the
// request and the decision, the approval is void and the call is asked
// about again.
func TestApprovalPolicyChanged(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	var source atomic.Value
	source.Store("sha256:v1")
	policy := host.PolicyFunc("guard", func(context.Context, host.PolicyRequest) (host.Decision, error) {
		return host.Decision{Verdict: host.RequireApproval, Summary: "publish?", Source: source.Load().(string)}, nil
	})
	hs := approvalHost(t, nil, host.Agent{Tools: []host.Tool{publishTool(&published)}, Policies: []host.Policy{policy}},
		hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
	source.Store("sha256:v2") // a new version of the policy is loaded
	run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := run.Wait(ctx)
	if err != nil || again.Status != ledger.RunApprovalRequired || len(again.Approvals) != 1 || again.Approvals[0].ApprovalID == res.Approvals[0].ApprovalID {
		t.Fatalf("after the policy changed: %+v, %v; want a new request", again, err)
	}
	if published.Load() != 0 {
		t.Fatal("a void approval ran the call")
	}
	approvals := ledger.Approvals(hs.Events("s"), res.RunID)
	if len(approvals) != 2 || approvals[0].State != ledger.ApprovalVoid || approvals[1].Request.PolicySource != "sha256:v2" {
		t.Fatalf("approvals %+v", approvals)
	}
	run, _ = hs.Host.Session("s").Decide(ctx, again.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("%+v, %v, published %d", final, err, published.Load())
	}
}

// TestApprovalExpires: a request nobody decides in time is refused as
// expired — by the sweep, or when a late decision comes — the call never
// runs, and the model is told it expired and goes on. A late Decide fails
// with ErrApprovalExpired (the person learns the approval did not count),
// and what it records is the host's expiry, as the sweep records it, not
// the person's decision. A late token is refused with the same error and
// records nothing: the sweep expires the request afterwards.
func TestApprovalExpires(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"sweep", "late decision", "late token"} {
		t.Run(how, func(t *testing.T) {
			var published atomic.Int64
			agent := host.Agent{Tools: []host.Tool{publishTool(&published)}, ApprovalTTL: time.Millisecond}
			store := memory.New()
			hs := approvalHost(t, store, agent, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
			res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
			time.Sleep(5 * time.Millisecond) // past the TTL
			sweep := func() *hosttest.Harness {
				t.Helper()
				h2 := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: approvalSecret, AutoResume: &host.AutoResume{}})
				<-h2.Host.SweepDone()
				hosttest.WaitLedger(t, store, "s", time.Minute, "the run's end", hosttest.Settled)
				return h2
			}
			seen := hs // the host whose model answered after the expiry
			switch how {
			case "sweep":
				seen = sweep()
			case "late decision":
				run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
				if !errors.Is(err, host.ErrApprovalExpired) || run == nil {
					t.Fatalf("a late decision: %v (a run: %t); want ErrApprovalExpired and the run going on", err, run != nil)
				}
				if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunCompleted {
					t.Fatalf("after a late decision: %+v, %v", final, err)
				}
			case "late token":
				before := encoded(t, hs.Events("s"))
				run, err := hs.Host.Session("s").DecideWithToken(ctx, res.Approvals[0].Token, host.ApprovalDecision{Approve: true, By: "link"})
				if !errors.Is(err, host.ErrApprovalExpired) || run != nil {
					t.Fatalf("a late token: %v (a run: %t); want ErrApprovalExpired and nothing continued", err, run != nil)
				}
				if after := encoded(t, hs.Events("s")); after != before {
					t.Fatalf("a refused token changed the ledger:\n%s\nwas:\n%s", after, before)
				}
				if inbox, _ := hs.Host.PendingApprovals(ctx); len(inbox) != 1 {
					t.Fatalf("a refused token changed the inbox: %+v", inbox)
				}
				seen = sweep()
			}
			events := hs.Events("s")
			if published.Load() != 0 {
				t.Fatalf("an expired call ran %d times", published.Load())
			}
			approvals := ledger.Approvals(events, res.RunID)
			if len(approvals) != 1 || approvals[0].State != ledger.ApprovalExpired || approvals[0].Decision.By != "" ||
				!strings.HasPrefix(approvals[0].Decision.Reason, "nobody decided before") {
				t.Fatalf("approvals %+v, want one expired by the host", approvals)
			}
			if n := hosttest.CountKind(events, ledger.KindApprovalDecision); n != 1 {
				t.Fatalf("%d decisions recorded, want the expiry alone", n)
			}
			// The model was told, and answered.
			reqs := seen.Model.Requests()
			if len(reqs) == 0 {
				t.Fatal("the model was not asked again")
			}
			told := false
			for _, m := range reqs[len(reqs)-1].Messages {
				if m.ToolCallID != "" && strings.Contains(m.Text(), "nobody approved this call in time (its approval request expired at") {
					told = true
				}
			}
			if !told {
				t.Errorf("the model was not told the request expired: %+v", reqs[len(reqs)-1].Messages)
			}
			tr := ledger.ProjectSession("s", events)
			if last := tr.Items[len(tr.Items)-1]; last.Status != ledger.StatusCompleted || !strings.Contains(last.Text, "expired") {
				t.Errorf("the run's answer: %+v", last)
			}
		})
	}
}

// TestApprovalTokenRefusals: two calls of one pass wait, so one run holds
// two requests. The token of one, its claims edited to name the other, is
// refused as a mismatch (not taken for a forgery); an expired token is
// refused as expired. Neither changes anything: the ledger byte for byte,
// the inbox, the model and the tools are as before; and each request is
// still decided by its own token afterwards.
func TestApprovalTokenRefusals(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	store := memory.New()
	agent := host.Agent{Tools: []host.Tool{publishTool(&published)}}
	hs := approvalHost(t, store, agent, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"A"}`}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"B"}`})
	res, err := hs.Host.Session("s").Send(ctx, "publish both", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 2 {
		t.Fatalf("%+v, %v; want two requests", res, err)
	}
	a, b := res.Approvals[0], res.Approvals[1]
	if a.RunID != b.RunID {
		t.Fatalf("the requests are of runs %s and %s, want one", a.RunID, b.RunID)
	}
	// Expired tokens: a host whose requests lapse at once, on another
	// session of the store.
	late := hosttest.New(t, host.Options{Storage: store, Agent: host.Agent{Tools: agent.Tools, ApprovalTTL: time.Millisecond}, ApprovalSecret: approvalSecret})
	late.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"C"}`}}})
	lres, err := late.Host.Session("late").Send(ctx, "publish it", host.SendOptions{})
	if err != nil || len(lres.Approvals) != 1 {
		t.Fatalf("%+v, %v", lres, err)
	}
	time.Sleep(5 * time.Millisecond) // past the TTL

	for _, tc := range []struct {
		name    string
		h       *hosttest.Harness
		session string
		token   string
		want    error
		says    string
	}{
		{"another approval's token", hs, "s", respliced(t, a.Token, b.ApprovalID), host.ErrApprovalTokenMismatch, "token of approval request " + a.ApprovalID + ", not of " + b.ApprovalID},
		{"the other way round", hs, "s", respliced(t, b.Token, a.ApprovalID), host.ErrApprovalTokenMismatch, "token of approval request " + b.ApprovalID},
		{"expired", late, "late", lres.Approvals[0].Token, host.ErrApprovalExpired, "no longer decides it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledgers := map[string]string{"s": encoded(t, hs.Events("s")), "late": encoded(t, hs.Events("late"))}
			inbox, err := hs.Host.PendingApprovals(ctx)
			if err != nil || len(inbox) != 3 {
				t.Fatalf("inbox %+v, %v", inbox, err)
			}
			asked := hs.Model.RequestCount() + late.Model.RequestCount()
			run, err := tc.h.Host.Session(tc.session).DecideWithToken(ctx, tc.token, host.ApprovalDecision{Approve: true})
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.says) || run != nil {
				t.Fatalf("%v (a run: %t), want %v saying %q", err, run != nil, tc.want, tc.says)
			}
			for id, was := range ledgers {
				if now := encoded(t, hs.Events(id)); now != was {
					t.Errorf("session %s changed:\n%s\nwas:\n%s", id, now, was)
				}
			}
			if now, _ := hs.Host.PendingApprovals(ctx); fmt.Sprint(now) != fmt.Sprint(inbox) {
				t.Errorf("the inbox changed: %+v, was %+v", now, inbox)
			}
			if n := hs.Model.RequestCount() + late.Model.RequestCount(); n != asked || published.Load() != 0 {
				t.Errorf("model asked %d times (was %d), published %d", n, asked, published.Load())
			}
		})
	}

	// Each token still decides its own request: a, then b, continues the
	// run, each call running once.
	run, err := hs.Host.Session("s").DecideWithToken(ctx, a.Token, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := run.Wait(ctx); err != nil || r.Status != ledger.RunApprovalRequired || len(r.Approvals) != 1 || r.Approvals[0].ApprovalID != b.ApprovalID {
		t.Fatalf("after a's token: %+v, %v; want the run waiting on b", r, err)
	}
	if run, err = hs.Host.Session("s").DecideWithToken(ctx, b.Token, host.ApprovalDecision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	if r, err := run.Wait(ctx); err != nil || r.Status != ledger.RunCompleted || published.Load() != 2 {
		t.Fatalf("after b's token: %+v, %v, published %d", r, err, published.Load())
	}
}

// respliced returns token with its claims edited to name approval id,
// its signature left as it was.
func respliced(t *testing.T, token, id string) string {
	t.Helper()
	claims, sig, _ := strings.Cut(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(claims)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	c["a"] = id
	raw, _ = json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(raw) + "." + sig
}

// encoded renders a ledger as its stored bytes, to compare.
func encoded(t *testing.T, events []ledger.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		line, err := ledger.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestApprovalDecidedProgress: the run a decision continues announces it
// to its subscribers: an approval-decided event carrying the session, the
// run, the approval id and what was decided (no token), before the call's
// tool events.
func TestApprovalDecidedProgress(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		approve bool
		want    ledger.ApprovalState
	}{{true, ledger.ApprovalApproved}, {false, ledger.ApprovalDenied}} {
		t.Run(string(tc.want), func(t *testing.T) {
			var published atomic.Int64
			hs := approvalHost(t, nil, host.Agent{Tools: []host.Tool{publishTool(&published)}}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
			res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
			id := res.Approvals[0].ApprovalID
			run, err := hs.Host.Session("s").Decide(ctx, id, host.ApprovalDecision{Approve: tc.approve, Reason: "because", By: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			sub := run.Subscribe(0)
			defer sub.Close()
			var decided []host.Progress
			var types []string
			for {
				p, err := sub.Next(ctx)
				if err != nil {
					break
				}
				types = append(types, string(p.Type))
				if p.Type == host.ProgressApprovalDecided {
					decided = append(decided, p)
				}
			}
			if _, err := run.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if len(decided) != 1 {
				t.Fatalf("%d approval-decided events in %v, want 1", len(decided), types)
			}
			p := decided[0]
			if p.SessionID != "s" || p.RunID != res.RunID || p.Approval == nil || p.Approval.ApprovalID != id ||
				p.Approval.State != tc.want || p.Approval.Tool != "publish" || p.Approval.Token != "" {
				t.Fatalf("approval-decided %+v (approval %+v)", p, p.Approval)
			}
			if i := slices.Index(types, string(host.ProgressApprovalDecided)); i < 0 || i > slices.Index(types, string(host.ProgressToolEnd)) {
				t.Errorf("the decision is announced after the call's result: %v", types)
			}
		})
	}
}

// TestCancelParkedRun: Host.Cancel ends a parked run as cancelled and
// answers its waiting calls.
func TestCancelParkedRun(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	hs := approvalHost(t, nil, host.Agent{Tools: []host.Tool{publishTool(&published)}}, hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	res, _ := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
	if !hs.Host.Cancel("s", "changed my mind") {
		t.Fatal("Cancel reported nothing to cancel")
	}
	events := hs.Events("s")
	view, _ := ledger.ProjectRun(events, res.RunID)
	if !view.Ended || view.Status != ledger.RunCancelled || view.Reason != "changed my mind" || len(view.Results) != 1 {
		t.Fatalf("run %+v", view)
	}
	if len(ledger.PendingApprovals(events)) != 0 || published.Load() != 0 {
		t.Fatal("a request is still pending, or the call ran")
	}
	if hs.Host.Cancel("s", "again") {
		t.Error("a second Cancel reported a cancellation")
	}
}

// TestTaskApproval: a durable task whose call needs a person waits in
// Task until the request is decided, and its run's end is the task's
// outcome; a task that is not durable cannot wait: the call is refused,
// and the model goes on.
func TestTaskApproval(t *testing.T) {
	ctx := context.Background()
	schema := json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`)
	for _, durable := range []bool{true, false} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			var published atomic.Int64
			hs := approvalHost(t, nil, host.Agent{Tools: []host.Tool{publishTool(&published)}},
				hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
			hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: host.SubmitToolName, Arguments: `{"title":"Hi"}`}}})
			var requested atomic.Value
			done := make(chan host.Outcome, 1)
			go func() {
				done <- hs.Host.Task(ctx, host.TaskSpec{Prompt: "publish, then submit", Ephemeral: !durable, SessionID: "task",
					Deliverable: host.Deliverable{Schema: schema},
					OnProgress: func(p host.Progress) {
						if p.Type == host.ProgressApprovalRequested {
							requested.Store(p.Approval.ApprovalID)
						}
					}})
			}()
			if durable {
				deadline := time.Now().Add(time.Minute)
				for requested.Load() == nil {
					if time.Now().After(deadline) {
						t.Fatal("no approval requested")
					}
					time.Sleep(time.Millisecond)
				}
				select {
				case out := <-done:
					t.Fatalf("the task ended before the decision: %+v", out)
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := hs.Host.Session("task").Decide(ctx, requested.Load().(string), host.ApprovalDecision{Approve: true}); err != nil {
					t.Fatal(err)
				}
			}
			out := <-done
			if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Hi"}` {
				t.Fatalf("outcome %+v", out)
			}
			if want := map[bool]int64{true: 1, false: 0}[durable]; published.Load() != want {
				t.Errorf("published %d, want %d", published.Load(), want)
			}
			if !durable {
				reqs := hs.Model.Requests()
				if last := reqs[len(reqs)-1]; !strings.Contains(fmt.Sprint(last.Messages), "this task is not durable") {
					t.Errorf("the model was not told why: %+v", last.Messages)
				}
			}
		})
	}
}

// TestTaskToolsBypassPolicies: a policy that denies every call does not
// take a task's way out: submit_deliverable still ends it.
func TestTaskToolsBypassPolicies(t *testing.T) {
	denyAll := host.PolicyFunc("deny-all", func(context.Context, host.PolicyRequest) (host.Decision, error) {
		return host.Decision{Verdict: host.Deny, Reason: "no"}, nil
	})
	hs := approvalHost(t, nil, host.Agent{Policies: []host.Policy{denyAll}},
		hosttest.ToolCall{Name: host.SubmitToolName, Arguments: `{"title":"Hi"}`})
	out := hs.Host.Task(context.Background(), host.TaskSpec{Prompt: "submit",
		Deliverable: host.Deliverable{Schema: json.RawMessage(`{"type":"object"}`)}})
	if out.Status != host.OutcomeSubmitted {
		t.Fatalf("outcome %+v", out)
	}
}

// blockingTool is a tool with no effect to approve that signals entered
// when called, then blocks until release closes or its call's context ends.
func blockingTool() (tool host.Tool, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	tool = host.NewTool(host.ToolSpec{Name: "slow", Effect: host.EffectRead}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return host.ToolResult{Output: "slow done"}, nil
	})
	return tool, entered, release
}

// publishThenSlow is a pass whose first call waits for approval while its
// second (blockingTool's) runs: the run works on after the request.
var publishThenSlow = []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"Hi"}`}, {Name: "slow", Arguments: `{}`}}

// TestDecideBeforeThePark: a request reaches the ledger and the inbox
// while its run still works (here a later call of the same pass runs). A
// decision then waits for the run to park, and counts: it is neither
// refused with "nothing to resume" (which left the run waiting for a
// decision already given) nor recorded under the running run.
func TestDecideBeforeThePark(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	slow, entered, release := blockingTool()
	agent := host.Agent{Tools: []host.Tool{publishTool(&published), slow}}
	hs := approvalHost(t, memory.New(), agent, publishThenSlow...)
	sess := hs.Host.Session("s")
	first, err := sess.Start(ctx, "publish it", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	inbox, err := hs.Host.PendingApprovals(ctx)
	if err != nil || len(inbox) != 1 {
		t.Fatalf("inbox while the pass runs: %+v, %v", inbox, err)
	}
	id := inbox[0].ApprovalID

	// While the run works, the decision waits (here until its context
	// ends), and records nothing.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = sess.Decide(short, id, host.ApprovalDecision{Approve: true, By: "alice"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision while the run works: %v, want it to wait for the park", err)
	}
	if n := hosttest.CountKind(hs.Events("s"), ledger.KindApprovalDecision); n != 0 {
		t.Fatalf("%d decisions recorded by a decision that gave up", n)
	}

	type decided struct {
		run *host.Run
		err error
	}
	done := make(chan decided, 1)
	go func() {
		r, err := sess.Decide(ctx, id, host.ApprovalDecision{Approve: true, By: "alice"})
		done <- decided{r, err}
	}()
	close(release)
	if res, err := first.Wait(ctx); err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("the run before the decision: %+v, %v", res, err)
	}
	d := <-done
	if d.err != nil {
		t.Fatalf("the decision: %v", d.err)
	}
	final, err := d.run.Wait(ctx)
	if err != nil || final.Status != ledger.RunCompleted {
		t.Fatalf("after the decision: %+v, %v", final, err)
	}
	if published.Load() != 1 {
		t.Fatalf("published %d times, want once", published.Load())
	}
	// A second decision learns that the request was decided.
	if _, err := sess.Decide(ctx, id, host.ApprovalDecision{Approve: false}); !errors.Is(err, host.ErrApprovalDecided) {
		t.Fatalf("a second decision: %v", err)
	}
}

// TestStoppedBeforeThePark: a run cancelled, or timed out, while a later
// call of the pass runs after an approval request was recorded does not
// park: it ends so, the request is denied with the reason, the call
// answered without running, the inbox empty; a decision afterwards finds
// it decided, and the call never runs.
func TestStoppedBeforeThePark(t *testing.T) {
	for _, c := range []struct {
		name     string
		timeouts host.AgentTimeouts
		status   ledger.RunStatus
		reason   string
	}{
		{"cancelled", host.AgentTimeouts{}, ledger.RunCancelled, "the run was cancelled: stop"},
		{"timed out", host.AgentTimeouts{Total: time.Second}, ledger.RunTimedOut, "the run timed out: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			var published atomic.Int64
			slow, entered, _ := blockingTool() // released by the run's end only
			agent := host.Agent{Tools: []host.Tool{publishTool(&published), slow}, Timeouts: c.timeouts}
			hs := approvalHost(t, memory.New(), agent, publishThenSlow...)
			sess := hs.Host.Session("s")
			run, err := sess.Start(ctx, "publish it", host.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			<-entered
			if c.status == ledger.RunCancelled {
				// (The total timeout may strike before a look at the inbox.)
				if inbox, err := hs.Host.PendingApprovals(ctx); err != nil || len(inbox) != 1 {
					t.Fatalf("inbox while the pass runs: %+v, %v", inbox, err)
				}
				run.Cancel("stop")
			}
			res, err := run.Wait(ctx)
			if err != nil || res.Status != c.status {
				t.Fatalf("the run: %+v, %v; want it %s, not parked", res, err, c.status)
			}
			if inbox, _ := hs.Host.PendingApprovals(ctx); len(inbox) != 0 {
				t.Errorf("the inbox after the run ended: %+v", inbox)
			}
			var request *ledger.ApprovalRequest
			var decided, answered bool
			for _, e := range hs.Events("s") {
				if r := e.ApprovalRequest; r != nil {
					request = r
				}
				if d := e.ApprovalDecision; d != nil && request != nil && d.ApprovalID == request.ApprovalID && d.Decision == ledger.DecisionDeny && strings.HasPrefix(d.Reason, c.reason) {
					decided = true
				}
				if r := e.ToolResult; r != nil && request != nil && r.CallID == request.CallID && r.IsError {
					answered = true
				}
			}
			if request == nil || !decided || !answered {
				t.Fatalf("request recorded %v, denied %v, call answered %v; ledger %s", request != nil, decided, answered, hosttest.Kinds(hs.Events("s")))
			}
			if _, err := sess.Decide(ctx, request.ApprovalID, host.ApprovalDecision{Approve: true}); !errors.Is(err, host.ErrApprovalDecided) {
				t.Errorf("a decision after the run ended: %v, want ErrApprovalDecided", err)
			}
			if published.Load() != 0 {
				t.Errorf("the call ran %d times", published.Load())
			}
		})
	}
}

// TestRunningCounts: Host.Running counts the runs in flight — one while a
// call of its pass runs, none once it ended, none while a run is parked
// for a person's decision, none once its continuation ended.
func TestRunningCounts(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	slow, entered, release := blockingTool()
	hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{publishTool(&published), slow}}, hosttest.ToolCall{Name: "slow", Arguments: `{}`})
	if n := hs.Host.Running(); n != 0 {
		t.Fatalf("Running before any run = %d", n)
	}
	run, err := hs.Host.Session("a").Start(ctx, "go slow", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if n := hs.Host.Running(); n != 1 {
		t.Fatalf("Running while a call runs = %d, want 1", n)
	}
	close(release)
	if res, err := run.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("the slow run: %+v, %v", res, err)
	}
	if n := hs.Host.Running(); n != 0 {
		t.Fatalf("Running after the run = %d, want 0", n)
	}

	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"Hi"}`}}})
	parked, err := hs.Host.Session("b").Start(ctx, "publish it", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := parked.Wait(ctx); err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("the publishing run: %+v, %v", res, err)
	}
	if n := hs.Host.Running(); n != 0 {
		t.Fatalf("Running with a run parked = %d, want 0", n)
	}
	inbox, err := hs.Host.PendingApprovals(ctx)
	if err != nil || len(inbox) != 1 {
		t.Fatalf("inbox: %+v, %v", inbox, err)
	}
	cont, err := hs.Host.Session("b").Decide(ctx, inbox[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cont.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("after the decision: %+v, %v", res, err)
	}
	if n := hs.Host.Running(); n != 0 || published.Load() != 1 {
		t.Fatalf("Running after the continued run = %d (published %d), want 0 (1)", n, published.Load())
	}
}
