package host_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// gateModel holds every model call until its gate opens (or the call's
// context ends), after telling entered that a call arrived.
type gateModel struct {
	inner   host.Model
	entered chan struct{} // receives one value per call
	gate    chan struct{}
}

func newGateModel(inner host.Model) *gateModel {
	return &gateModel{inner: inner, entered: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (g *gateModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	g.entered <- struct{}{}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return model.Result{}, ctx.Err()
	}
	return g.inner.Stream(ctx, req, onDelta)
}

// interruptedStore returns a store holding session id with a run
// interrupted in its first pass, and the run's id.
func interruptedStore(t *testing.T, id, text string) (*memory.Store, string) {
	t.Helper()
	store := memory.New()
	return store, appendInterrupted(t, store, id, text)
}

// appendInterrupted appends to session id of store a message and the start
// of a run that answers it, as a process that died in the run's first pass
// leaves them, and returns the run's id.
func appendInterrupted(t *testing.T, store storage.Storage, id, text string) string {
	t.Helper()
	now := time.Now().UTC()
	runID, msgID := ledger.NewID("run"), ledger.NewID("msg")
	err := store.Append(context.Background(), id,
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
			Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(text)}}},
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
			RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: ledger.NewID("resp"), Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}

// TestCloseLeavesResumedRunsResumable: Close never records a run the sweep
// resumed as cancelled. Given time, it waits for the run to end; when its
// context ends first, it stops the run without recording an end, so that
// the run stays interrupted and the next host resumes it.
func TestCloseLeavesResumedRunsResumable(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	boot := func(t *testing.T, store *memory.Store, m host.Model) *host.Host {
		t.Helper()
		h, err := host.New(host.Options{Storage: store, Model: m, Agent: host.Agent{Model: "fake/echo"},
			Logger: slog.New(slog.DiscardHandler), AutoResume: &host.AutoResume{}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	entered := func(t *testing.T, g *gateModel) {
		t.Helper()
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the sweep did not resume the run")
		}
	}

	t.Run("waits for the run", func(t *testing.T) {
		store, runID := interruptedStore(t, "r", "resume me")
		g := newGateModel(mustClient(t, srv))
		h := boot(t, store, g)
		entered(t, g)
		closed := make(chan error, 1)
		go func() { closed <- h.Close(context.Background()) }()
		// Once the host refuses new work, Close is under way: let the
		// resumed run finish.
		for {
			_, err := h.Resume(context.Background(), "probe")
			if errors.Is(err, host.ErrClosed) {
				break
			}
			if !errors.Is(err, host.ErrNothingToResume) {
				t.Fatalf("probe: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
		close(g.gate)
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return after the run ended")
		}
		evs, _ := store.Load(context.Background(), "r")
		end := evs[len(evs)-1]
		if end.RunID != runID || end.RunEnd == nil || end.RunEnd.Status != ledger.RunCompleted {
			t.Errorf("the resumed run ended %s; want it completed", kinds(evs))
		}
	})

	t.Run("context ends first", func(t *testing.T) {
		store, runID := interruptedStore(t, "r", "resume me")
		g := newGateModel(mustClient(t, srv))
		h := boot(t, store, g)
		entered(t, g)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.Close(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Close = %v, want context.Canceled", err)
		}
		evs, _ := store.Load(context.Background(), "r")
		if open := ledger.OpenRuns(evs); len(open) != 1 || open[0] != runID {
			t.Fatalf("after Close the ledger is %s (open runs %v); want the run left interrupted", kinds(evs), open)
		}
		// The next host resumes it.
		next := boot(t, store, mustClient(t, srv))
		defer next.Close(context.Background())
		select {
		case <-next.SweepDone():
		case <-time.After(10 * time.Second):
			t.Fatal("the next boot's sweep did not finish")
		}
		evs, _ = store.Load(context.Background(), "r")
		end := evs[len(evs)-1]
		if end.RunID != runID || end.RunEnd == nil || end.RunEnd.Status != ledger.RunCompleted {
			t.Errorf("the next host left %s; want the run resumed and completed", kinds(evs))
		}
	})
}

// TestSweepDoesNotWaitForItsRuns: a sweep returns once it has started the
// runs it resumes, not when they end, so that a periodic sweep never waits
// behind the longest run; the run goes on, and OnResumed reports its end.
func TestSweepDoesNotWaitForItsRuns(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := memory.New()
	g := newGateModel(mustClient(t, srv))
	ended := make(chan host.RunResult, 1)
	h, err := host.New(host.Options{Storage: store, Model: g, Agent: host.Agent{Model: "fake/echo"},
		Logger: slog.New(slog.DiscardHandler), AutoResume: &host.AutoResume{Interval: -1,
			OnResumed: func(_ string, res host.RunResult, _ error) { ended <- res }}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeNow(h)
	<-h.SweepDone() // over an empty store
	runID := appendInterrupted(t, store, "slow", "a long run")

	swept := make(chan host.SweepReport, 1)
	go func() {
		rep, err := h.Sweep(context.Background())
		if err != nil {
			t.Error(err)
		}
		swept <- rep
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep did not resume the run")
	}
	// The resumed run waits at the model's gate: the sweep returns all the
	// same.
	select {
	case rep := <-swept:
		if rep.Interrupted != 1 || rep.Resumed != 1 {
			t.Errorf("report = %+v", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sweep waits for the run it resumed to end")
	}
	if !h.IsRunning("slow") {
		t.Error("the resumed run is not running after the sweep returned")
	}
	close(g.gate)
	select {
	case res := <-ended:
		if res.Status != ledger.RunCompleted || res.RunID != runID {
			t.Errorf("OnResumed: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed run did not end")
	}
}

// closeNow closes h without waiting for its runs: they stop unrecorded.
func closeNow(h *host.Host) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.Close(ctx)
}
