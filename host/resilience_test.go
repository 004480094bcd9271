package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// fastRetry retries quickly and caps the fake model's Retry-After (2s).
func fastRetry(o *host.Options) {
	o.Retry = model.RetryPolicy{MaxAttempts: 12, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, MaxRetryAfter: 5 * time.Millisecond}
}

func TestRetryAfterPartialTextDoesNotDuplicate(t *testing.T) {
	const text = "one two three four five six seven eight nine ten"
	hs := newHarness(t, fakemodel.Options{ChunkSize: 1, Script: []fakemodel.Reply{
		{Text: text, Fault: &fakemodel.Fault{Kind: fakemodel.FaultErrorChunk, After: 4}},
	}}, host.Agent{}, fastRetry)
	var shown []rune // what a client following the protocol displays
	var retries []host.Progress
	res, err := hs.host.Session("r").Send(context.Background(), "count", host.SendOptions{OnProgress: func(p host.Progress) {
		switch p.Type {
		case host.ProgressText:
			if p.Offset != len(shown) {
				t.Errorf("text offset %d, client has %d runes", p.Offset, len(shown))
			}
			shown = append(shown, []rune(p.Delta)...)
		case host.ProgressRetry:
			retries = append(retries, p)
			if p.Retry.Reset {
				shown = shown[:0]
			}
		}
	}})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != text {
		t.Fatalf("%+v %v", res, err)
	}
	if string(shown) != text {
		t.Errorf("the client shows %q, want %q", string(shown), text)
	}
	if len(retries) != 1 || !retries[0].Retry.Reset || retries[0].Retry.Attempt != 1 || retries[0].ResponseID != res.ResponseID {
		t.Fatalf("retry progress = %+v", retries)
	}
	evs := hs.events("r")
	if got, want := kinds(evs), "input run-start retry step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if r := evs[2].Retry; r.ResponseID != res.ResponseID || r.Attempt != 1 || !strings.Contains(r.Reason, "mid-stream") {
		t.Errorf("retry event = %+v", r)
	}
	tr, _ := hs.host.Session("r").Transcript(context.Background())
	if len(tr.Items) != 2 || tr.Items[1].Text != text {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

func TestRetryAfterHeaderWins(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{Text: "ok", Fault: &fakemodel.Fault{Kind: fakemodel.FaultRateLimit, RetryAfter: "1"}},
	}}, host.Agent{}, func(o *host.Options) {
		o.Retry = model.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	})
	start := time.Now()
	res, err := hs.host.Session("ra").Send(context.Background(), "hi", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %s; the server asked for 1s", waited)
	}
	if r := hs.events("ra")[2].Retry; r == nil || r.DelayMS != 1000 {
		t.Errorf("retry event = %+v, want a 1000ms delay", r)
	}
}

func TestFatalFailsFastWithOneRequest(t *testing.T) {
	for _, f := range []fakemodel.FaultKind{fakemodel.FaultNoCredits, fakemodel.FaultUnauthorized, fakemodel.FaultContextOverflow} {
		t.Run(f.String(), func(t *testing.T) {
			hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{Text: "never", Fault: &fakemodel.Fault{Kind: f}}}}, host.Agent{}, fastRetry)
			res, err := hs.host.Session("f").Send(context.Background(), "hi", host.SendOptions{})
			if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "not retried") {
				t.Fatalf("%+v %v", res, err)
			}
			if n := hs.model.RequestCount(); n != 1 {
				t.Errorf("requests = %d, want exactly 1", n)
			}
		})
	}
}

func TestRetriesRunOut(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{FaultRate: 1, FaultKinds: []fakemodel.FaultKind{fakemodel.FaultServerError}}, host.Agent{},
		func(o *host.Options) {
			o.Retry = model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
		})
	res, err := hs.host.Session("o").Send(context.Background(), "hi", host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "gave up after 3 attempts") {
		t.Fatalf("%+v %v", res, err)
	}
	if n := hs.model.RequestCount(); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}

// TestChaos: 200 runs against the fake model with 30% injected faults of
// every transient kind all complete with exactly the scripted text.
func TestChaos(t *testing.T) {
	kinds := []fakemodel.FaultKind{fakemodel.FaultRateLimit, fakemodel.FaultServerError, fakemodel.FaultBadGateway,
		fakemodel.FaultNoProvider, fakemodel.FaultDrop, fakemodel.FaultSever, fakemodel.FaultStall,
		fakemodel.FaultErrorChunk, fakemodel.FaultNoFinish, fakemodel.FaultFinishError}
	var calls atomic.Int32
	hs := newHarness(t, fakemodel.Options{FaultRate: 0.3, FaultKinds: kinds, Seed: 42, ChunkSize: 2},
		host.Agent{Tools: []host.Tool{counterTool("lookup", &calls)}}, fastRetry)
	const runs, workers = 200, 4
	var wg sync.WaitGroup
	var completed atomic.Int32
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < runs; i += workers {
				session := fmt.Sprintf("chaos-%d", i%20)
				msg := fmt.Sprintf("message %d with some words to stream", i)
				want := "You said: " + msg
				if i%5 == 0 { // some runs use a tool: two passes
					msg = fmt.Sprintf("lookup q=item%d", i)
					want = fmt.Sprintf(`The lookup tool returned: {"echo":{"q":"item%d"}}`, i)
				}
				var shown []rune
				res, err := hs.host.Session(session).Send(context.Background(), msg, host.SendOptions{OnProgress: func(p host.Progress) {
					switch {
					case p.Type == host.ProgressResponseStart:
						shown = shown[:0]
					case p.Type == host.ProgressText:
						shown = append(shown, []rune(p.Delta)...)
					case p.Type == host.ProgressRetry && p.Retry.Reset:
						shown = shown[:0]
					}
				}})
				if err != nil || res.Status != ledger.RunCompleted || res.Text != want {
					t.Errorf("run %d: %+v %v", i, res, err)
					continue
				}
				if string(shown) != want {
					t.Errorf("run %d: the client shows %q, want %q", i, string(shown), want)
				}
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	if completed.Load() != runs {
		t.Fatalf("%d of %d runs completed", completed.Load(), runs)
	}
	retries := 0
	for s := range 20 {
		evs := hs.events(fmt.Sprintf("chaos-%d", s))
		tr := ledger.ProjectSession("", evs)
		for _, it := range tr.Items {
			if it.Kind == ledger.ItemResponse && it.Status != ledger.StatusCompleted {
				t.Errorf("item %+v not completed", it)
			}
		}
		for _, e := range evs {
			if e.Retry != nil {
				retries++
			}
		}
	}
	if retries < 30 {
		t.Errorf("only %d retries recorded; the faults were not injected", retries)
	}
	t.Logf("%d runs completed through %d retries (%d requests)", runs, retries, hs.model.RequestCount())
}

func TestHostCancel(t *testing.T) {
	long := strings.Repeat("slow ", 300)
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, Script: []fakemodel.Reply{{Text: long}}}, host.Agent{})
	if hs.host.Cancel("hc", "nothing runs") {
		t.Error("Cancel returned true with no run in flight")
	}
	var first, second atomic.Bool
	res, err := hs.host.Session("hc").Send(context.Background(), "talk", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText && p.Offset > 10 && !first.Load() {
			first.Store(hs.host.Cancel("hc", "user pressed stop"))
			second.Store(hs.host.Cancel("hc", "again"))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.Load() || second.Load() {
		t.Errorf("Cancel returned %v then %v, want true then false", first.Load(), second.Load())
	}
	if res.Status != ledger.RunCancelled || res.Reason != "user pressed stop" || res.Text == "" {
		t.Errorf("result = %+v", res)
	}
	if e := hs.events("hc"); e[len(e)-1].RunEnd.Reason != "user pressed stop" {
		t.Errorf("run-end = %+v", e[len(e)-1].RunEnd)
	}
}

// crashAfter is a store that refuses every append after the first n, like a
// process that died right there: what was appended is what a crash leaves.
type crashAfter struct {
	storage.Storage
	n atomic.Int32
}

func (c *crashAfter) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if c.n.Add(-1) < 0 {
		return errors.New("crashed")
	}
	return c.Storage.Append(ctx, id, evs...)
}

// crashThenResume runs a send that "dies" after n appends, then resumes it
// on a fresh host over the same store.
func crashThenResume(t *testing.T, n int32, script []fakemodel.Reply, agent host.Agent) (*harness, host.RunResult) {
	t.Helper()
	base := memory.New()
	crash := &crashAfter{Storage: base}
	crash.n.Store(n)
	hs := newHarness(t, fakemodel.Options{Script: script}, agent, func(o *host.Options) { o.Storage = crash })
	if res, err := hs.host.Session("c").Send(context.Background(), "go", host.SendOptions{}); err == nil {
		t.Fatalf("the crash did not happen: %+v", res)
	}
	h2 := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, hs.model), Agent: withModel(agent)}).Host
	res, err := h2.Resume(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	hs.store = base
	return hs, res
}

func mustClient(t *testing.T, srv *fakemodel.Server) *provider.Client {
	c, err := provider.New(provider.Config{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withModel(a host.Agent) host.Agent {
	if a.Model == "" {
		a.Model = "fake/echo"
	}
	return a
}

func TestResume(t *testing.T) {
	toolReply := []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{{Name: "act", Arguments: `{}`}}}, {Text: "finished"}}
	t.Run("died in the first pass", func(t *testing.T) {
		hs, res := crashThenResume(t, 1, []fakemodel.Reply{{Text: "first"}, {Text: "second"}}, host.Agent{})
		if res.Status != ledger.RunCompleted || res.Text != "second" {
			t.Fatalf("%+v", res)
		}
		evs := hs.events("c")
		if got, want := kinds(evs), "input run-start resume-attempt step run-end"; got != want {
			t.Fatalf("ledger = %q, want %q", got, want)
		}
		if evs[3].Step.ResponseID != evs[1].RunStart.ResponseID {
			t.Error("the resumed pass did not stream into the item minted before the crash")
		}
	})
	t.Run("died before the end", func(t *testing.T) {
		hs, res := crashThenResume(t, 2, []fakemodel.Reply{{Text: "done"}}, host.Agent{})
		if res.Status != ledger.RunCompleted || res.Text != "done" || hs.model.RequestCount() != 1 {
			t.Fatalf("%+v, requests %d", res, hs.model.RequestCount())
		}
	})
	for _, tc := range []struct {
		name       string
		effect     host.Effect
		idempotent bool
		appends    int32
		wantRuns   int32
		wantKinds  string
	}{
		// input+run-start, step; the read tool's result is lost: it runs again.
		{"read tool re-run", host.EffectRead, false, 2, 2, "input run-start step resume-attempt tool-result step run-end"},
		// input+run-start, step, tool-start; the result is lost.
		{"external not idempotent: outcome unknown", host.EffectExternal, false, 3, 1, "input run-start step tool-start resume-attempt tool-result step run-end"},
		{"external idempotent: re-run", host.EffectExternal, true, 3, 2, "input run-start step tool-start resume-attempt tool-start tool-result step run-end"},
		// The crash came before the tool-start: the tool never ran.
		{"external never started: runs", host.EffectExternal, false, 2, 1, "input run-start step resume-attempt tool-start tool-result step run-end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			var ids sync.Map
			act := host.NewTool(host.ToolSpec{Name: "act", Effect: tc.effect, Idempotent: tc.idempotent},
				func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
					runs.Add(1)
					ids.Store(c.ID, true)
					return host.ToolResult{Output: "acted"}, nil
				})
			hs, res := crashThenResume(t, tc.appends, toolReply, host.Agent{Tools: []host.Tool{act}, ToolApprovals: map[string]host.ApprovalMode{"act": host.ApproveAlways}})
			if res.Status != ledger.RunCompleted || res.Text != "finished" {
				t.Fatalf("%+v", res)
			}
			if runs.Load() != tc.wantRuns {
				t.Errorf("the tool ran %d times, want %d", runs.Load(), tc.wantRuns)
			}
			evs := hs.events("c")
			if got := kinds(evs); got != tc.wantKinds {
				t.Errorf("ledger = %q, want %q", got, tc.wantKinds)
			}
			var result *ledger.ToolResult
			for _, e := range evs {
				if e.ToolResult != nil {
					result = e.ToolResult
				}
			}
			unknown := strings.Contains(result.Output, "outcome")
			if unknown != (tc.effect == host.EffectExternal && !tc.idempotent && tc.appends == 3) {
				t.Errorf("result = %+v", result)
			}
			count := 0
			ids.Range(func(any, any) bool { count++; return true })
			if tc.wantRuns > 0 && count != 1 {
				t.Errorf("the tool saw %d distinct call ids, want 1 (the idempotency key is stable)", count)
			}
		})
	}
	t.Run("cancellation recorded, end not", func(t *testing.T) {
		base := memory.New()
		now := time.Now().UTC()
		evs := []ledger.Event{
			{ID: "e1", Kind: ledger.KindInput, Time: now, RunID: "run1", Input: &ledger.Input{MessageID: "m1", Parts: []ledger.Part{ledger.TextPart("hi")}}},
			{ID: "e2", Kind: ledger.KindRunStart, Time: now, RunID: "run1", RunStart: &ledger.RunStart{Inputs: []string{"m1"}, ResponseID: "r1"}},
			{ID: "e3", Kind: ledger.KindStep, Time: now, RunID: "run1", Step: &ledger.Step{ResponseID: "r1", Text: "par", Partial: true}},
		}
		if err := base.Append(context.Background(), "c", evs...); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = base })
		res, err := h.host.Resume(context.Background(), "c")
		if err != nil || res.Status != ledger.RunCancelled || res.Text != "par" {
			t.Fatalf("%+v %v", res, err)
		}
		if h.model.RequestCount() != 0 {
			t.Error("a cancelled run was re-driven")
		}
		if _, err := h.host.Resume(context.Background(), "c"); !errors.Is(err, host.ErrNothingToResume) {
			t.Errorf("second resume: %v", err)
		}
	})
}

func TestResumeActions(t *testing.T) {
	interrupted := func(t *testing.T) (*memory.Store, *fakemodel.Server) {
		base := memory.New()
		crash := &crashAfter{Storage: base}
		crash.n.Store(2)
		hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{Text: "dead pass", ToolCalls: []fakemodel.ToolCall{{Name: "lookup", Arguments: `{"q":"x"}`}}}}},
			host.Agent{Tools: []host.Tool{counterTool("lookup", new(atomic.Int32))}}, func(o *host.Options) { o.Storage = crash })
		hs.host.Session("a").Send(context.Background(), "do it", host.SendOptions{})
		return base, hs.model
	}
	t.Run("restart", func(t *testing.T) {
		base, model := interrupted(t)
		model.Enqueue(fakemodel.Reply{Text: "fresh answer"})
		h := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, model), Agent: host.Agent{Model: "m"}}).Host
		res, err := h.Session("a").Resume(context.Background(), host.ResumeOptions{Action: host.ActionRestart})
		if err != nil || res.Status != ledger.RunCompleted || res.Text != "fresh answer" {
			t.Fatalf("%+v %v", res, err)
		}
		reqs := model.Requests()
		for _, m := range reqs[len(reqs)-1].Messages {
			if strings.Contains(m.Text, "dead pass") {
				t.Error("the restarted run's model request still holds the dead run's pass")
			}
		}
		evs, _ := base.Load(context.Background(), "a")
		open := ledger.OpenRuns(evs)
		tr := ledger.ProjectSession("a", evs)
		// user, the dead run's pass, its interrupted next pass (failed),
		// the fresh answer.
		if len(open) != 0 || len(tr.Items) != 4 || tr.Items[2].Status != ledger.StatusFailed || tr.Items[3].Text != "fresh answer" {
			t.Errorf("open %v, transcript %+v", open, tr.Items)
		}
	})
	t.Run("fail", func(t *testing.T) {
		base, model := interrupted(t)
		h := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, model), Agent: host.Agent{Model: "m"}}).Host
		res, err := h.Session("a").Resume(context.Background(), host.ResumeOptions{Action: host.ActionFail})
		if err != nil || res.Status != ledger.RunFailed {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

// TestAutoResumeSweep: the boot sweep resumes every interrupted run, at
// most MaxConcurrent at once, leaves one past MaxAttempts to a manual
// resume, and resumes a run whose OnInterrupted hook panicked or erred
// (whatever action the erring hook named).
func TestAutoResumeSweep(t *testing.T) {
	base := memory.New()
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// Five interrupted sessions, three finished ones, one that failed
	// every resume so far, one whose hook panics.
	for i := range 10 {
		crash := &crashAfter{Storage: base}
		crash.n.Store(1)
		if i >= 5 && i < 8 {
			crash.n.Store(100)
		}
		h, _ := host.New(host.Options{Storage: crash, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"}})
		h.Session(fmt.Sprintf("s%d", i)).Send(context.Background(), fmt.Sprintf("hello %d", i), host.SendOptions{})
		h.Close(context.Background())
	}
	evs, _ := base.Load(context.Background(), "s8")
	run := ledger.OpenRuns(evs)[0]
	for a := 1; a <= 3; a++ {
		base.Append(context.Background(), "s8", ledger.Event{ID: fmt.Sprintf("ra%d", a), Kind: ledger.KindResumeAttempt,
			Time: time.Now().UTC(), RunID: run, ResumeAttempt: &ledger.ResumeAttempt{Attempt: a}})
	}
	var resumed sync.Map
	h := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"},
		AutoResume: &host.AutoResume{MaxConcurrent: 2, Stagger: time.Millisecond,
			OnInterrupted: func(_ context.Context, ir host.Interrupted) (host.ResumeAction, error) {
				switch ir.SessionID {
				case "s9":
					panic("hook bug")
				case "s4":
					return host.ActionFail, errors.New("the hook cannot decide") // an error: resume, whatever it said
				}
				return host.ActionResume, nil
			},
			OnResumed: func(id string, res host.RunResult, err error) { resumed.Store(id, res) },
		}}).Host
	select {
	case <-h.SweepDone():
	case <-time.After(30 * time.Second):
		t.Fatal("the boot sweep did not finish")
	}
	rep := h.LastSweep()
	if rep.Sessions != 10 || rep.Interrupted != 7 || rep.Resumed != 6 || rep.GaveUp != 1 || rep.Errors != 0 {
		t.Errorf("report = %+v", rep)
	}
	for _, i := range []int{0, 1, 2, 3, 4, 9} {
		v, ok := resumed.Load(fmt.Sprintf("s%d", i))
		if res, _ := v.(host.RunResult); !ok || res.Status != ledger.RunCompleted || res.Text != fmt.Sprintf("You said: hello %d", i) {
			t.Errorf("s%d: %+v", i, v)
		}
	}
	// The run the sweep gave up on kept its input; a manual resume
	// finishes it.
	res, err := h.Resume(context.Background(), "s8")
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: hello 8" {
		t.Errorf("manual resume: %+v %v", res, err)
	}
}

// TestSweepCountsReconciledRuns: a run whose cancellation was recorded but
// not its end is closed as cancelled, never re-driven, and the sweep
// reports it as reconciled (not resumed).
func TestSweepCountsReconciledRuns(t *testing.T) {
	base := memory.New()
	now := time.Now().UTC()
	if err := base.Append(context.Background(), "rc",
		ledger.Event{ID: "e1", Kind: ledger.KindInput, Time: now, RunID: "run1", Input: &ledger.Input{MessageID: "m1", Parts: []ledger.Part{ledger.TextPart("hi")}}},
		ledger.Event{ID: "e2", Kind: ledger.KindRunStart, Time: now, RunID: "run1", RunStart: &ledger.RunStart{Inputs: []string{"m1"}, ResponseID: "r1"}},
		ledger.Event{ID: "e3", Kind: ledger.KindStep, Time: now, RunID: "run1", Step: &ledger.Step{ResponseID: "r1", Text: "par", Partial: true}},
	); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan host.RunResult, 1)
	hs := hosttest.New(t, host.Options{Storage: base, AutoResume: &host.AutoResume{
		OnResumed: func(_ string, res host.RunResult, _ error) { resumed <- res }}})
	select {
	case <-hs.Host.SweepDone():
	case <-time.After(10 * time.Second):
		t.Fatal("the boot sweep did not finish")
	}
	if rep := hs.Host.LastSweep(); rep.Interrupted != 1 || rep.Reconciled != 1 || rep.Resumed != 0 {
		t.Errorf("report = %+v, want the run reconciled", rep)
	}
	if res := <-resumed; res.Status != ledger.RunCancelled || res.Text != "par" {
		t.Errorf("OnResumed: %+v", res)
	}
	if n := hs.Model.RequestCount(); n != 0 {
		t.Errorf("%d model requests: a cancelled run was re-driven", n)
	}
}

// TestCancelBootResumedRun: a run the boot sweep resumed is a run like any:
// cancelled while its model streams, it ends cancelled (the sweep is told
// so), no resume takes it up again, and the session's next message is
// answered.
func TestCancelBootResumedRun(t *testing.T) {
	base := memory.New()
	var armed atomic.Bool
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	srv, err := fakemodel.Start(fakemodel.Options{Respond: func(req fakemodel.Request) fakemodel.Reply {
		if armed.CompareAndSwap(true, false) {
			asked <- struct{}{}
			<-release // the resumed run's pass: held until the test ends
		}
		return fakemodel.Reply{Text: "answered"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer close(release)
	crash := &crashAfter{Storage: base}
	crash.n.Store(1) // the message is kept, the run is left interrupted
	h1, _ := host.New(host.Options{Storage: crash, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"}})
	h1.Session("c").Send(context.Background(), "hello", host.SendOptions{})
	h1.Close(context.Background())
	if open := ledger.OpenRuns(mustLoad(t, base, "c")); len(open) != 1 {
		t.Fatalf("open runs %v, want the interrupted one", open)
	}

	armed.Store(true)
	ended := make(chan host.RunResult, 1)
	h := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"},
		AutoResume: &host.AutoResume{OnResumed: func(_ string, res host.RunResult, _ error) { ended <- res }}}).Host
	select {
	case <-asked: // the resumed run is in its model pass
	case <-time.After(time.Minute):
		t.Fatal("the boot sweep did not resume the run (a guard against a hang)")
	}
	if !h.Cancel("c", "operator") {
		t.Fatal("Cancel found no run")
	}
	var res host.RunResult
	select {
	case res = <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the cancelled run did not end (a guard against a hang)")
	}
	if res.Status != ledger.RunCancelled {
		t.Fatalf("the resumed run ended %s, want cancelled", res.Status)
	}
	if open := ledger.OpenRuns(mustLoad(t, base, "c")); len(open) != 0 {
		t.Fatalf("open runs after the cancel: %v", open)
	}
	next, err := h.Session("c").Send(context.Background(), "again", host.SendOptions{})
	if err != nil || next.Status != ledger.RunCompleted || next.Text != "answered" {
		t.Fatalf("the next message: %+v, %v", next, err)
	}
}

// mustLoad loads the session's ledger from s.
func mustLoad(t *testing.T, s storage.Storage, session string) []ledger.Event {
	t.Helper()
	evs, err := s.Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestAgentsRestartPoliciesOnOneHost: one host's boot sweep treats each
// interrupted run as its own agent says (Agent.OnInterrupted, through
// AutoResume.AgentFor): resumed, failed, or left interrupted.
func TestAgentsRestartPoliciesOnOneHost(t *testing.T) {
	base := memory.New()
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	policy := map[string]host.ResumeAction{"resumer": host.ActionResume, "failer": host.ActionFail, "leaver": host.ActionLeave}
	for session := range policy {
		crash := &crashAfter{Storage: base}
		crash.n.Store(1)
		h, _ := host.New(host.Options{Storage: crash, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"}})
		h.Session(session).Send(context.Background(), "hello "+session, host.SendOptions{})
		h.Close(context.Background())
	}
	var mu sync.Mutex
	resumed := map[string]ledger.RunStatus{}
	h := hosttest.New(t, host.Options{Storage: base, Model: mustClient(t, srv), Agent: host.Agent{Model: "m"},
		AutoResume: &host.AutoResume{
			AgentFor: func(_ context.Context, session string) (host.Agent, error) {
				return host.Agent{Model: "m", OnInterrupted: policy[session]}, nil
			},
			OnResumed: func(session string, res host.RunResult, _ error) {
				mu.Lock()
				resumed[session] = res.Status
				mu.Unlock()
			},
		}}).Host
	select {
	case <-h.SweepDone():
	case <-time.After(time.Minute):
		t.Fatal("the boot sweep did not finish (a guard against a hang)")
	}
	status := func(session string) ledger.RunStatus {
		evs := mustLoad(t, base, session)
		if len(ledger.OpenRuns(evs)) > 0 {
			return ledger.RunInterrupted
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Kind == ledger.KindRunEnd {
				return evs[i].RunEnd.Status
			}
		}
		return ""
	}
	waitFor := func(session string, want ledger.RunStatus) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); status(session) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s, want %s", session, status(session), want)
			}
		}
	}
	waitFor("resumer", ledger.RunCompleted)
	waitFor("failer", ledger.RunFailed)
	attempts := func(session string) int {
		n := 0
		for _, e := range mustLoad(t, base, session) {
			if e.Kind == ledger.KindResumeAttempt {
				n++
			}
		}
		return n
	}
	if attempts("resumer") == 0 {
		t.Fatal("the resumed run has no resume attempt in its ledger: the check below proves nothing")
	}
	if got := status("leaver"); got != ledger.RunInterrupted || attempts("leaver") != 0 {
		t.Errorf("leaver: %s after %d resume attempts, want its run left interrupted, never attempted", got, attempts("leaver"))
	}
	mu.Lock()
	defer mu.Unlock()
	if resumed["resumer"] != ledger.RunCompleted {
		t.Errorf("the sweep's report %v", resumed)
	}
	if _, ok := resumed["leaver"]; ok {
		t.Errorf("the run left interrupted was reported resumed: %v", resumed)
	}
}
