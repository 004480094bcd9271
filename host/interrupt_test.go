//go:build unix

package host_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// waitRequests waits until the model was asked n times: its pass is then
// streaming (or stalled).
func waitRequests(t *testing.T, m *hosttest.Model, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); m.RequestCount() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the model was asked %d times, want %d", m.RequestCount(), n)
		}
	}
}

// TestOverlapInterrupt: a message sent with overlap interrupt while a run
// streams stops that run (cancelled, its partial reply kept) and is
// answered by a run of its own, whose model sees the cut turn; with
// rollback, the model no longer sees the cut turn, which the ledger and
// the transcript keep; Session.Messages shows what the model sees next.
// Per agent, and per message over a queueing agent.
func TestOverlapInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		agent, send  host.Overlap
		rolledBack   bool
		modelSeesCut bool
	}{
		{"agent interrupt", host.OverlapInterrupt, "", false, true},
		{"message interrupt", "", host.OverlapInterrupt, false, true},
		{"agent rollback", host.OverlapRollback, "", true, false},
		{"message rollback", host.OverlapQueue, host.OverlapRollback, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := hosttest.StallingModel("stall", "thinking about it")
			hs := hosttest.New(t, host.Options{Storage: memory.New(), Model: m, Agent: host.Agent{Model: hosttest.DefaultModel, Overlap: tc.agent}})
			sess := hs.Host.Session("s")
			if res, err := sess.Send(ctx, "hello", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("%+v %v", res, err)
			}
			first, err := sess.Start(ctx, "stall please", host.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitRequests(t, m, 2)
			second, err := sess.Send(ctx, "second", host.SendOptions{Overlap: tc.send})
			if err != nil || second.Status != ledger.RunCompleted || second.Text != "You said: second" {
				t.Fatalf("the interrupting message: %+v %v", second, err)
			}
			cut, err := first.Wait(ctx)
			how := "interrupted"
			if tc.rolledBack {
				how = "rolled back"
			}
			if err != nil || cut.Status != ledger.RunCancelled || cut.Reason != how+" by message "+second.MessageID || cut.RunID == second.RunID {
				t.Fatalf("the cut run: %+v %v", cut, err)
			}
			var end *ledger.RunEnd
			var partial *ledger.Step
			var overlap string
			for _, e := range hs.Events("s") {
				if e.RunID == cut.RunID && e.RunEnd != nil {
					end = e.RunEnd
				}
				if e.RunID == cut.RunID && e.Step != nil {
					partial = e.Step
				}
				if e.Input != nil && e.Input.MessageID == second.MessageID {
					overlap = e.Input.Overlap
				}
			}
			if end == nil || end.RolledBack != tc.rolledBack {
				t.Errorf("the cut run's end: %+v, want rolled back %v", end, tc.rolledBack)
			}
			if partial == nil || !partial.Partial || partial.Text != "thinking about it" {
				t.Errorf("the cut run's partial step: %+v", partial)
			}
			if want := string(tc.send); want == "" && overlap != string(tc.agent) || want != "" && overlap != want {
				t.Errorf("the message's overlap %q", overlap)
			}
			// What the model saw when it answered the second message.
			var seen []string
			for _, msg := range m.Requests()[m.RequestCount()-1].Messages {
				seen = append(seen, string(msg.Role)+":"+msg.Text())
			}
			got := strings.Join(seen, " | ")
			sawCut := strings.Contains(got, "stall please") && strings.Contains(got, "thinking about it")
			if sawCut != tc.modelSeesCut || !strings.HasPrefix(got, "user:hello | assistant:You said: hello") || !strings.HasSuffix(got, "user:second") {
				t.Errorf("the model saw %q; want the cut turn seen: %v", got, tc.modelSeesCut)
			}
			// Session.Messages is what the model sees next: what it saw
			// then, and its answer.
			msgs, err := sess.Messages(ctx)
			var next []string
			for _, msg := range msgs {
				next = append(next, string(msg.Role)+":"+msg.Text())
			}
			if want := got + " | assistant:You said: second"; err != nil || strings.Join(next, " | ") != want {
				t.Errorf("Session.Messages: %q (%v), want %q", strings.Join(next, " | "), err, want)
			}
			// The transcript keeps the cut turn either way.
			tr, _ := sess.Transcript(ctx)
			var texts []string
			for _, it := range tr.Items {
				texts = append(texts, it.Text)
			}
			if all := strings.Join(texts, "|"); !strings.Contains(all, "stall please") || !strings.Contains(all, "thinking about it") {
				t.Errorf("the transcript lost the cut turn: %q", all)
			}
		})
	}
}

// TestOverlapInterruptParked: a message sent with overlap interrupt to a
// session whose run waits for an approval ends that run (its request
// denied, its call answered as cancelled) and is answered by a new run;
// the inbox no longer lists the request.
func TestOverlapInterruptParked(t *testing.T) {
	ctx := context.Background()
	var published atomic.Int64
	hs := approvalHost(t, memory.New(), host.Agent{Tools: []host.Tool{publishTool(&published)}, Overlap: host.OverlapInterrupt},
		hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
	sess := hs.Host.Session("s")
	parked, err := sess.Send(ctx, "publish it", host.SendOptions{})
	if err != nil || parked.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", parked, err)
	}
	res, err := sess.Send(ctx, "never mind", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted || res.RunID == parked.RunID {
		t.Fatalf("the interrupting message: %+v %v", res, err)
	}
	a := ledger.Approvals(hs.Events("s"), parked.RunID)
	if len(a) != 1 || a[0].State != ledger.ApprovalDenied || !a[0].Answered || published.Load() != 0 {
		t.Errorf("the parked run's request: %+v, published %d", a, published.Load())
	}
	if inbox, err := hs.Host.PendingApprovals(ctx); err != nil || len(inbox) != 0 {
		t.Errorf("the inbox: %+v %v", inbox, err)
	}
	view, _ := ledger.ProjectRun(hs.Events("s"), parked.RunID)
	if view.Status != ledger.RunCancelled || !strings.HasPrefix(view.Reason, "interrupted by a new message") {
		t.Errorf("the parked run ended %s: %s", view.Status, view.Reason)
	}
}

// TestOverlapInterruptAcrossHosts: a message sent through host B with
// overlap interrupt stops the run streaming on host A at once (A watches
// the ledger), and is answered by a run of its own.
func TestOverlapInterruptAcrossHosts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{ChunkSize: 1, Respond: func(req fakemodel.Request) fakemodel.Reply {
		if strings.HasPrefix(lastUser(req), "stall") {
			return fakemodel.Reply{Text: "thinking about it", Fault: &fakemodel.Fault{Kind: fakemodel.FaultStall, After: 1}}
		}
		return fakemodel.DefaultReply(req)
	}})
	storeA, storeB := mhOpen(t, srv.URL()), mhOpen(t, srv.URL())
	hostA := mhHost(t, storeA, "host-a", model.URL())
	hostB := mhHost(t, storeB, "host-b", model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := hostA.Session("s").Start(ctx, "stall there", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Host A's pass streams, then stalls, once the model was asked.
	for model.RequestCount() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	res, err := hostB.Session("s").Send(ctx, "second", host.SendOptions{Overlap: host.OverlapInterrupt})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: second" {
		t.Fatalf("B's interrupting message: %+v %v", res, err)
	}
	cut, err := first.Wait(ctx)
	if err != nil || cut.Status != ledger.RunCancelled || cut.Reason != "interrupted by message "+res.MessageID {
		t.Fatalf("A's run: %+v %v", cut, err)
	}
}
