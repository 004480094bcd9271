package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

// listingStore is what the boot sweep needs of a store.
type listingStore interface {
	storage.Storage
	storage.Lister
}

// stepClock is a store that notes when the first step is appended.
type stepClock struct {
	listingStore
	first atomic.Int64 // unix nanoseconds of the first step append; 0: none yet
}

func (s *stepClock) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	err := s.listingStore.Append(ctx, id, evs...)
	if err == nil {
		for _, e := range evs {
			if e.Kind == ledger.KindStep {
				s.first.CompareAndSwap(0, time.Now().UnixNano())
				break
			}
		}
	}
	return err
}

// sweepLedgers fills store with n sessions, every tenth of which has a run
// interrupted in its first model pass (input and run-start, nothing else);
// the others hold a completed exchange. It returns the interrupted count.
func sweepLedgers(b *testing.B, store storage.Storage, n int) int {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	interrupted := 0
	for i := range n {
		id := fmt.Sprintf("sess-%05d", i)
		text := fmt.Sprintf("hello number %d", i)
		run, msg, resp := "run-"+id, "msg-"+id, "resp-"+id
		evs := []ledger.Event{
			{ID: "e1-" + id, Kind: ledger.KindInput, Time: now, RunID: run,
				Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart(text)}}},
			{ID: "e2-" + id, Kind: ledger.KindRunStart, Time: now, RunID: run,
				RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: resp, Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}},
		}
		if i%10 == 0 {
			interrupted++
		} else {
			evs = append(evs,
				ledger.Event{ID: "e3-" + id, Kind: ledger.KindStep, Time: now, RunID: run,
					Step: &ledger.Step{ResponseID: resp, Text: "You said: " + text, FinishReason: "stop", Model: "fake/echo",
						Usage: ledger.Usage{PromptTokens: 4, CompletionTokens: 5, TotalTokens: 9}}},
				ledger.Event{ID: "e4-" + id, Kind: ledger.KindRunEnd, Time: now, RunID: run,
					RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}})
		}
		if err := store.Append(ctx, id, evs...); err != nil {
			b.Fatal(err)
		}
	}
	return interrupted
}

// BenchmarkBootSweep measures the boot sweep of AutoResume over 10,000
// sessions of which 1,000 hold a run interrupted in its first pass, against
// the fake model at zero latency (default MaxConcurrent 4, no Stagger), on
// the memory store and on the file store (a fresh Store over files written
// before the boot, as after a restart; no fsync). One iteration is one
// boot: host.New to the last resumed run's end; building the ledgers is
// outside the timer. Metrics, from host.New:
//
//   - ms/first-step: the first resumed run's model pass is durable;
//   - ms/all-resumed: the last resumed run has ended (OnResumed);
//   - runs/s: resumed runs per second over the whole sweep.
func BenchmarkBootSweep(b *testing.B) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	b.Run("memory", func(b *testing.B) {
		benchBootSweep(b, srv, func(b *testing.B) (listingStore, int) {
			store := memory.New()
			return store, sweepLedgers(b, store, 10_000)
		})
	})
	b.Run("file", func(b *testing.B) {
		benchBootSweep(b, srv, func(b *testing.B) (listingStore, int) {
			dir, err := os.MkdirTemp(b.TempDir(), "sweep")
			if err != nil {
				b.Fatal(err)
			}
			quiet := file.Options{Logger: slog.New(slog.DiscardHandler)}
			prep, err := file.Open(dir, quiet)
			if err != nil {
				b.Fatal(err)
			}
			n := sweepLedgers(b, prep, 10_000)
			prep.Close()
			store, err := file.Open(dir, quiet)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close() })
			return store, n
		})
	})
}

func benchBootSweep(b *testing.B, srv *fakemodel.Server, prepare func(*testing.B) (listingStore, int)) {
	const sessions = 10_000
	var firstTotal, allTotal time.Duration
	var resumedTotal int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		base, want := prepare(b)
		store := &stepClock{listingStore: base}
		var mu sync.Mutex
		var last time.Time
		var resumed int
		var bad []string
		b.StartTimer()

		start := time.Now()
		client, err := provider.New(provider.Config{BaseURL: srv.URL(), APIKey: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		h, err := host.New(host.Options{
			Storage: store,
			Model:   client,
			Agent:   host.Agent{Model: "fake/echo"},
			Logger:  slog.New(slog.DiscardHandler),
			AutoResume: &host.AutoResume{OnResumed: func(id string, res host.RunResult, err error) {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				resumed++
				if now.After(last) {
					last = now
				}
				if err != nil || res.Status != ledger.RunCompleted {
					bad = append(bad, fmt.Sprintf("%s: %s %v", id, res.Status, err))
				}
			}},
		})
		if err != nil {
			b.Fatal(err)
		}
		<-h.SweepDone()

		b.StopTimer()
		rep := h.LastSweep()
		h.Close(context.Background())
		if rep.Sessions != sessions || rep.Interrupted != want || rep.Resumed != want || resumed != want || len(bad) > 0 {
			b.Fatalf("sweep %+v, %d resumed, failures %v", rep, resumed, bad)
		}
		firstTotal += time.Duration(store.first.Load() - start.UnixNano())
		allTotal += last.Sub(start)
		resumedTotal += resumed
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(firstTotal), "ms/first-step")
	b.ReportMetric(ms(allTotal), "ms/all-resumed")
	b.ReportMetric(float64(resumedTotal)/allTotal.Seconds(), "runs/s")
}
