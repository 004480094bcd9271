package host_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestResumeGoesOnAfterATurnEnd: a run whose model ended its turn while a
// message was queued goes on to answer it — the pass records the item the
// next pass streams into — and a process that dies in that next pass
// leaves the run open after a step without tool calls. Resuming it used to
// take that step for the run's last ("only the end was not recorded"): it
// ended the run completed, and a new run answered the queued message, in
// another item than the one the dead process streamed it into (found by
// two serve processes, one SIGKILLed while it answered a message posted to
// the other). The resumed run now makes the pass it had decided on, in the
// same run and item.
func TestResumeGoesOnAfterATurnEnd(t *testing.T) {
	now := time.Now().UTC()
	base := memory.New()
	err := base.Append(context.Background(), "q",
		ledger.Event{ID: "e1", Kind: ledger.KindInput, Time: now, RunID: "run1",
			Input: &ledger.Input{MessageID: "m1", Parts: []ledger.Part{ledger.TextPart("first")}}},
		ledger.Event{ID: "e2", Kind: ledger.KindRunStart, Time: now, RunID: "run1",
			RunStart: &ledger.RunStart{Inputs: []string{"m1"}, ResponseID: "r1", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}},
		ledger.Event{ID: "e3", Kind: ledger.KindInput, Time: now,
			Input: &ledger.Input{MessageID: "m2", Parts: []ledger.Part{ledger.TextPart("queued meanwhile")}}},
		ledger.Event{ID: "e4", Kind: ledger.KindStep, Time: now, RunID: "run1",
			Step: &ledger.Step{ResponseID: "r1", NextResponseID: "r2", Index: 0, Inputs: []string{"m1"}, Text: "You said: first",
				FinishReason: "stop", Model: "fake/echo"}})
	if err != nil {
		t.Fatal(err)
	}
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = base })
	res, err := hs.host.Resume(context.Background(), "q")
	if err != nil || res.Status != ledger.RunCompleted || res.RunID != "run1" || res.ResponseID != "r2" || res.Text != "You said: queued meanwhile" {
		t.Fatalf("resume: %+v %v; want run1 completed, answering the queued message in r2", res, err)
	}
	evs := hosttest.Load(t, base, "q")
	if got, want := hosttest.Kinds(evs), "input run-start input step resume-attempt step run-end"; got != want {
		t.Errorf("ledger = %s, want %s", got, want)
	}
	tr := ledger.ProjectSession("q", evs)
	var items []string
	for _, it := range tr.Items {
		items = append(items, it.ID+"/"+it.RunID+"/"+string(it.Status))
	}
	if want := []string{"m1/run1/", "r1/run1/completed", "m2/run1/", "r2/run1/completed"}; !slices.Equal(items, want) {
		t.Errorf("transcript items = %v, want %v", items, want)
	}
}

// hasInput reports whether session id of store holds a message of text.
func hasInput(store *memory.Store, id, text string) bool {
	events, _ := store.Load(context.Background(), id)
	for _, e := range events {
		if e.Input != nil && ledger.TextOf(e.Input.Parts) == text {
			return true
		}
	}
	return false
}

// heldLister holds the boot sweep's listing until release is closed.
type heldLister struct {
	*memory.Store
	release chan struct{}
}

func (l *heldLister) ListSessions(ctx context.Context) ([]string, error) {
	<-l.release
	return l.Store.ListSessions(ctx)
}

// TestSendResumesTheInterruptedRun: with auto-resume, a message sent to a
// session whose run was interrupted before a sweep resumed it (another
// host's sweep, or this one's, comes later) resumes that run, as the sweep
// would, and joins it. It used to supersede the run instead — ended
// interrupted, its pass in flight lost, the message answered by a new run —
// so that whether a host's sweep or a waiting sender got to the session
// first decided what the transcript showed (found by two serve processes:
// a POST ?wait=true to B while A led the run, then A SIGKILLed).
func TestSendResumesTheInterruptedRun(t *testing.T) {
	held := &heldLister{Store: memory.New(), release: make(chan struct{})}
	runID := appendInterrupted(t, held, "s", "resume me")
	// The resumed run's first pass waits until the message is in the
	// ledger: the run is live when the message comes back to the session
	// after resuming it, and joins it. (Without the wait, a resumed run
	// may end before the message comes back, and a run of its own answers
	// it, after the resumed one: a correct ledger, but not the one this
	// test is about.)
	var first atomic.Bool
	respond := func(req fakemodel.Request) fakemodel.Reply {
		if first.CompareAndSwap(false, true) {
			deadline := time.Now().Add(30 * time.Second)
			for !hasInput(held.Store, "s", "second") && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		return fakemodel.DefaultReply(req)
	}
	hs := newHarness(t, fakemodel.Options{Respond: respond}, host.Agent{}, func(o *host.Options) {
		o.Storage = held
		o.AutoResume = &host.AutoResume{}
	})
	res, err := hs.host.Session("s").Send(context.Background(), "second", host.SendOptions{})
	close(held.release)
	if err != nil || res.Status != ledger.RunCompleted || res.RunID != runID || res.Text != "You said: second" {
		t.Fatalf("send: %+v %v; want it answered by the interrupted run %s, resumed", res, err, runID)
	}
	<-hs.host.SweepDone()
	evs := hosttest.Load(t, held, "s")
	if n := hosttest.CountKind(evs, ledger.KindRunStart); n != 1 {
		t.Errorf("%d runs started: %s", n, hosttest.Kinds(evs))
	}
	if n := hosttest.CountKind(evs, ledger.KindResumeAttempt); n != 1 {
		t.Errorf("%d resume attempts: %s", n, hosttest.Kinds(evs))
	}
	for _, e := range evs {
		if e.RunEnd != nil && (e.RunID != runID || e.RunEnd.Status != ledger.RunCompleted) {
			t.Errorf("run-end %+v of run %s", e.RunEnd, e.RunID)
		}
	}
	answers := 0
	for _, it := range ledger.ProjectSession("s", evs).Items {
		if it.RunID != runID {
			t.Errorf("item %s (%s) of run %s, want %s", it.ID, it.Kind, it.RunID, runID)
		}
		if it.Kind == ledger.ItemResponse && it.Text == "You said: second" {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the message was answered %d times", answers)
	}
}

// TestSendFollowsTheResumedRunFromItsStart: a Send to a session whose last
// run is interrupted resumes it and follows it from its start: its
// OnProgress gets the text of every pass of the resumed run, the answer
// to the dead run's own message included, not only the answer to its own.
func TestSendFollowsTheResumedRunFromItsStart(t *testing.T) {
	store := memory.New()
	runID := appendInterrupted(t, store, "s", "resume me")
	// The resumed run's first pass streams its answer, then holds until
	// the sender's message is in the ledger: the run is still live when
	// the message joins it (as in TestSendResumesTheInterruptedRun).
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		for deadline := time.Now().Add(30 * time.Second); !hasInput(store, "s", "second") && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}()
	var first atomic.Bool
	respond := func(req fakemodel.Request) fakemodel.Reply {
		if first.CompareAndSwap(false, true) {
			return fakemodel.Reply{Text: "the dead run's answer", Hold: hold, HoldAfter: 100}
		}
		return fakemodel.DefaultReply(req)
	}
	hs := newHarness(t, fakemodel.Options{Respond: respond}, host.Agent{}, func(o *host.Options) { o.Storage = store })
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := hs.host.Session("s").Send(context.Background(), "second", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText && p.RunID == runID {
			mu.Lock()
			streamed.WriteString(p.Delta)
			mu.Unlock()
		}
	}})
	if err != nil || res.Status != ledger.RunCompleted || res.RunID != runID {
		t.Fatalf("send: %+v %v; want it answered by the interrupted run %s", res, err, runID)
	}
	mu.Lock()
	defer mu.Unlock()
	var passes []string
	for _, e := range hs.events("s") {
		if e.Step != nil && e.RunID == runID {
			passes = append(passes, e.Step.Text)
			if !strings.Contains(streamed.String(), e.Step.Text) {
				t.Errorf("the pass that answered %q did not reach the sender's OnProgress (it got %q)", e.Step.Text, streamed.String())
			}
		}
	}
	if len(passes) == 0 || passes[0] != "the dead run's answer" {
		t.Errorf("the resumed run's passes: %q", passes)
	}
}
