package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// BenchmarkIdleSessions runs one tool-calling run in each of 5,000
// sessions of a host on file storage, then, with every session idle,
// reports the heap and the goroutines the host and its store keep per
// session (idle-B/session, goroutines/session): memory that grows with
// sessions that do nothing would be a leak of the session table, the
// live views or the store's handles. The ledgers themselves are on disk.
//
// It then does it again as a host restarted on the same files would
// (reloaded-idle-B/session): a new host and store send a second message
// to each session, loading its ledger from disk first, so that anything
// the host kept of a loaded ledger would show.
func BenchmarkIdleSessions(b *testing.B) {
	const sessions = 5000
	tool := host.NewTool(host.ToolSpec{Name: "get_account", Description: "An account by id.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"account_id":{"type":"string"}},"required":["account_id"]}`)},
		func(_ context.Context, call host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: `{"plan":"pro"}`}, nil
		})
	open := func(dir string) (*host.Host, *file.Store) {
		store, err := file.Open(dir, file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		h, err := host.New(host.Options{Storage: store, Model: toolThenAnswer{},
			Agent: host.Agent{Model: hosttest.DefaultModel, Tools: []host.Tool{tool}}})
		if err != nil {
			b.Fatal(err)
		}
		return h, store
	}
	// idle sends one message to each session and returns the heap and
	// the goroutines each keeps once idle.
	idle := func(h *host.Host, store *file.Store, runs int) (float64, float64) {
		base := heapNow()
		goroutines := runtime.NumGoroutine()
		for i := range sessions {
			res, err := h.Session(fmt.Sprintf("idle-%d", i)).Send(context.Background(), "get_account account_id=42", host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted {
				b.Fatalf("%+v %v", res, err)
			}
		}
		heap := heapNow()
		if n := hosttest.CountKind(hosttest.Load(b, store, "idle-0"), ledger.KindToolResult); n != runs {
			b.Fatalf("session idle-0 has %d tool results, want %d", n, runs)
		}
		return float64(int64(heap)-int64(base)) / sessions, float64(runtime.NumGoroutine()-goroutines) / sessions
	}
	for b.Loop() {
		dir := b.TempDir()
		h, store := open(dir)
		perSession, goroutines := idle(h, store, 1)
		h.Close(context.Background())
		store.Close()
		h, store = open(dir)
		reloaded, _ := idle(h, store, 2)
		h.Close(context.Background())
		store.Close()
		b.ReportMetric(perSession, "idle-B/session")
		b.ReportMetric(goroutines, "goroutines/session")
		b.ReportMetric(reloaded, "reloaded-idle-B/session")
	}
}

// toolThenAnswer calls get_account, then answers, keeping nothing (the
// scripted hosttest model records every request it gets).
type toolThenAnswer struct{}

func (toolThenAnswer) Stream(_ context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	usage := ledger.Usage{PromptTokens: 20, CompletionTokens: 5, TotalTokens: 25}
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == ledger.RoleTool {
		onDelta(model.Delta{Kind: model.DeltaText, Text: "The plan is pro."})
		return model.Result{Text: "The plan is pro.", FinishReason: "stop", Model: req.Model, Usage: usage}, nil
	}
	return model.Result{FinishReason: "tool_calls", Model: req.Model, Usage: usage,
		ToolCalls: []ledger.ToolCall{{ID: "call_1", Name: "get_account", Arguments: `{"account_id":"42"}`}}}, nil
}

// heapNow is the live heap after a full collection.
func heapNow() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// streamingModel streams chunks words, one every pause, as a slow provider
// does.
type streamingModel struct {
	chunks int
	pause  time.Duration
}

func (m streamingModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	t := time.NewTicker(m.pause)
	defer t.Stop()
	var text strings.Builder
	for range m.chunks {
		select {
		case <-ctx.Done():
			return model.Result{Text: text.String()}, ctx.Err()
		case <-t.C:
		}
		onDelta(model.Delta{Kind: model.DeltaText, Text: "word "})
		text.WriteString("word ")
	}
	return model.Result{Text: text.String(), FinishReason: "stop", Model: req.Model,
		Usage: ledger.Usage{PromptTokens: 10, CompletionTokens: int64(m.chunks), TotalTokens: 10 + int64(m.chunks)}}, nil
}

// BenchmarkAcceptUnderLoad starts 5,000 runs at once, from 50 callers, on
// a host whose model streams a chunk every 50 ms for 2 s, on file storage,
// and reports the latency of Session.Start — the message durable, the run
// under way — at p50 and p99 (accept-p50-ms, accept-p99-ms): an accept
// must not queue behind the streaming of the runs already in flight.
//
// The floor, in the same run: the same starts against a model that
// answers at once (no streaming runs to queue behind), "instant".
func BenchmarkAcceptUnderLoad(b *testing.B) {
	b.Run("streaming", func(b *testing.B) { acceptUnderLoad(b, streamingModel{chunks: 40, pause: 50 * time.Millisecond}) })
	b.Run("instant", func(b *testing.B) { acceptUnderLoad(b, instantModel{}) })
}

func acceptUnderLoad(b *testing.B, m host.Model) {
	const sessions, callers = 5000, 50
	for b.Loop() {
		store, err := file.Open(b.TempDir(), file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		h, err := host.New(host.Options{Storage: store, Model: m, Agent: host.Agent{Model: hosttest.DefaultModel}})
		if err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, sessions)
		runs := make([]*host.Run, sessions)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := c; i < sessions; i += callers {
					t0 := time.Now()
					r, err := h.Session(fmt.Sprintf("load-%d", i)).Start(context.Background(), "hello", host.StartOptions{})
					lat[i] = time.Since(t0)
					if err != nil {
						b.Error(err)
						return
					}
					runs[i] = r
				}
			})
		}
		wg.Wait()
		for _, r := range runs {
			if r == nil {
				continue
			}
			if res, err := r.Wait(context.Background()); err != nil || res.Status != ledger.RunCompleted {
				b.Fatalf("%+v %v", res, err)
			}
		}
		slices.Sort(lat)
		ms := func(p int) float64 { return float64(lat[min(len(lat)-1, len(lat)*p/100)].Microseconds()) / 1e3 }
		b.ReportMetric(ms(50), "accept-p50-ms")
		b.ReportMetric(ms(99), "accept-p99-ms")
		h.Close(context.Background())
		store.Close()
	}
}
