package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// askingHook stops every model call of a run that has no grant of its kind
// with an *ApprovalNeededError, and records the grants each call saw.
type askingHook struct {
	mu   sync.Mutex
	seen [][]host.Grant
}

func (h *askingHook) ToolHook(next host.CallFunc) host.CallFunc { return next }
func (h *askingHook) ModelHook(next host.StreamFunc) host.StreamFunc {
	return func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
		ci, _ := host.CallInfoFrom(ctx)
		h.mu.Lock()
		h.seen = append(h.seen, ci.Grants)
		h.mu.Unlock()
		if !slices.ContainsFunc(ci.Grants, func(g host.Grant) bool { return g.Kind == "budget_exceeded" }) {
			return model.Result{}, &host.ApprovalNeededError{Kind: "budget_exceeded", Reason: "budget_exceeded: spent $1 of $1", Summary: "let the run spend $0.50 more"}
		}
		return next(ctx, req, onDelta)
	}
}

// TestRunApproval: a hook that stops a model call with an
// ApprovalNeededError parks the run on a request of its own — no call, its
// kind, in the inbox and the result — instead of failing it; a message sent
// meanwhile queues; approved (on another host, as after a restart), the
// pass is made with the grant in the hooks' CallInfo and the run
// completes; denied, the run ends failed, saying who stopped it and why
// (and the queued message's own run asks again).
func TestRunApproval(t *testing.T) {
	ctx := context.Background()
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approved", false: "denied"}[approve], func(t *testing.T) {
			store := memory.New()
			hook := &askingHook{}
			hs := hosttest.New(t, host.Options{Storage: store, ApprovalSecret: approvalSecret, Hooks: []host.Hook{hook}})
			sess := hs.Host.Session("s")
			res, err := sess.Send(ctx, "hello", host.SendOptions{})
			if err != nil || res.Status != ledger.RunApprovalRequired || len(res.Approvals) != 1 {
				t.Fatalf("%+v, %v; want the run parked on its own request", res, err)
			}
			p := res.Approvals[0]
			if p.Kind != "budget_exceeded" || p.CallID != "" || p.Summary != "let the run spend $0.50 more" || !strings.Contains(p.Reason, "spent $1 of $1") || p.Token == "" {
				t.Fatalf("the request %+v", p)
			}
			if inbox, err := hs.Host.PendingApprovals(ctx); err != nil || len(inbox) != 1 || inbox[0].ApprovalID != p.ApprovalID || inbox[0].Kind != "budget_exceeded" {
				t.Fatalf("inbox %+v, %v", inbox, err)
			}
			events := hs.Events("s")
			if hosttest.CountKind(events, ledger.KindRunEnd) != 0 || !ledger.Parked(events, res.RunID) || hosttest.CountKind(events, ledger.KindStep) != 0 {
				t.Fatalf("the run is not parked before its pass: %s", hosttest.Kinds(events))
			}
			queued, err := sess.Send(ctx, "and another thing", host.SendOptions{})
			if err != nil || queued.Status != ledger.RunApprovalRequired || queued.RunID != res.RunID {
				t.Fatalf("a send while parked: %+v, %v", queued, err)
			}

			// Another host decides, as after a restart.
			hs2 := hosttest.New(t, host.Options{Storage: store, Model: hs.Model, ApprovalSecret: approvalSecret, Hooks: []host.Hook{hook}})
			run, err := hs2.Host.Session("s").DecideWithToken(ctx, p.Token, host.ApprovalDecision{Approve: approve, By: "alice", Reason: "not today"})
			if err != nil {
				t.Fatal(err)
			}
			final, err := run.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			events = hs.Events("s")
			if hosttest.CountKind(events, ledger.KindResumeAttempt) != 0 {
				t.Error("going on after the decision was counted as a resume attempt")
			}
			inbox, _ := hs.Host.PendingApprovals(ctx)
			if !approve {
				// The message queued meanwhile gets a run of its own, which
				// the hook stops too (that run starts once the denied one
				// ended: wait for it): the inbox holds its request, not the
				// denied one.
				for deadline := time.Now().Add(time.Minute); len(inbox) == 0 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
					inbox, _ = hs.Host.PendingApprovals(ctx)
				}
				if len(inbox) != 1 || inbox[0].ApprovalID == p.ApprovalID || inbox[0].RunID == res.RunID {
					t.Errorf("inbox after the denial: %+v; ledger %s", inbox, hosttest.Kinds(hs.Events("s")))
				}
				if final.Status != ledger.RunFailed || !strings.Contains(final.Reason, "spent $1 of $1; a person stopped the run (alice): not today") {
					t.Fatalf("denied: %+v", final)
				}
				if n := hs.Model.RequestCount(); n != 0 {
					t.Errorf("the model was called %d times after the denial", n)
				}
				return
			}
			if len(inbox) != 0 {
				t.Errorf("inbox after the approval: %+v", inbox)
			}
			if final.Status != ledger.RunCompleted || hosttest.CountKind(events, ledger.KindStep) != 1 {
				t.Fatalf("approved: %+v, ledger %s", final, hosttest.Kinds(events))
			}
			if ledger.RunOfMessage(events, queued.MessageID) != res.RunID {
				t.Error("the message queued while parked was not answered by the run")
			}
			hook.mu.Lock()
			defer hook.mu.Unlock()
			last := hook.seen[len(hook.seen)-1]
			if len(last) != 1 || last[0].ApprovalID != p.ApprovalID || last[0].Kind != "budget_exceeded" {
				t.Errorf("the pass after the approval saw grants %+v, want the approval", last)
			}
		})
	}
}

// TestRunApprovalExpires: a run's own request that nobody decides in time
// ends the run failed when the sweep finds it expired, without a model
// call; a late decision counts as the expiry too.
func TestRunApprovalExpires(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"sweep", "late decision"} {
		t.Run(how, func(t *testing.T) {
			store := memory.New()
			agent := host.Agent{ApprovalTTL: time.Millisecond}
			hs := hosttest.New(t, host.Options{Storage: store, Agent: agent, ApprovalSecret: approvalSecret, Hooks: []host.Hook{&askingHook{}}})
			res, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{})
			if err != nil || res.Status != ledger.RunApprovalRequired {
				t.Fatalf("%+v, %v", res, err)
			}
			time.Sleep(5 * time.Millisecond) // past the TTL
			switch how {
			case "sweep":
				h2 := hosttest.New(t, host.Options{Storage: store, Model: hs.Model, Agent: agent, ApprovalSecret: approvalSecret,
					Hooks: []host.Hook{&askingHook{}}, AutoResume: &host.AutoResume{}})
				<-h2.Host.SweepDone()
				hosttest.WaitLedger(t, store, "s", time.Minute, "the run's end", hosttest.Settled)
			case "late decision":
				run, err := hs.Host.Session("s").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
				if !errors.Is(err, host.ErrApprovalExpired) || run == nil {
					t.Fatalf("a late decision: %v", err)
				}
				if final, err := run.Wait(ctx); err != nil || final.Status != ledger.RunFailed {
					t.Fatalf("after a late decision: %+v, %v", final, err)
				}
			}
			events := hs.Events("s")
			view, _ := ledger.ProjectRun(events, res.RunID)
			if view.Status != ledger.RunFailed || !strings.Contains(view.Reason, "spent $1 of $1; nobody approved going on before") {
				t.Errorf("the run: %s %q", view.Status, view.Reason)
			}
			if n := hs.Model.RequestCount(); n != 0 {
				t.Errorf("the model was called %d times", n)
			}
		})
	}
}

// TestRunApprovalTranscript: the transcript of a run parked on its own
// request shows the response it will stream into waiting for approval,
// not interrupted.
func TestRunApprovalTranscript(t *testing.T) {
	hs := hosttest.New(t, host.Options{ApprovalSecret: approvalSecret, Hooks: []host.Hook{&askingHook{}}})
	sess := hs.Host.Session("s")
	if res, err := sess.Send(context.Background(), "hello", host.SendOptions{}); err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v, %v", res, err)
	}
	tr, err := sess.Transcript(context.Background())
	if err != nil || len(tr.Items) != 2 {
		t.Fatalf("%+v, %v", tr, err)
	}
	if last := tr.Items[1]; last.Kind != ledger.ItemResponse || last.Status != ledger.StatusApprovalRequired || last.Reason != "waiting for approval" {
		t.Errorf("the parked run's response %+v, want it waiting for approval", last)
	}
}

// TestRunApprovalEphemeralTask: a run nobody can reach — an ephemeral
// task's, whose session is not in the storage — cannot park on its own
// request: it fails as it would without the request, saying why, and
// nothing of it reaches the storage.
func TestRunApprovalEphemeralTask(t *testing.T) {
	store := memory.New()
	hs := hosttest.New(t, host.Options{Storage: store, ApprovalSecret: approvalSecret, Hooks: []host.Hook{&askingHook{}}})
	out := hs.Host.Task(context.Background(), host.TaskSpec{Prompt: "Write a title.", SessionID: "ephemeral", Ephemeral: true,
		Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, "budget_exceeded: spent $1 of $1") ||
		!strings.Contains(out.Reason, "this task is not durable, so nobody can give it") {
		t.Fatalf("the outcome %+v, want failed, saying the approval cannot be given", out)
	}
	if inbox, err := hs.Host.PendingApprovals(context.Background()); err != nil || len(inbox) != 0 {
		t.Errorf("inbox %+v, %v; want nothing", inbox, err)
	}
	if evs := hs.Events("ephemeral"); len(evs) != 0 {
		t.Errorf("the ephemeral task left %d events in the storage", len(evs))
	}
}
