package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

// harness is a host (hosttest.New) whose model is the fake OpenAI-compatible
// server reached through provider.Client, for the tests that need the wire:
// streaming chunks, HTTP faults, retries.
type harness struct {
	*hosttest.Harness
	model *fakemodel.Server
	host  *host.Host
	store storage.Storage
}

func newHarness(t *testing.T, fopts fakemodel.Options, agent host.Agent, mutate ...func(*host.Options)) *harness {
	t.Helper()
	srv, err := fakemodel.Start(fopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if agent.Model == "" {
		agent.Model = "fake/echo"
	}
	opts := host.Options{Agent: agent}
	for _, m := range mutate {
		m(&opts)
	}
	if opts.Model == nil {
		// A stall fails (and is retried) after a second, not ten minutes.
		c, err := provider.New(provider.Config{BaseURL: srv.URL(), APIKey: "test", IdleTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		opts.Model = c
	}
	hs := hosttest.New(t, opts)
	return &harness{Harness: hs, model: srv, host: hs.Host, store: hs.Store}
}

// events returns the session's ledger.
func (hs *harness) events(session string) []ledger.Event { return hs.Events(session) }

// kinds is the shape of a ledger.
var kinds = hosttest.Kinds

// counterTool counts its calls and echoes its input.
func counterTool(name string, calls *atomic.Int32) host.Tool {
	return host.NewTool(host.ToolSpec{
		Name:        name,
		Description: "Echo the input back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
	}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
		calls.Add(1)
		return host.ToolResult{Output: `{"echo":` + string(c.Input) + `}`, Source: "test:" + name}, nil
	})
}

func TestSendPlainChat(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	var accepted host.Accepted
	res, err := hs.host.Session("s1").Send(context.Background(), "hello there", host.SendOptions{
		OnAccepted: func(a host.Accepted) { accepted = a },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunCompleted || res.Text != "You said: hello there" {
		t.Fatalf("result = %+v", res)
	}
	if accepted.MessageID == "" || accepted.MessageID != res.MessageID || accepted.RunID != res.RunID {
		t.Errorf("accepted %+v, result %+v", accepted, res)
	}
	evs := hs.events("s1")
	if got, want := kinds(evs), "input run-start step run-end"; got != want {
		t.Fatalf("ledger kinds = %q, want %q", got, want)
	}
	if res.Usage.PromptTokens == 0 || res.Usage.CompletionTokens == 0 {
		t.Errorf("usage not recorded: %+v", res.Usage)
	}
	tr, err := hs.host.Session("s1").Transcript(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Items) != 2 {
		t.Fatalf("transcript items = %+v", tr.Items)
	}
	u, r := tr.Items[0], tr.Items[1]
	if u.Kind != ledger.ItemUser || u.ID != res.MessageID || u.Text != "hello there" || u.RunID != res.RunID {
		t.Errorf("user item = %+v", u)
	}
	if r.Kind != ledger.ItemResponse || r.ID != res.ResponseID || r.Status != ledger.StatusCompleted || r.Text != res.Text {
		t.Errorf("response item = %+v", r)
	}
}

func TestToolLoopProgressAndLedger(t *testing.T) {
	var calls atomic.Int32
	hs := newHarness(t, fakemodel.Options{}, host.Agent{Tools: []host.Tool{counterTool("lookup", &calls)}})
	sess := hs.host.Session("tools")

	var progress []host.Progress
	var durableAtAccept bool
	res, err := sess.Send(context.Background(), "please lookup q=weather", host.SendOptions{
		OnAccepted: func(a host.Accepted) {
			if len(progress) != 0 {
				t.Error("OnAccepted after a progress event")
			}
			for _, e := range hs.events("tools") {
				if e.Input != nil && e.Input.MessageID == a.MessageID {
					durableAtAccept = true
				}
			}
		},
		OnProgress: func(p host.Progress) {
			if _, err := json.Marshal(p); err != nil {
				t.Errorf("progress not JSON-safe: %v", err)
			}
			progress = append(progress, p)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !durableAtAccept {
		t.Error("the message was not durable when OnAccepted ran")
	}
	if res.Status != ledger.RunCompleted || calls.Load() != 1 {
		t.Fatalf("result %+v, tool calls %d", res, calls.Load())
	}
	if !strings.Contains(res.Text, `"q":"weather"`) {
		t.Errorf("the answer does not use the tool result: %q", res.Text)
	}
	if got, want := kinds(hs.events("tools")), "input run-start step tool-result step run-end"; got != want {
		t.Fatalf("ledger kinds = %q, want %q", got, want)
	}

	// Progress: each type in order, every event carrying the id of the
	// transcript item it streams into, text offsets contiguous.
	tr, _ := sess.Transcript(context.Background())
	if len(tr.Items) != 3 {
		t.Fatalf("transcript = %+v", tr.Items)
	}
	first, second := tr.Items[1], tr.Items[2]
	if len(first.ToolCalls) != 1 || first.ToolCalls[0].Status != ledger.ToolDone || first.ToolCalls[0].Source != "test:lookup" {
		t.Errorf("first response's tool calls = %+v", first.ToolCalls)
	}
	var seq []string
	texts := map[string]string{}
	for _, p := range progress {
		if p.SessionID != "tools" || p.RunID != res.RunID {
			t.Errorf("progress %+v: wrong session or run", p)
		}
		if p.ResponseID != first.ID && p.ResponseID != second.ID {
			t.Errorf("progress %s carries responseId %q, not a transcript item", p.Type, p.ResponseID)
		}
		if n := len(seq); n == 0 || seq[n-1] != string(p.Type) {
			seq = append(seq, string(p.Type))
		}
		if p.Type == host.ProgressText {
			if got := len([]rune(texts[p.ResponseID])); p.Offset != got {
				t.Errorf("text offset %d, want %d", p.Offset, got)
			}
			texts[p.ResponseID] += p.Delta
		}
		if p.Type == host.ProgressToolStart && string(p.Tool.Input) != `{"q":"weather"}` {
			t.Errorf("tool-start input = %s", p.Tool.Input)
		}
	}
	if got, want := strings.Join(seq, " "), "response-start text tool-start tool-end response-start text run-end"; got != want {
		t.Errorf("progress sequence = %q, want %q", got, want)
	}
	if texts[first.ID] != first.Text || texts[second.ID] != second.Text {
		t.Errorf("streamed text %q differs from the transcript %q / %q", texts, first.Text, second.Text)
	}
}

func TestTranscriptShowsStreamingItem(t *testing.T) {
	long := strings.Repeat("word ", 40)
	hs := newHarness(t, fakemodel.Options{Latency: 5 * time.Millisecond, Script: []fakemodel.Reply{{Text: long}}}, host.Agent{})
	sess := hs.host.Session("live")
	checked := make(chan ledger.Item, 1)
	var once sync.Once
	res, err := sess.Send(context.Background(), "go", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText && p.Offset > 20 {
			once.Do(func() {
				if !hs.host.IsRunning("live") {
					t.Error("IsRunning is false while the run streams")
				}
				tr, err := sess.Transcript(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				checked <- tr.Items[len(tr.Items)-1]
			})
		}
	}})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	it := <-checked
	if it.Status != ledger.StatusStreaming || it.ID != res.ResponseID || it.Text == "" || !strings.HasPrefix(long, it.Text) || it.Text == long {
		t.Errorf("in-flight item = %+v", it)
	}
	if hs.host.IsRunning("live") {
		t.Error("IsRunning after the run ended")
	}
}

func TestCancelKeepsPartialText(t *testing.T) {
	long := strings.Repeat("token ", 200)
	var calls atomic.Int32
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, Script: []fakemodel.Reply{{Text: long}}},
		host.Agent{Tools: []host.Tool{counterTool("lookup", &calls)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streamed strings.Builder
	res, err := hs.host.Session("c").Send(ctx, "talk", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText {
			streamed.WriteString(p.Delta)
			if streamed.Len() > 30 {
				cancel()
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunCancelled || res.Text == "" || !strings.HasPrefix(long, res.Text) || len(res.Text) >= len(long) {
		t.Fatalf("result = %+v", res)
	}
	evs := hs.events("c")
	if got, want := kinds(evs), "input run-start step run-end"; got != want {
		t.Fatalf("ledger kinds = %q, want %q", got, want)
	}
	if s := evs[2].Step; !s.Partial || s.Text != res.Text {
		t.Errorf("partial step = %+v", s)
	}
	tr, _ := hs.host.Session("c").Transcript(context.Background())
	if it := tr.Items[1]; it.Status != ledger.StatusCancelled || it.Text != res.Text {
		t.Errorf("cancelled item = %+v", it)
	}
	// The session goes on: the next send replays the partial text.
	res2, err := hs.host.Session("c").Send(context.Background(), "again", host.SendOptions{})
	if err != nil || res2.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res2, err)
	}
}

func TestCancelDuringToolsAnswersEveryCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := host.NewTool(host.ToolSpec{Name: "slow"}, func(ctx context.Context, c host.ToolCall) (host.ToolResult, error) {
		cancel() // the caller gives up while the first tool runs
		return host.ToolResult{Output: "done"}, nil
	})
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{
		{Name: "slow", Arguments: `{}`}, {Name: "slow", Arguments: `{}`}}}}}, host.Agent{Tools: []host.Tool{slow}})
	res, err := hs.host.Session("ct").Send(ctx, "run both", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCancelled {
		t.Fatalf("%+v %v", res, err)
	}
	evs := hs.events("ct")
	if got, want := kinds(evs), "input run-start step tool-result tool-result run-end"; got != want {
		t.Fatalf("ledger kinds = %q, want %q", got, want)
	}
	if r := evs[3].ToolResult; r.Output != "done" || r.Synthetic {
		t.Errorf("first result = %+v", r)
	}
	if r := evs[4].ToolResult; !r.Synthetic || !r.IsError {
		t.Errorf("second result = %+v", r)
	}
}

func TestModelFailureIsAnOutcome(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{Fault: &fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 402}}}}, host.Agent{})
	res, err := hs.host.Session("f").Send(context.Background(), "hi", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "402") {
		t.Fatalf("result = %+v", res)
	}
	if n := hs.model.RequestCount(); n != 1 {
		t.Errorf("requests = %d, want 1", n)
	}
	tr, _ := hs.host.Session("f").Transcript(context.Background())
	if it := tr.Items[1]; it.Status != ledger.StatusFailed || it.Reason != res.Reason {
		t.Errorf("failed item = %+v", it)
	}
}

func TestMaxSteps(t *testing.T) {
	var calls atomic.Int32
	hs := newHarness(t, fakemodel.Options{Respond: func(fakemodel.Request) fakemodel.Reply {
		return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{Name: "lookup", Arguments: `{"q":"again"}`}}}
	}}, host.Agent{MaxSteps: 3, Tools: []host.Tool{counterTool("lookup", &calls)}})
	res, err := hs.host.Session("m").Send(context.Background(), "loop", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "3 model passes") || calls.Load() != 3 {
		t.Fatalf("result = %+v, calls = %d", res, calls.Load())
	}
	if n := hs.model.RequestCount(); n != 3 {
		t.Errorf("model requests = %d, want 3", n)
	}
}

func TestToolFailuresReachTheModel(t *testing.T) {
	boom := host.NewTool(host.ToolSpec{Name: "boom"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		panic("kaboom")
	})
	fails := host.NewTool(host.ToolSpec{Name: "fails"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{}, errors.New("no such order")
	})
	hang := host.NewTool(host.ToolSpec{Name: "hang", Timeout: 20 * time.Millisecond}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		<-ctx.Done()
		return host.ToolResult{}, ctx.Err()
	})
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{
			{Name: "boom", Arguments: `{}`},
			{Name: "fails", Arguments: `{}`},
			{Name: "hang", Arguments: `{}`},
			{Name: "missing", Arguments: `{}`},
			{Name: "fails", Arguments: `{not json`},
		}},
		{Text: "I could not do it."},
	}}, host.Agent{Tools: []host.Tool{boom, fails, hang}})
	res, err := hs.host.Session("tf").Send(context.Background(), "try", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "I could not do it." {
		t.Fatalf("%+v %v", res, err)
	}
	want := []string{"panicked: kaboom", "no such order", "timed out after 20ms", `no tool named "missing"`, "not valid JSON"}
	var results []*ledger.ToolResult
	for _, e := range hs.events("tf") {
		if e.ToolResult != nil {
			results = append(results, e.ToolResult)
		}
	}
	if len(results) != len(want) {
		t.Fatalf("results = %d, want %d", len(results), len(want))
	}
	for i, w := range want {
		if !results[i].IsError || !strings.Contains(results[i].Output, w) {
			t.Errorf("result %d = %+v, want an error containing %q", i, results[i], w)
		}
	}
	// The model saw every error as a tool message.
	reqs := hs.model.Requests()
	var toolMsgs int
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			toolMsgs++
		}
	}
	if toolMsgs != len(want) {
		t.Errorf("the model saw %d tool messages, want %d", toolMsgs, len(want))
	}
}

func TestExternalToolRecordsIntent(t *testing.T) {
	publish := host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal, Idempotent: true},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "ok"}, nil
		})
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{Name: "publish", Arguments: `{}`}}}, {Text: "published"},
	}}, host.Agent{Tools: []host.Tool{publish}, ToolApprovals: map[string]host.ApprovalMode{"publish": host.ApproveAlways}})
	if _, err := hs.host.Session("x").Send(context.Background(), "publish it", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := hs.events("x")
	if got, want := kinds(evs), "input run-start step tool-start tool-result step run-end"; got != want {
		t.Fatalf("ledger kinds = %q, want %q", got, want)
	}
	if ts := evs[3].ToolStart; ts.Effect != "external" || !ts.Idempotent || ts.CallID != evs[4].ToolResult.CallID {
		t.Errorf("tool-start = %+v", ts)
	}
}

func TestInvalidInput(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	for _, tc := range []struct {
		name, session, text string
		opts                host.SendOptions
	}{
		{"empty", "ok", "", host.SendOptions{}},
		{"bad session", "../etc", "hi", host.SendOptions{}},
		{"bad part", "ok", "hi", host.SendOptions{Parts: []ledger.Part{{Type: ledger.PartImage}}}},
		{"bad agent", "ok", "hi", host.SendOptions{Agent: &host.Agent{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hs.host.Session(tc.session).Send(context.Background(), tc.text, tc.opts)
			if !errors.Is(err, host.ErrInvalidInput) {
				t.Errorf("err = %v, want ErrInvalidInput", err)
			}
		})
	}
	if n := len(hs.events("ok")); n != 0 {
		t.Errorf("%d events appended by rejected sends", n)
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	dup := host.NewTool(host.ToolSpec{Name: "t"}, nil)
	_, err := host.New(host.Options{Agent: host.Agent{MaxSteps: -1, Tools: []host.Tool{dup, dup, host.NewTool(host.ToolSpec{Name: "bad name"}, nil)}},
		ToolTimeout: -5})
	if err == nil {
		t.Fatal("New accepted a broken configuration")
	}
	for _, want := range []string{"Storage is required", "Model is required", "MaxSteps", `duplicate tool name "t"`, `invalid tool name "bad name"`, "ToolTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// failingStore fails every append after the first n.
type failingStore struct {
	storage.Storage
	n atomic.Int32
}

func (f *failingStore) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if f.n.Add(-1) < 0 {
		return errors.New("disk on fire")
	}
	return f.Storage.Append(ctx, id, evs...)
}

func TestStorageFailureMidRun(t *testing.T) {
	fs := &failingStore{Storage: memory.New()}
	fs.n.Store(1) // the input and run-start go through, the step does not
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = fs })
	res, err := hs.host.Session("d").Send(context.Background(), "hi", host.SendOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
	if res.Status != ledger.RunInterrupted {
		t.Errorf("status = %s", res.Status)
	}
	evs, _ := fs.Storage.Load(context.Background(), "d")
	if got := ledger.OpenRuns(evs); len(got) != 1 || got[0] != res.RunID {
		t.Errorf("open runs = %v, want the interrupted run", got)
	}
}

// windowStore fails the appends numbered from to to (counted from 1), as
// a disk full for a moment would; it lists its sessions and has no leases,
// as the file store: a storage of one host, whose sweeps do not repeat.
type windowStore struct {
	storage.Storage
	list     storage.Lister
	n        atomic.Int32
	from, to int32
}

func (w *windowStore) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if n := w.n.Add(1); n >= w.from && n <= w.to {
		return errors.New("disk full for a moment")
	}
	return w.Storage.Append(ctx, id, evs...)
}

func (w *windowStore) ListSessions(ctx context.Context) ([]string, error) {
	return w.list.ListSessions(ctx)
}

// TestStorageFailureMidRunHeals: a run interrupted by a failed append is
// resumed by its host once the storage takes appends again (here its
// first resume fails too, and the next one goes through), and answers its
// message once — on storages without leases, where no sweep repeats: the
// memory store and the file store.
func TestStorageFailureMidRunHeals(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T) storage.Storage
	}{
		{"memory", func(*testing.T) storage.Storage { return memory.New() }},
		{"file", func(t *testing.T) storage.Storage {
			fs, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fs.Close() })
			return fs
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := c.store(t)
			ws := &windowStore{Storage: store, list: store.(storage.Lister), from: 2, to: 3} // the step, then the first resume
			resumed := make(chan host.RunResult, 1)
			hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) {
				o.Storage = ws
				o.AutoResume = &host.AutoResume{OnResumed: func(_ string, res host.RunResult, err error) {
					if err != nil {
						t.Errorf("the resumed run: %v", err)
					}
					resumed <- res
				}}
			})
			<-hs.host.SweepDone()
			res, err := hs.host.Session("d").Send(t.Context(), "hi", host.SendOptions{})
			if err == nil || res.Status != ledger.RunInterrupted {
				t.Fatalf("Send while the storage fails = %+v, %v; want interrupted, with the storage's error", res, err)
			}
			select {
			case r := <-resumed:
				if r.Status != ledger.RunCompleted || r.Text != "You said: hi" || r.RunID != res.RunID {
					t.Fatalf("the resumed run: %+v; want run %s completed, answering the message", r, res.RunID)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the interrupted run was not resumed")
			}
			evs := hs.events("d")
			if open := ledger.OpenRuns(evs); len(open) != 0 {
				t.Errorf("open runs %v, want none", open)
			}
			if ends := hosttest.CountKind(evs, ledger.KindRunEnd); ends != 1 || ws.n.Load() < 4 {
				t.Errorf("%d run ends after %d appends; want one, after the failed step and resume", ends, ws.n.Load())
			}
		})
	}
}

// TestSessionsHammer sends concurrently to several sessions, several senders
// per session: every message is answered exactly once, by a run whose
// result its sender gets, and runs of one session never overlap.
func TestSessionsHammer(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	const sessions, senders, sends = 6, 3, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]host.RunResult{} // message id → result
	for s := range sessions {
		for w := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range sends {
					msg := fmt.Sprintf("m%d-%d", w, i)
					res, err := hs.host.Session(fmt.Sprintf("h%d", s)).Send(context.Background(), msg, host.SendOptions{})
					if err != nil || res.Status != ledger.RunCompleted || !strings.HasPrefix(res.Text, "You said: m") {
						t.Errorf("%s: %+v %v", msg, res, err)
						continue
					}
					mu.Lock()
					results[res.MessageID] = res
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for s := range sessions {
		evs := hs.events(fmt.Sprintf("h%d", s))
		inputs, open := 0, ""
		answeredBy := map[string]string{}
		for i, e := range evs {
			switch e.Kind {
			case ledger.KindInput:
				inputs++
			case ledger.KindRunStart:
				if open != "" {
					t.Fatalf("session h%d: run %s starts at event %d while %s is open", s, e.RunID, i, open)
				}
				open = e.RunID
				for _, id := range e.RunStart.Inputs {
					answeredBy[id] = e.RunID
				}
			case ledger.KindStep:
				for _, id := range e.Step.Inputs {
					answeredBy[id] = e.RunID
				}
			case ledger.KindRunEnd:
				open = ""
			}
		}
		if inputs != senders*sends {
			t.Errorf("session h%d has %d inputs, want %d", s, inputs, senders*sends)
		}
		for id, run := range answeredBy {
			res, ok := results[id]
			if !ok || res.RunID != run {
				t.Errorf("session h%d: message %s answered by %s, its sender got %+v", s, id, run, res)
			}
		}
		if len(answeredBy) != senders*sends || len(ledger.PendingInputs(evs)) != 0 {
			t.Errorf("session h%d: %d messages answered, pending %v", s, len(answeredBy), ledger.PendingInputs(evs))
		}
	}
}

// swappingToolset offers a different "lookup" tool after each call of
// Tools: a stand-in for a plugin directory reloaded between passes.
type swappingToolset struct {
	mu      sync.Mutex
	version int
}

func (s *swappingToolset) Tools() []host.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	v := s.version
	return []host.Tool{host.NewTool(host.ToolSpec{Name: "lookup"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: fmt.Sprintf("v%d", v), Source: fmt.Sprintf("set:v%d", v)}, nil
	})}
}

func TestToolsetsAreSnapshotPerPass(t *testing.T) {
	var calls atomic.Int32
	set := &swappingToolset{}
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{Name: "lookup", Arguments: `{}`}}},
		{ToolCalls: []fakemodel.ToolCall{{Name: "lookup", Arguments: `{}`}}},
		{Text: "done"},
	}}, host.Agent{Toolsets: []host.Toolset{set}, Tools: []host.Tool{counterTool("static", &calls)}})
	if _, err := hs.host.Session("ts").Send(context.Background(), "go", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, e := range hs.events("ts") {
		if e.ToolResult != nil {
			sources = append(sources, e.ToolResult.Source)
		}
	}
	if got := strings.Join(sources, " "); got != "set:v1 set:v2" {
		t.Errorf("tool sources = %q, want each pass on the toolset's snapshot of that pass", got)
	}
	reqs := hs.model.Requests()
	if len(reqs) != 3 || len(reqs[0].Tools) != 2 {
		t.Fatalf("requests = %d, tools offered = %+v", len(reqs), reqs[0].Tools)
	}
}
