package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// subFixture is a parent agent that hands one task to a child agent,
// "researcher", whose run calls count (once), then block (which waits for
// the fixture's release, or its context), then answers.
type subFixture struct {
	counted, blocked atomic.Int32
	entered          chan struct{} // gets a value each time block starts
	release          chan struct{} // closed: block returns at once
	releaseOnce      sync.Once
	model            *hosttest.Model
}

func newSubFixture() *subFixture {
	f := &subFixture{entered: make(chan struct{}, 8), release: make(chan struct{})}
	f.model = &hosttest.Model{Respond: func(req model.Request) hosttest.Reply {
		var results []string
		for _, m := range req.Messages {
			if m.Role == ledger.RoleTool {
				results = append(results, m.Text())
			}
		}
		switch req.Model {
		case "test/parent":
			if len(results) == 0 {
				return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "researcher", Arguments: `{"task":"find the answer"}`}}}
			}
			return hosttest.Reply{Text: "parent heard: " + results[len(results)-1]}
		case "test/child":
			switch len(results) {
			case 0:
				return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "count"}}}
			case 1:
				return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "block"}}}
			}
			return hosttest.Reply{Text: "the answer is 42"}
		}
		return hosttest.Reply{Text: "unknown model " + req.Model}
	}}
	return f
}

func (f *subFixture) child(maxSteps int) host.Agent {
	return host.Agent{Name: "researcher", Model: "test/child", MaxSteps: maxSteps, Tools: []host.Tool{
		host.NewTool(host.ToolSpec{Name: "count", Effect: host.EffectWrite}, func(ctx context.Context, c host.ToolCall) (host.ToolResult, error) {
			f.counted.Add(1)
			return host.ToolResult{Output: "counted"}, nil
		}),
		host.NewTool(host.ToolSpec{Name: "block", Effect: host.EffectWrite}, func(ctx context.Context, c host.ToolCall) (host.ToolResult, error) {
			f.blocked.Add(1)
			f.entered <- struct{}{}
			select {
			case <-f.release:
				return host.ToolResult{Output: "unblocked"}, nil
			case <-ctx.Done():
				return host.ToolResult{}, ctx.Err()
			}
		}),
	}}
}

func (f *subFixture) parent(t *testing.T, child host.Agent) host.Agent {
	t.Helper()
	tool, err := host.NewDelegateTool(host.Delegate{Agent: child})
	if err != nil {
		t.Fatal(err)
	}
	return host.Agent{Name: "lead", Model: "test/parent", Tools: []host.Tool{tool}}
}

func (f *subFixture) unblock() { f.releaseOnce.Do(func() { close(f.release) }) }

// agentFor picks the agent of a session: child sessions (whose id the
// delegate derives with a dot) run the child.
func (f *subFixture) agentFor(parent, child host.Agent) func(context.Context, string) (host.Agent, error) {
	return func(_ context.Context, id string) (host.Agent, error) {
		if strings.Contains(id, ".") {
			return child, nil
		}
		return parent, nil
	}
}

// subStores are the storages the sub-agent tests run on: each opens a
// fresh handle on one storage each time it is called.
func subStores() map[string]func(t *testing.T) func() storage.Storage {
	return map[string]func(t *testing.T) func() storage.Storage{
		"file": func(t *testing.T) func() storage.Storage {
			dir := t.TempDir()
			return func() storage.Storage {
				st, err := file.Open(dir, file.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		},
		"redis": func(t *testing.T) func() storage.Storage {
			rs := redistest.Start(t, redistest.Options{})
			return func() storage.Storage { return subRedis(t, rs.URL()) }
		},
		"redis-cluster": func(t *testing.T) func() storage.Storage {
			c := redistest.StartCluster(t, 3)
			return func() storage.Storage { return subRedis(t, "redis+cluster://"+strings.Join(c.Addrs(), ",")) }
		},
	}
}

func subRedis(t *testing.T, url string) storage.Storage {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.Open(ctx, url, redis.Options{WatchBlock: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// firstCall returns the id of the first tool call in events.
func firstCall(t *testing.T, events []ledger.Event) string {
	t.Helper()
	for _, e := range events {
		if e.Step != nil && len(e.Step.ToolCalls) > 0 {
			return e.Step.ToolCalls[0].ID
		}
	}
	t.Fatalf("no tool call: %s", hosttest.Kinds(events))
	return ""
}

// childOf returns the child session the parent's ledger links (the
// delegate call's result Source), failing the test when there is none.
func childOf(t *testing.T, events []ledger.Event) string {
	t.Helper()
	for _, e := range events {
		if r := e.ToolResult; r != nil && strings.HasPrefix(r.Source, host.DelegateSourcePrefix) {
			_, id, _ := strings.Cut(strings.TrimPrefix(r.Source, host.DelegateSourcePrefix), "/")
			return id
		}
	}
	t.Fatalf("the parent's ledger links no child session: %s", hosttest.Kinds(events))
	return ""
}

// TestDelegate: a parent's call of a sub-agent starts one run of it in a
// child session linked both ways, and the child's answer is the call's
// result; the child's MaxSteps is cut to what is left of the parent's.
func TestDelegate(t *testing.T) {
	for name, mk := range subStores() {
		t.Run(name, func(t *testing.T) {
			f := newSubFixture()
			f.unblock()
			store := mk(t)()
			child := f.child(0)
			parent := f.parent(t, child)
			parent.MaxSteps = 4
			hs := hosttest.New(t, host.Options{Storage: store, Model: f.model, Agent: parent})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := hs.Host.Session("boss").Send(ctx, "ask the researcher", host.SendOptions{RequestID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != ledger.RunCompleted || res.Text != "parent heard: the answer is 42" {
				t.Fatalf("parent: %s %q (%s)", res.Status, res.Text, res.Reason)
			}
			pe := hs.Events("boss")
			childID := childOf(t, pe)
			if childID != host.ChildSessionID("boss", firstCall(t, pe)) {
				t.Fatalf("child session %q is not ChildSessionID of the call", childID)
			}
			ce := hs.Events(childID)
			var inputs []*ledger.Input
			var starts []*ledger.RunStart
			for _, e := range ce {
				if e.Input != nil {
					inputs = append(inputs, e.Input)
				}
				if e.RunStart != nil {
					starts = append(starts, e.RunStart)
				}
			}
			if len(inputs) != 1 || len(starts) != 1 {
				t.Fatalf("child: %d inputs, %d run-starts; want 1 and 1: %s", len(inputs), len(starts), hosttest.Kinds(ce))
			}
			p := inputs[0].Parent
			if p == nil || p.SessionID != "boss" || p.RunID != res.RunID || p.CallID != firstCall(t, pe) || p.Agent != "lead" {
				t.Fatalf("child's input names parent %+v; want boss, run %s", p, res.RunID)
			}
			// The parent's call was its first of 4 steps: 3 are left.
			if starts[0].MaxSteps != 3 {
				t.Fatalf("child's MaxSteps %d, want 3 (what is left of the parent's 4)", starts[0].MaxSteps)
			}
			if f.counted.Load() != 1 || f.blocked.Load() != 1 {
				t.Fatalf("child's tools ran %d and %d times, want once each", f.counted.Load(), f.blocked.Load())
			}
		})
	}
}

// TestDelegateCrash: a host that stops while the child works (as a crash
// leaves them: both runs interrupted) is followed by one whose boot sweep
// resumes both: the parent's call, made again, finds the child run it
// started (no second message, no second run, and no second admission:
// DelegateLimits.Admit is asked once), which goes on from where its
// ledger stopped — its finished tool not run again — and the parent gets
// its answer, once.
func TestDelegateCrash(t *testing.T) {
	for name, mk := range subStores() {
		t.Run(name, func(t *testing.T) {
			f := newSubFixture()
			open := mk(t)
			child := f.child(0)
			parent := f.parent(t, child)
			var admits atomic.Int32
			limits := host.DelegateLimits{Admit: func(context.Context, string) (func(), error) {
				admits.Add(1)
				return func() {}, nil
			}}
			h1, err := host.New(host.Options{Storage: open(), Model: f.model, Agent: parent, HostID: "h1", LeaseTTL: 2 * time.Second, Delegation: limits})
			if err != nil {
				t.Fatal(err)
			}
			r, err := h1.Session("boss").Start(context.Background(), "ask the researcher", host.StartOptions{RequestID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			<-f.entered // the child's block runs
			// A Close whose context has ended stops the runs at once,
			// recording nothing more: as a crash leaves them.
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			h1.Close(cctx)
			if _, err := r.Wait(context.Background()); !errors.Is(err, host.ErrClosed) {
				t.Fatalf("parent's run after Close: %v, want ErrClosed", err)
			}
			f.unblock()

			resumed := make(chan string, 4)
			store := open()
			h2, err := host.New(host.Options{Storage: store, Model: f.model, Agent: parent, HostID: "h2", LeaseTTL: 2 * time.Second, Delegation: limits,
				AutoResume: &host.AutoResume{AgentFor: f.agentFor(parent, child), Interval: -1,
					OnResumed: func(id string, res host.RunResult, err error) { resumed <- id }}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				h2.Close(ctx)
			})
			ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel2()
			res, err := h2.Session("boss").Send(ctx, "ask the researcher", host.SendOptions{RequestID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != ledger.RunCompleted || res.Text != "parent heard: the answer is 42" {
				t.Fatalf("parent: %s %q (%s)", res.Status, res.Text, res.Reason)
			}
			pe := hosttest.Load(t, store, "boss")
			childID := childOf(t, pe)
			ce := hosttest.Load(t, store, childID)
			if n, m := hosttest.CountKind(ce, ledger.KindInput), hosttest.CountKind(ce, ledger.KindRunStart); n != 1 || m != 1 {
				t.Fatalf("child: %d inputs, %d run-starts; want 1 and 1: %s", n, m, hosttest.Kinds(ce))
			}
			if n := hosttest.CountKind(pe, ledger.KindInput); n != 1 {
				t.Fatalf("parent: %d inputs, want 1", n)
			}
			if f.counted.Load() != 1 {
				t.Fatalf("the child's count ran %d times, want once", f.counted.Load())
			}
			if n := admits.Load(); n != 1 {
				t.Fatalf("the child was admitted %d times, want once (the call made again finds its task)", n)
			}
			// block ran twice: its first run was cut before it had a
			// result (as a crash cuts it), and it is a write tool, so the
			// resumed child ran it again.
			if f.blocked.Load() != 2 {
				t.Fatalf("the child's block ran %d times, want 2", f.blocked.Load())
			}
			var results int
			for _, e := range pe {
				if e.ToolResult != nil {
					results++
				}
			}
			if results != 1 {
				t.Fatalf("parent: %d tool results, want 1", results)
			}
			ends := 0
			for _, e := range ce {
				if e.RunEnd != nil && e.RunEnd.Status == ledger.RunCompleted {
					ends++
				}
			}
			if ends != 1 {
				t.Fatalf("child: %d completed run-ends, want 1: %s", ends, hosttest.Kinds(ce))
			}
		})
	}
}

// TestDelegateCancel: cancelling the parent's run cancels the child's.
func TestDelegateCancel(t *testing.T) {
	f := newSubFixture()
	child := f.child(0)
	parent := f.parent(t, child)
	hs := hosttest.New(t, host.Options{Model: f.model, Agent: parent})
	r, err := hs.Host.Session("boss").Start(context.Background(), "ask the researcher", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-f.entered
	if !hs.Host.Cancel("boss", "enough") {
		t.Fatal("Cancel found no run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunCancelled {
		t.Fatalf("parent: %s, want cancelled", res.Status)
	}
	childID := childOf(t, hs.Events("boss"))
	ce := hosttest.WaitLedger(t, hs.Store, childID, 20*time.Second, "the child's run-end", func(ev []ledger.Event) bool {
		return hosttest.CountKind(ev, ledger.KindRunEnd) > 0
	})
	for _, e := range ce {
		if e.RunEnd != nil && e.RunEnd.Status != ledger.RunCancelled {
			t.Fatalf("child ended %s (%s), want cancelled", e.RunEnd.Status, e.RunEnd.Reason)
		}
	}
}

// TestDelegateApproval: a child that parks on an approval surfaces it in
// the host's inbox; deciding it continues the child, whose answer then
// answers the parent's call.
func TestDelegateApproval(t *testing.T) {
	f := newSubFixture()
	f.unblock()
	child := f.child(0)
	child.ToolApprovals = map[string]host.ApprovalMode{"count": host.ApproveAsk}
	parent := f.parent(t, child)
	hs := hosttest.New(t, host.Options{Model: f.model, Agent: parent})
	r, err := hs.Host.Session("boss").Start(context.Background(), "ask the researcher", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := hosttest.WaitLedger(t, hs.Store, "boss", 20*time.Second, "the delegate call", func(ev []ledger.Event) bool {
		return hosttest.CountKind(ev, ledger.KindStep) > 0
	})
	cid := host.ChildSessionID("boss", firstCall(t, events))
	hosttest.WaitLedger(t, hs.Store, cid, 20*time.Second, "the child's approval request", func(ev []ledger.Event) bool {
		return hosttest.CountKind(ev, ledger.KindApprovalRequest) > 0
	})
	pending, err := hs.Host.PendingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].SessionID != cid {
		t.Fatalf("inbox: %+v; want the child's one request", pending)
	}
	// The parent's status and stream show the child's request.
	st, err := hs.Host.Session("boss").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != host.StateApprovalRequired || len(st.Approvals) != 1 || st.Approvals[0].ApprovalID != pending[0].ApprovalID || st.Approvals[0].SessionID != cid {
		t.Fatalf("parent's status: %s %+v; want approval_required with the child's request", st.State, st.Approvals)
	}
	sub := r.Subscribe(0)
	defer sub.Close()
	for {
		p, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == host.ProgressApprovalRequested {
			if p.Approval.ApprovalID != pending[0].ApprovalID || p.Approval.SessionID != cid {
				t.Fatalf("parent's stream: %+v", p.Approval)
			}
			break
		}
	}
	if _, err := hs.Host.Session(pending[0].SessionID).Decide(ctx, pending[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == host.ProgressApprovalDecided {
			if p.Approval.ApprovalID != pending[0].ApprovalID || p.Approval.State != ledger.ApprovalApproved {
				t.Fatalf("parent's stream: %+v", p.Approval)
			}
			break
		}
	}
	res, err := r.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunCompleted || res.Text != "parent heard: the answer is 42" {
		t.Fatalf("parent: %s %q (%s)", res.Status, res.Text, res.Reason)
	}
	if f.counted.Load() != 1 {
		t.Fatalf("count ran %d times, want once", f.counted.Load())
	}
}

// TestDelegateBadInput: a call without a task is an error result, and
// starts no child.
func TestDelegateBadInput(t *testing.T) {
	tool, err := host.NewDelegateTool(host.Delegate{Agent: host.Agent{Name: "researcher", Model: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s", Name: "researcher", Input: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("a call without a task did not fail")
	}
	if _, err := host.NewDelegateTool(host.Delegate{Agent: host.Agent{Name: "x"}}); err == nil {
		t.Fatal("an agent without a model was accepted")
	}
	long := strings.Repeat("s", 120)
	if id := host.ChildSessionID(long, "call_1"); !storage.ValidSessionID(id) || id == host.ChildSessionID(long, "call_2") {
		t.Fatalf("ChildSessionID of a long parent: %q", id)
	}
}

// TestDelegateCrashWhileParked: a host that stops while the child waits
// for an approval is followed by one whose sweep resumes the parent; its
// call, made again, finds the parked child, and the parent shows the
// child's request. Deciding it (on the new host) continues the child with
// the child's agent, then the parent; nothing ran twice.
func TestDelegateCrashWhileParked(t *testing.T) {
	for name, mk := range subStores() {
		if name == "redis-cluster" {
			continue // the crash test covers the cluster
		}
		t.Run(name, func(t *testing.T) {
			f := newSubFixture()
			f.unblock()
			open := mk(t)
			child := f.child(0)
			child.ToolApprovals = map[string]host.ApprovalMode{"count": host.ApproveAsk}
			parent := f.parent(t, child)
			h1, err := host.New(host.Options{Storage: open(), Model: f.model, Agent: parent, HostID: "h1", LeaseTTL: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			store := open()
			if _, err := h1.Session("boss").Start(context.Background(), "ask the researcher", host.StartOptions{RequestID: "r1"}); err != nil {
				t.Fatal(err)
			}
			pe := hosttest.WaitLedger(t, store, "boss", 20*time.Second, "the delegate call", func(ev []ledger.Event) bool {
				return hosttest.CountKind(ev, ledger.KindStep) > 0
			})
			cid := host.ChildSessionID("boss", firstCall(t, pe))
			hosttest.WaitLedger(t, store, cid, 20*time.Second, "the child's approval request", func(ev []ledger.Event) bool {
				return hosttest.CountKind(ev, ledger.KindApprovalRequest) > 0
			})
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			h1.Close(cctx)

			h2, err := host.New(host.Options{Storage: store, Model: f.model, Agent: parent, HostID: "h2", LeaseTTL: 2 * time.Second,
				AutoResume: &host.AutoResume{AgentFor: f.agentFor(parent, child), Interval: -1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				h2.Close(ctx)
			})
			ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel2()
			pending, err := h2.PendingApprovals(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != 1 || pending[0].SessionID != cid {
				t.Fatalf("inbox: %+v; want the child's one request", pending)
			}
			if _, err := h2.Session(cid).Decide(ctx, pending[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "ops"}); err != nil {
				t.Fatal(err)
			}
			res, err := h2.Session("boss").Send(ctx, "ask the researcher", host.SendOptions{RequestID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != ledger.RunCompleted || res.Text != "parent heard: the answer is 42" {
				t.Fatalf("parent: %s %q (%s)", res.Status, res.Text, res.Reason)
			}
			ce := hosttest.Load(t, store, cid)
			if n, m := hosttest.CountKind(ce, ledger.KindInput), hosttest.CountKind(ce, ledger.KindRunStart); n != 1 || m != 1 {
				t.Fatalf("child: %d inputs, %d run-starts; want 1 and 1: %s", n, m, hosttest.Kinds(ce))
			}
			if f.counted.Load() != 1 || f.blocked.Load() != 1 {
				t.Fatalf("the child's tools ran %d and %d times, want once each", f.counted.Load(), f.blocked.Load())
			}
		})
	}
}

// TestDelegateTrace: the child's run span names the parent's call and
// links the call's span and the parent run's trace; the call's span names
// the child session by its source.
func TestDelegateTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	f := newSubFixture()
	f.unblock()
	child := f.child(0)
	hs := hosttest.New(t, host.Options{Model: f.model, Agent: f.parent(t, child), Telemetry: &host.Telemetry{TracerProvider: tp}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := hs.Host.Session("boss").Send(ctx, "ask the researcher", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	cid := childOf(t, hs.Events("boss"))
	var call, childRun sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		switch {
		case s.Name() == "execute_tool researcher":
			call = s
			if attrs["agentic.tool.source"] != "agent:researcher/"+cid {
				t.Errorf("the call's span: source %q", attrs["agentic.tool.source"])
			}
		case s.Name() == "invoke_agent researcher":
			childRun = s
			if attrs["agentic.parent.session.id"] != "boss" || attrs["agentic.parent.run.id"] != res.RunID || attrs["agentic.session.id"] != cid {
				t.Errorf("the child's run span: %v", attrs)
			}
		}
	}
	if call == nil || childRun == nil {
		t.Fatalf("spans: call %v, child run %v", call != nil, childRun != nil)
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range childRun.Links() {
		linked[l.SpanContext.SpanID()] = true
		if l.SpanContext.TraceID().String() == host.TraceIDOf(res.RunID) {
			linked[trace.SpanID{}] = true
		}
	}
	if !linked[call.SpanContext().SpanID()] || !linked[trace.SpanID{}] {
		t.Errorf("the child's run span links %v; want the call's span and the parent run's trace", childRun.Links())
	}
}

// TestDelegateDrain: a graceful shutdown while the child works stops the
// child at its step boundary and leaves the parent's call unanswered (as a
// crash would), rather than answer it with the shutdown's error; the next
// host resumes both, with one child run.
func TestDelegateDrain(t *testing.T) {
	f := newSubFixture()
	dir := t.TempDir()
	open := func() storage.Storage {
		st, err := file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	child := f.child(0)
	parent := f.parent(t, child)
	h1, err := host.New(host.Options{Storage: open(), Model: f.model, Agent: parent, HostID: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h1.Session("boss").Start(context.Background(), "ask the researcher", host.StartOptions{RequestID: "r1"}); err != nil {
		t.Fatal(err)
	}
	<-f.entered
	h1.Drain()
	f.unblock() // the child's step ends; it stops at the boundary
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	store := open()
	pe := hosttest.Load(t, store, "boss")
	if n := hosttest.CountKind(pe, ledger.KindToolResult); n != 0 {
		t.Fatalf("the parent's call was answered by the shutdown: %s", hosttest.Kinds(pe))
	}
	h2, err := host.New(host.Options{Storage: store, Model: f.model, Agent: parent, HostID: "h2",
		AutoResume: &host.AutoResume{AgentFor: f.agentFor(parent, child), Interval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h2.Close(ctx)
	})
	res, err := h2.Session("boss").Send(ctx, "ask the researcher", host.SendOptions{RequestID: "r1"})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "parent heard: the answer is 42" {
		t.Fatalf("parent: %+v %v", res, err)
	}
	ce := hosttest.Load(t, store, childOf(t, hosttest.Load(t, store, "boss")))
	if n, m := hosttest.CountKind(ce, ledger.KindInput), hosttest.CountKind(ce, ledger.KindRunStart); n != 1 || m != 1 {
		t.Fatalf("child: %d inputs, %d run-starts: %s", n, m, hosttest.Kinds(ce))
	}
	if f.counted.Load() != 1 || f.blocked.Load() != 1 {
		t.Fatalf("the child's tools ran %d and %d times, want once each", f.counted.Load(), f.blocked.Load())
	}
}

// TestDelegateTotalTimeoutCut: a child's Timeouts.Total is cut to what is
// left of its parent's: the parent has ten minutes, the child's agent two
// hours, and the child's tool call runs within the parent's ten minutes
// (its context's deadline), not the child's two hours.
func TestDelegateTotalTimeoutCut(t *testing.T) {
	f := newSubFixture()
	f.unblock()
	var deadline atomic.Value // time.Time of the child's count call
	child := host.Agent{Name: "researcher", Model: "test/child", Timeouts: host.AgentTimeouts{Total: 2 * time.Hour, Tool: 2 * time.Hour},
		Tools: []host.Tool{
			host.NewTool(host.ToolSpec{Name: "count"}, func(ctx context.Context, c host.ToolCall) (host.ToolResult, error) {
				if dl, ok := ctx.Deadline(); ok {
					deadline.Store(dl)
				}
				return host.ToolResult{Output: "counted"}, nil
			}),
			host.NewTool(host.ToolSpec{Name: "block"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
				return host.ToolResult{Output: "unblocked"}, nil
			}),
		}}
	parent := f.parent(t, child)
	parent.Timeouts = host.AgentTimeouts{Total: 10 * time.Minute, Tool: 3 * time.Hour}
	hs := hosttest.New(t, host.Options{Model: f.model, Agent: parent})
	start := time.Now()
	res, err := hs.Host.Session("boss").Send(context.Background(), "ask the researcher", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("parent: %+v, %v", res, err)
	}
	dl, ok := deadline.Load().(time.Time)
	if !ok {
		t.Fatal("the child's tool call had no deadline")
	}
	if left := dl.Sub(start); left > 10*time.Minute+10*time.Second || left < 9*time.Minute {
		t.Errorf("the child's tool call had %v, want what was left of the parent's 10 minutes (not the child's 2 hours)", left)
	}
}

// TestDelegateCallTimeout: a delegate call's own timeout is Delegate.Timeout;
// without one, the child agent's total timeout, else its approval TTL (the
// call may wait for a person deciding on the child's request); never
// negative.
func TestDelegateCallTimeout(t *testing.T) {
	for _, c := range []struct {
		name string
		d    host.Delegate
		want time.Duration
	}{
		{"the approval TTL by default", host.Delegate{Agent: host.Agent{Name: "a", Model: "m"}}, host.DefaultApprovalTTL},
		{"the child's approval TTL", host.Delegate{Agent: host.Agent{Name: "a", Model: "m", ApprovalTTL: time.Hour}}, time.Hour},
		{"the child's total timeout", host.Delegate{Agent: host.Agent{Name: "a", Model: "m", ApprovalTTL: time.Hour, Timeouts: host.AgentTimeouts{Total: time.Minute}}}, time.Minute},
		{"its own", host.Delegate{Agent: host.Agent{Name: "a", Model: "m", Timeouts: host.AgentTimeouts{Total: time.Minute}}, Timeout: 5 * time.Second}, 5 * time.Second},
	} {
		tool, err := host.NewDelegateTool(c.d)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := tool.Spec().Timeout; got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := host.NewDelegateTool(host.Delegate{Agent: host.Agent{Name: "a", Model: "m"}, Timeout: -time.Second}); err == nil {
		t.Error("a negative Timeout was accepted")
	}
}
