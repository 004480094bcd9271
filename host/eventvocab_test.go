package host_test

// The live events that runs do not always tell — compaction, poke,
// auto-resume — observed through OnEvent and through LogEvents; and the
// boot sweep's bound on resumed runs in flight and its stagger, observed
// through the model and the events.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// lockedBuf is a bytes.Buffer safe for a logger and a test at once.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// observed is a host's live events, collected and logged (as JSON lines)
// by LogEvents.
type observed struct {
	log  eventLog
	text lockedBuf
}

func (o *observed) onEvent() func(host.Event) {
	logged := host.LogEvents(slog.New(slog.NewJSONHandler(&o.text, nil)))
	return func(e host.Event) {
		o.log.add(e)
		logged(e)
	}
}

// lines returns the logged records of events of type typ.
func (o *observed) lines(t *testing.T, typ host.EventType) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(o.text.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a logged line that is not JSON: %q", line)
		}
		if rec["msg"] == string(typ) {
			out = append(out, rec)
		}
	}
	return out
}

func TestLiveEventsVocabulary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("compaction", func(t *testing.T) {
		var o observed
		// The first pass reports most of the window used: the next run
		// compacts before its pass.
		m := hosttest.NewModel(hosttest.Reply{Text: "noted", Usage: &ledger.Usage{PromptTokens: 900, CompletionTokens: 10, TotalTokens: 910}})
		hs := hosttest.New(t, host.Options{Model: m, OnEvent: o.onEvent(),
			Compaction: &host.Compaction{ContextWindow: 1000, Limit: 0.5, KeepRecent: 1}})
		s := hs.Host.Session("c")
		for _, text := range []string{"remember OTTER7", "and now?"} {
			if res, err := s.Send(ctx, text, host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("%+v %v", res, err)
			}
		}
		evs := o.log.wait(t, host.EventRunEnd, 2)
		if got, want := types(evs), "run-start step run-end(completed) run-start compaction step run-end(completed)"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
		if n := hosttest.CountKind(hs.Events("c"), ledger.KindCompaction); n != 1 {
			t.Errorf("%d compactions in the ledger", n)
		}
		lines := o.lines(t, host.EventCompaction)
		if len(lines) != 1 || lines[0]["session"] != "c" || lines[0]["run"] != evs[4].RunID || lines[0]["agent"] != "default" {
			t.Errorf("the compaction's log line: %v", lines)
		}
	})

	t.Run("poke", func(t *testing.T) {
		var o observed
		m := hosttest.NewModel(hosttest.Reply{Text: "Here is a title: Hello."},
			hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"Hello","count":1}`}}})
		hs := hosttest.New(t, host.Options{Model: m, OnEvent: o.onEvent()})
		out := hs.Host.Task(ctx, host.TaskSpec{Prompt: "Write a title.", SessionID: "p", Deliverable: host.Deliverable{Schema: titleSchema}})
		if out.Status != host.OutcomeSubmitted {
			t.Fatalf("%+v", out)
		}
		evs := o.log.wait(t, host.EventRunEnd, 1)
		if got, want := types(evs), "run-start step poke step run-end(completed)"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
		if lines := o.lines(t, host.EventPoke); len(lines) != 1 || lines[0]["session"] != "p" || lines[0]["step"] != float64(0) {
			t.Errorf("the poke's log line: %v", lines)
		}
	})

	t.Run("auto-resume", func(t *testing.T) {
		var o observed
		store := memory.New()
		deadID, _ := deadSession(t, store, "r", "dead")
		hs := hosttest.New(t, host.Options{Storage: store, OnEvent: o.onEvent(), AutoResume: &host.AutoResume{}})
		bootSwept(t, hs.Host)
		evs := o.log.wait(t, host.EventRunEnd, 1)
		if got, want := types(evs), "auto-resume run-start(resumed) step run-end(completed)"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
		if a := evs[0]; a.Attempt != 1 || a.RunID != deadID || a.SessionID != "r" {
			t.Errorf("the auto-resume event: %+v", a)
		}
		lines := o.lines(t, host.EventAutoResume)
		if len(lines) != 1 || lines[0]["attempt"] != float64(1) || lines[0]["run"] != deadID {
			t.Errorf("the auto-resume's log line: %v", lines)
		}
		if starts := o.lines(t, host.EventRunStart); len(starts) != 1 || starts[0]["resumed"] != true {
			t.Errorf("the resumed run-start's log line: %v", starts)
		}
	})
}

// pacedModel holds each model call until the test lets it go, counting
// the calls in flight.
type pacedModel struct {
	inner   *hosttest.Model
	entered chan string // the session of each call, as it comes
	release chan struct{}

	mu       sync.Mutex
	inflight int
	max      int
}

func (m *pacedModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	m.mu.Lock()
	m.inflight++
	m.max = max(m.max, m.inflight)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inflight--
		m.mu.Unlock()
	}()
	m.entered <- req.Messages[len(req.Messages)-1].Text()
	select {
	case <-m.release:
	case <-ctx.Done():
		return model.Result{}, ctx.Err()
	}
	return m.inner.Stream(ctx, req, onDelta)
}

// TestSweepPacing: the boot sweep resumes at most AutoResume.MaxConcurrent
// runs at once, and starts them Stagger apart: with six interrupted
// sessions, a bound of two and a model that holds each call, two calls are
// in flight, never three, until one ends; each resume's auto-resume event
// comes at least Stagger after the one before.
func TestSweepPacing(t *testing.T) {
	const (
		sessions = 6
		bound    = 2
		stagger  = 20 * time.Millisecond
	)
	store := memory.New()
	for i := range sessions {
		deadSession(t, store, "s"+string(rune('a'+i)), "dead "+string(rune('a'+i)))
	}
	m := &pacedModel{inner: hosttest.NewModel(), entered: make(chan string, sessions), release: make(chan struct{})}
	var o observed
	hs := hosttest.New(t, host.Options{Storage: store, Model: m, OnEvent: o.onEvent(),
		AutoResume: &host.AutoResume{MaxConcurrent: bound, Stagger: stagger}})
	timeout := time.After(20 * time.Second)
	next := func() {
		t.Helper()
		select {
		case <-m.entered:
		case <-timeout:
			t.Fatal("a resumed run did not call the model")
		}
	}
	for range bound {
		next()
	}
	// The sweep had the time to start more (many staggers) and did not:
	// the bound holds them back until a resumed run ends.
	time.Sleep(5 * stagger)
	m.mu.Lock()
	if m.inflight != bound {
		t.Errorf("%d calls in flight, want the bound, %d", m.inflight, bound)
	}
	m.mu.Unlock()
	for i := bound; i < sessions; i++ {
		m.release <- struct{}{}
		next()
	}
	for range bound {
		m.release <- struct{}{}
	}
	rep := bootSwept(t, hs.Host)
	if rep.Interrupted != sessions || rep.Resumed != sessions {
		t.Errorf("the boot sweep: %+v", rep)
	}
	m.mu.Lock()
	if m.max != bound {
		t.Errorf("at most %d model calls were in flight at once, want %d", m.max, bound)
	}
	m.mu.Unlock()
	evs := o.log.wait(t, host.EventRunEnd, sessions)
	var resumes []host.Event
	for _, e := range evs {
		if e.Type == host.EventAutoResume {
			resumes = append(resumes, e)
		}
	}
	if len(resumes) != sessions {
		t.Fatalf("%d auto-resume events: %s", len(resumes), types(evs))
	}
	for i := 1; i < len(resumes); i++ {
		if gap := resumes[i].Time.Sub(resumes[i-1].Time); gap < stagger {
			t.Errorf("resumes %d and %d started %s apart, less than the stagger, %s", i-1, i, gap, stagger)
		}
	}
}
