package host_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// traceHook notes, in a shared log, when a call enters and leaves it.
type traceHook struct {
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (h traceHook) note(s string) {
	h.mu.Lock()
	*h.log = append(*h.log, s)
	h.mu.Unlock()
}

func (h traceHook) ModelHook(next host.StreamFunc) host.StreamFunc {
	return func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
		ci, _ := host.CallInfoFrom(ctx)
		h.note(fmt.Sprintf("%s>%s#%d", h.name, ci.Purpose, ci.Attempt))
		res, err := next(ctx, req, onDelta)
		h.note(h.name + "<" + ci.Purpose)
		return res, err
	}
}

func (h traceHook) ToolHook(next host.CallFunc) host.CallFunc {
	return func(ctx context.Context, tool host.Tool, call host.ToolCall) (host.ToolResult, error) {
		ci, _ := host.CallInfoFrom(ctx)
		h.note(fmt.Sprintf("%s>%s:%s", h.name, ci.Purpose, call.Name))
		res, err := next(ctx, tool, call)
		h.note(h.name + "<" + ci.Purpose)
		return res, err
	}
}

// cacheHook answers calls of one tool by itself, without calling it.
type cacheHook struct{ tool string }

func (cacheHook) ModelHook(next host.StreamFunc) host.StreamFunc { return next }
func (c cacheHook) ToolHook(next host.CallFunc) host.CallFunc {
	return func(ctx context.Context, tool host.Tool, call host.ToolCall) (host.ToolResult, error) {
		if call.Name == c.tool {
			return host.ToolResult{Output: "cached", Source: "cache"}, nil
		}
		return next(ctx, tool, call)
	}
}

// TestHooksWrapCallsInOrder: model and tool calls go through the hooks, the
// first added outermost, each told what the call is for; a hook may answer
// by itself.
func TestHooksWrapCallsInOrder(t *testing.T) {
	var mu sync.Mutex
	var log []string
	var calls atomic.Int32
	hs := newHarness(t, fakemodel.Options{}, host.Agent{Tools: []host.Tool{counterTool("lookup", &calls), counterTool("cached", &calls)}},
		func(o *host.Options) {
			o.Hooks = []host.Hook{traceHook{"a", &mu, &log}, nil}
		})
	hs.host.AddHook(traceHook{"b", &mu, &log}, cacheHook{tool: "cached"})
	res, err := hs.host.Session("hooks").Send(context.Background(), "please lookup q=x", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	want := []string{"a>pass#1", "b>pass#1", "b<pass", "a<pass", "a>tool:lookup", "b>tool:lookup", "b<tool", "a<tool", "a>pass#1", "b>pass#1", "b<pass", "a<pass"}
	if !slices.Equal(log, want) {
		t.Errorf("calls went\n  %v\nwant\n  %v", log, want)
	}
	// A hook answers the cached tool without calling it.
	log = nil
	if _, err := hs.host.Session("hooks").Send(context.Background(), "please cached q=y", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Errorf("the tools ran %d times, want 1 (the cached one answered by the hook)", calls.Load())
	}
	evs := hs.events("hooks")
	if r := evs[len(evs)-3].ToolResult; r == nil || r.Output != "cached" || r.Source != "cache" {
		t.Errorf("the cached call's result = %+v", evs[len(evs)-3])
	}
}

// TestAddHookWhileRunning: hooks added while runs are in flight take effect
// for the calls that start afterwards; runs never see a half-built chain.
func TestAddHookWhileRunning(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	var adder, senders sync.WaitGroup
	stop := make(chan struct{})
	var added atomic.Int32
	adder.Add(1)
	go func() {
		// Adds hooks (200 at most) until the senders are done.
		defer adder.Done()
		var mu sync.Mutex
		var log []string
		for range 200 {
			hs.host.AddHook(traceHook{"h", &mu, &log})
			added.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	for s := range 4 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range 10 {
				res, err := hs.host.Session(fmt.Sprintf("add-%d", s)).Send(context.Background(), fmt.Sprintf("m%d", i), host.SendOptions{})
				if err != nil || res.Status != ledger.RunCompleted {
					t.Errorf("%+v %v", res, err)
				}
			}
		}()
	}
	senders.Wait()
	close(stop)
	adder.Wait()
	if added.Load() == 0 {
		t.Error("no hook was added")
	}
}

// stuckStore blocks the appends after the first n until their context ends.
type stuckStore struct {
	storage.Storage
	n atomic.Int32
}

func (s *stuckStore) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if s.n.Add(-1) < 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Storage.Append(ctx, id, evs...)
}

// TestAppendTimeout: a ledger append of a run is bounded by
// Options.Timeouts.Append, and reported as a *TimeoutError of kind append;
// the run stays resumable.
func TestAppendTimeout(t *testing.T) {
	store := &stuckStore{Storage: memory.New()}
	store.n.Store(1) // the message is accepted; the step's append hangs
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) {
		o.Storage = store
		o.Timeouts = host.Timeouts{Append: 50 * time.Millisecond}
	})
	res, err := hs.host.Session("slow").Send(context.Background(), "hi", host.SendOptions{})
	var te *host.TimeoutError
	if !errors.As(err, &te) || te.Kind != host.TimeoutAppend || te.After != 50*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v (%T), want a *host.TimeoutError of kind append", err, err)
	}
	if res.Status != ledger.RunInterrupted || !strings.Contains(res.Reason, "timed out") {
		t.Errorf("result = %+v", res)
	}
	evs, _ := store.Storage.Load(context.Background(), "slow")
	if open := ledger.OpenRuns(evs); len(open) != 1 {
		t.Errorf("open runs %v: the run is not resumable", open)
	}
	if _, err := host.New(host.Options{Storage: memory.New(), Agent: host.Agent{Model: "m"}, Timeouts: host.Timeouts{Poll: -1}}); err == nil ||
		!strings.Contains(err.Error(), "Timeouts.Poll") {
		t.Errorf("a negative timeout: %v", err)
	}
}

// TestHooksSeeRetriesAndCompaction: a hook is told each attempt of a pass
// (a retry after a transient failure is attempt 2) and the model calls that
// write a compaction's note (purpose compaction), so that metering through
// hooks misses neither.
func TestHooksSeeRetriesAndCompaction(t *testing.T) {
	var mu sync.Mutex
	var log []string
	var requests atomic.Int32
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: func(req fakemodel.Request) fakemodel.Reply {
		if requests.Add(1) == 1 {
			return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultServerError}}
		}
		return rememberingModel(req)
	}}, host.Agent{Model: "fake/small", Retry: &model.RetryPolicy{BaseDelay: time.Millisecond}}, func(o *host.Options) {
		o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
		o.Hooks = []host.Hook{traceHook{"h", &mu, &log}}
	})
	sess := hs.host.Session("metered")
	for i := range 5 {
		if res, err := sess.Send(context.Background(), filler(i), host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("message %d: %+v %v", i, res, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(log) < 2 || log[0] != "h>pass#1" || log[1] != "h<pass" || log[2] != "h>pass#2" {
		t.Errorf("the first pass's attempts: %v; want h>pass#1, h<pass, h>pass#2", log[:min(len(log), 3)])
	}
	compactions := hosttest.CountKind(hs.events("metered"), ledger.KindCompaction)
	if told := slices.Index(log, "h>compaction#0"); compactions == 0 || told < 0 {
		t.Errorf("%d compactions; the hook saw %v", compactions, log)
	}
	if n := int(requests.Load()); n != strings.Count(strings.Join(log, " "), ">") {
		t.Errorf("the model had %d requests, the hook saw %d calls: %v", n, strings.Count(strings.Join(log, " "), ">"), log)
	}
}
