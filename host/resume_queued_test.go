package host_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/internal/fakemodel"
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
