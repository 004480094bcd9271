package host_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

// strayModel's first call streams from a goroutine it does not wait for:
// the call gives up after the first delta (a transient error, as a model
// wrapper that abandons a stalled upstream might) while the goroutine goes
// on calling onDelta until stop is closed — during the retry, and after
// the run ended. Later calls answer "final answer" on the caller's
// goroutine.
type strayModel struct {
	calls    atomic.Int32
	stop     chan struct{}
	ended    atomic.Bool   // the test saw the run end
	late     chan struct{} // closed once a stray delta came after the run ended
	lateOnce sync.Once
	strays   sync.WaitGroup
}

func (m *strayModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	if m.calls.Add(1) == 1 {
		first := make(chan struct{})
		m.strays.Add(1)
		go func() {
			defer m.strays.Done()
			for i := 0; ; i++ {
				select {
				case <-m.stop:
					return
				default:
				}
				ended := m.ended.Load()
				onDelta(model.Delta{Kind: model.DeltaText, Text: "stray "})
				if i == 0 {
					close(first)
				}
				if ended {
					m.lateOnce.Do(func() { close(m.late) })
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
		<-first
		return model.Result{Text: "stray "}, model.ErrStalled
	}
	for _, d := range []string{"final ", "answer"} {
		onDelta(model.Delta{Kind: model.DeltaText, Text: d})
	}
	return model.Result{Text: "final answer", FinishReason: "stop", Model: req.Model}, nil
}

// TestDeltasOfAnAbandonedAttempt: a host.Model may call onDelta from any
// goroutine. Deltas of an attempt that already returned (here, one that
// gave up while its stream went on) reach neither the live view nor the
// progress stream, during the retry or after the run's end.
func TestDeltasOfAnAbandonedAttempt(t *testing.T) {
	m := &strayModel{stop: make(chan struct{}), late: make(chan struct{})}
	defer m.strays.Wait()
	defer close(m.stop)
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) {
		o.Model = m
		o.Retry = model.RetryPolicy{BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
	})
	var mu sync.Mutex
	var shown []rune // what a client following the protocol displays
	res, err := hs.host.Session("stray").Send(context.Background(), "hi", host.SendOptions{OnProgress: func(p host.Progress) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case p.Type == host.ProgressResponseStart:
			shown = shown[:0]
		case p.Type == host.ProgressRetry && p.Retry.Reset:
			shown = shown[:0]
		case p.Type == host.ProgressText:
			shown = append(shown, []rune(p.Delta)...)
		}
	}})
	m.ended.Store(true)
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "final answer" {
		t.Fatalf("%+v %v", res, err)
	}
	mu.Lock()
	if got := string(shown); got != "final answer" {
		t.Errorf("the client shows %q, want %q", got, "final answer")
	}
	mu.Unlock()
	select {
	case <-m.late:
	case <-time.After(10 * time.Second):
		t.Fatal("no stray delta after the run's end")
	}
	tr, err := hs.host.Session("stray").Transcript(context.Background())
	if err != nil || len(tr.Items) != 2 || tr.Items[1].Text != "final answer" || strings.Contains(tr.Items[1].Text, "stray") {
		t.Errorf("transcript = %+v, %v", tr.Items, err)
	}
}
