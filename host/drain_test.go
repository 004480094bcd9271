package host_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestDrainStopsAtAStepBoundary: after Drain, the host refuses new work,
// and a run in flight stops once the step it is in is recorded — the
// model pass, and the tool calls it asked for — recording nothing more, so
// that the next host resumes it from there and no pass is made twice. A
// pass that ends the run ends it as it would have.
func TestDrainStopsAtAStepBoundary(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var toolRuns atomic.Int64
	agent := host.Agent{Model: "fake/echo", Tools: []host.Tool{lookupTool(&toolRuns)}}
	boot := func(t *testing.T, store *memory.Store, m host.Model, auto *host.AutoResume) *host.Host {
		t.Helper()
		h, err := host.New(host.Options{Storage: store, Model: m, Agent: agent, Logger: slog.New(slog.DiscardHandler), AutoResume: auto})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// drain starts text in session s of a host whose model waits at a
	// gate, sends queued into the run while its first pass is held, drains
	// the host, then lets the pass go on; it returns the ledger once Close
	// returned, and the first message's result.
	drain := func(t *testing.T, store *memory.Store, text string, queued ...string) ([]ledger.Event, host.RunResult, error) {
		t.Helper()
		g := newGateModel(mustClient(t, srv))
		h := boot(t, store, g, nil)
		run, err := h.Session("s").Start(context.Background(), text, host.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the run made no model call")
		}
		for _, q := range queued {
			if _, err := h.Session("s").Start(context.Background(), q, host.StartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		h.Drain()
		if _, err := h.Session("other").Start(context.Background(), "new work", host.StartOptions{}); !errors.Is(err, host.ErrClosed) {
			t.Errorf("a message to a draining host: %v, want ErrClosed", err)
		}
		close(g.gate)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close after Drain: %v", err)
		}
		if n := len(g.entered); n != 0 {
			t.Errorf("the draining host made %d more model calls", n)
		}
		res, err := run.Wait(context.Background())
		return hosttest.Load(t, store, "s"), res, err
	}
	// resume boots the next host, which resumes the session, and returns
	// the ledger once its boot sweep is over, with the model calls made.
	resume := func(t *testing.T, store *memory.Store) ([]ledger.Event, int) {
		t.Helper()
		m := &countingModel{inner: mustClient(t, srv)}
		h := boot(t, store, m, &host.AutoResume{})
		defer h.Close(context.Background())
		select {
		case <-h.SweepDone():
		case <-time.After(10 * time.Second):
			t.Fatal("the next host's boot sweep did not finish")
		}
		return hosttest.Load(t, store, "s"), int(m.calls.Load())
	}

	t.Run("queued message", func(t *testing.T) {
		store := memory.New()
		evs, res, err := drain(t, store, "first", "queued")
		if got, want := kinds(evs), "input run-start input step"; got != want {
			t.Fatalf("ledger after the drain = %s, want %s (the pass recorded, nothing after)", got, want)
		}
		if !errors.Is(err, host.ErrClosed) || res.Status != ledger.RunInterrupted {
			t.Errorf("the first message's result: %+v %v; want interrupted, ErrClosed", res, err)
		}
		evs, calls := resume(t, store)
		if got, want := kinds(evs), "input run-start input step resume-attempt step run-end"; got != want || calls != 1 {
			t.Fatalf("after the next host: %s with %d model calls; want %s with 1", got, calls, want)
		}
		if last := evs[len(evs)-2].Step; last.Text != "You said: queued" || evs[len(evs)-1].RunEnd.Status != ledger.RunCompleted {
			t.Errorf("the resumed run's pass %q, its end %+v", last.Text, evs[len(evs)-1].RunEnd)
		}
	})

	t.Run("tool calls", func(t *testing.T) {
		store := memory.New()
		toolRuns.Store(0)
		evs, _, _ := drain(t, store, "please lookup")
		if got, want := kinds(evs), "input run-start step tool-result"; got != want || toolRuns.Load() != 1 {
			t.Fatalf("ledger after the drain = %s, the tool ran %d times; want %s, once", got, toolRuns.Load(), want)
		}
		evs, calls := resume(t, store)
		if got, want := kinds(evs), "input run-start step tool-result resume-attempt step run-end"; got != want || calls != 1 || toolRuns.Load() != 1 {
			t.Fatalf("after the next host: %s, %d model calls, the tool ran %d times; want %s, 1 call, the tool once", got, calls, toolRuns.Load(), want)
		}
	})

	t.Run("the pass ends the run", func(t *testing.T) {
		store := memory.New()
		evs, res, err := drain(t, store, "only")
		if got, want := kinds(evs), "input run-start step run-end"; got != want || err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("ledger after the drain = %s, result %+v %v; want %s, completed", got, res, err, want)
		}
	})
}

// countingModel counts the model calls it passes on.
type countingModel struct {
	inner host.Model
	calls atomic.Int64
}

func (c *countingModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	c.calls.Add(1)
	return c.inner.Stream(ctx, req, onDelta)
}
