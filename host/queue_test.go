package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// sendDuring starts a send of text in its own goroutine the first time the
// run streams text, and holds that run until the send is durable.
type sendDuring struct {
	once sync.Once
	wg   sync.WaitGroup
	res  []host.RunResult
	err  []error
	mu   sync.Mutex
}

func (sd *sendDuring) hook(t *testing.T, sess *host.Session, texts ...string) func(host.Progress) {
	return func(p host.Progress) {
		if p.Type != host.ProgressText {
			return
		}
		sd.once.Do(func() {
			for _, text := range texts {
				accepted := make(chan struct{})
				sd.wg.Add(1)
				go func() {
					defer sd.wg.Done()
					res, err := sess.Send(context.Background(), text, host.SendOptions{OnAccepted: func(host.Accepted) { close(accepted) }})
					sd.mu.Lock()
					sd.res, sd.err = append(sd.res, res), append(sd.err, err)
					sd.mu.Unlock()
				}()
				select {
				case <-accepted:
				case <-time.After(10 * time.Second):
					t.Error("the queued send was not accepted")
				}
			}
		})
	}
}

func TestSendMidRunIsAnsweredInThatRun(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1}, host.Agent{})
	sess := hs.host.Session("q")
	var sd sendDuring
	res, err := sess.Send(context.Background(), "first question", host.SendOptions{OnProgress: sd.hook(t, sess, "second question")})
	sd.wg.Wait()
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	b := sd.res[0]
	if sd.err[0] != nil || b.Status != ledger.RunCompleted || b.RunID != res.RunID || b.Text != "You said: second question" {
		t.Fatalf("queued send: %+v %v (first run %s)", b, sd.err[0], res.RunID)
	}
	evs := hs.events("q")
	if got, want := kinds(evs), "input run-start input step step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if evs[2].RunID != "" || !slices.Equal(evs[4].Step.Inputs, []string{b.MessageID}) {
		t.Errorf("the queued message was not folded into the second pass: %+v / %+v", evs[2], evs[4].Step)
	}
	// The second pass saw both questions, the queued one last.
	reqs := hs.model.Requests()
	last := reqs[len(reqs)-1].Messages
	if len(reqs) != 2 || last[len(last)-1].Text != "second question" {
		t.Errorf("requests = %d, last message %q", len(reqs), last[len(last)-1].Text)
	}
	tr, _ := sess.Transcript(context.Background())
	var order []string
	for _, it := range tr.Items {
		order = append(order, string(it.Kind)+":"+it.Text)
	}
	want := []string{"user:first question", "response:You said: first question", "user:second question", "response:You said: second question"}
	if !slices.Equal(order, want) {
		t.Errorf("transcript = %q, want %q", order, want)
	}
}

func TestQueuedCallersShareTheFailure(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1, Script: []fakemodel.Reply{
		{Text: "working on the first one"},
		{Fault: &fakemodel.Fault{Kind: fakemodel.FaultNoCredits}},
	}}, host.Agent{}, fastRetry)
	sess := hs.host.Session("qf")
	var sd sendDuring
	res, err := sess.Send(context.Background(), "one", host.SendOptions{OnProgress: sd.hook(t, sess, "two", "three")})
	sd.wg.Wait()
	if err != nil || res.Status != ledger.RunFailed {
		t.Fatalf("first caller: %+v %v", res, err)
	}
	for i, r := range sd.res {
		if sd.err[i] != nil || r.Status != ledger.RunFailed || r.RunID != res.RunID || r.Reason != res.Reason {
			t.Errorf("queued caller %d: %+v %v", i, r, sd.err[i])
		}
	}
	evs := hs.events("qf")
	end := evs[len(evs)-1].RunEnd
	if end == nil || len(end.Inputs) != 2 || len(ledger.PendingInputs(evs)) != 0 {
		t.Errorf("run-end = %+v; pending %v", end, ledger.PendingInputs(evs))
	}
	if n := hs.model.RequestCount(); n != 2 {
		t.Errorf("requests = %d, want 2 (no successor run for messages a failed pass answered)", n)
	}
}

func TestDuplicateRequestID(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	sess := hs.host.Session("dup")
	first, err := sess.Send(context.Background(), "pay the invoice", host.SendOptions{RequestID: "req-7"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := sess.Send(context.Background(), "pay the invoice", host.SendOptions{RequestID: "req-7"})
	if err != nil {
		t.Fatal(err)
	}
	if again.MessageID != first.MessageID || again.RunID != first.RunID || again.Text != first.Text || again.Status != first.Status {
		t.Errorf("retried send = %+v, first = %+v", again, first)
	}
	if n := hs.model.RequestCount(); n != 1 {
		t.Errorf("model requests = %d, want 1", n)
	}
	inputs := 0
	for _, e := range hs.events("dup") {
		if e.Input != nil {
			inputs++
		}
	}
	if inputs != 1 {
		t.Errorf("%d inputs in the ledger, want 1", inputs)
	}
}

func TestCancelWithQueuedInput(t *testing.T) {
	long := strings.Repeat("word ", 400)
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1, Script: []fakemodel.Reply{{Text: long}, {Text: long}}}, host.Agent{})
	sess := hs.host.Session("cq")
	var sd sendDuring
	var cancelled sync.Once
	res, err := sess.Send(context.Background(), "one", host.SendOptions{OnProgress: func(p host.Progress) {
		sd.hook(t, sess, "two", "three")(p)
		if p.Type == host.ProgressText && p.Offset > 5 {
			cancelled.Do(func() {
				if !hs.host.Cancel("cq", "stop the first") {
					t.Error("Cancel of the first run returned false")
				}
			})
		}
	}})
	if err != nil || res.Status != ledger.RunCancelled {
		t.Fatalf("first: %+v %v", res, err)
	}
	// The queued messages start one successor run; cancel it too once it
	// streams.
	deadline := time.Now().Add(10 * time.Second)
	for !hs.host.IsRunning("cq") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for time.Now().Before(deadline) {
		tr, _ := sess.Transcript(context.Background())
		if it := tr.Items[len(tr.Items)-1]; it.Status == ledger.StatusStreaming && len(it.Text) > 5 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !hs.host.Cancel("cq", "stop the successor") {
		t.Error("Cancel of the successor returned false")
	}
	sd.wg.Wait()
	for i, r := range sd.res {
		if sd.err[i] != nil || r.Status != ledger.RunCancelled || r.Reason != "stop the successor" || r.RunID == res.RunID {
			t.Errorf("queued caller %d: %+v %v", i, r, sd.err[i])
		}
	}
	if sd.res[0].RunID != sd.res[1].RunID {
		t.Errorf("the queued messages ran in two runs: %s, %s", sd.res[0].RunID, sd.res[1].RunID)
	}
	var starts []*ledger.RunStart
	for _, e := range hs.events("cq") {
		if e.RunStart != nil {
			starts = append(starts, e.RunStart)
		}
	}
	if len(starts) != 2 || len(starts[1].Inputs) != 2 {
		t.Errorf("run-starts = %+v; want the successor batching both queued messages", starts)
	}
}

func TestResumeFoldsOrphanedQueuedInput(t *testing.T) {
	now := time.Now().UTC()
	in := func(id, msg, run, text string) ledger.Event {
		return ledger.Event{ID: id, Kind: ledger.KindInput, Time: now, RunID: run,
			Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart(text)}}}
	}
	t.Run("open run", func(t *testing.T) {
		base := memory.New()
		base.Append(context.Background(), "o", in("e1", "m1", "run1", "first"),
			ledger.Event{ID: "e2", Kind: ledger.KindRunStart, Time: now, RunID: "run1", RunStart: &ledger.RunStart{Inputs: []string{"m1"}, ResponseID: "r1"}},
			in("e3", "m2", "", "queued before the crash"))
		hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = base })
		res, err := hs.host.Resume(context.Background(), "o")
		if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: queued before the crash" {
			t.Fatalf("%+v %v", res, err)
		}
		evs, _ := base.Load(context.Background(), "o")
		if len(ledger.PendingInputs(evs)) != 0 || len(ledger.OpenRuns(evs)) != 0 {
			t.Errorf("pending %v, open %v", ledger.PendingInputs(evs), ledger.OpenRuns(evs))
		}
	})
	t.Run("no open run", func(t *testing.T) {
		base := memory.New()
		base.Append(context.Background(), "n", in("e1", "m1", "", "left behind"))
		hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) { o.Storage = base })
		res, err := hs.host.Resume(context.Background(), "n")
		if err != nil || res.Status != ledger.RunCompleted || res.MessageID != "m1" || res.Text != "You said: left behind" {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

// TestJoinedSendReceivesProgress: a send that joins a run in flight gets
// that run's progress from the moment its message is queued — the pass
// that answers it streamed whole, the run's end last — in its own
// goroutine, and nothing after Send returns.
func TestJoinedSendReceivesProgress(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1}, host.Agent{})
	sess := hs.host.Session("jp")
	var (
		mu       sync.Mutex
		events   []host.Progress
		returned bool
		late     bool
	)
	done := make(chan host.RunResult, 1)
	var once sync.Once
	first, err := sess.Send(context.Background(), "first question", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type != host.ProgressText {
			return
		}
		once.Do(func() {
			accepted := make(chan struct{})
			go func() {
				res, err := sess.Send(context.Background(), "second question", host.SendOptions{
					OnAccepted: func(host.Accepted) { close(accepted) },
					OnProgress: func(p host.Progress) {
						mu.Lock()
						defer mu.Unlock()
						if returned {
							late = true
						}
						events = append(events, p)
					},
				})
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				returned = true
				mu.Unlock()
				done <- res
			}()
			<-accepted
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	second := <-done
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if late {
		t.Error("OnProgress was called after Send returned")
	}
	if second.RunID != first.RunID || second.Text != "You said: second question" {
		t.Fatalf("joined send: %+v, first run %s", second, first.RunID)
	}
	if len(events) == 0 || events[len(events)-1].Type != host.ProgressRunEnd || events[len(events)-1].Status != ledger.RunCompleted {
		t.Fatalf("joined progress (%d events) does not end with the run's end: %+v", len(events), events)
	}
	// The pass that answered it streamed to it from offset 0, in order.
	var text strings.Builder
	next := 0
	for _, p := range events {
		if p.RunID != first.RunID {
			t.Fatalf("progress of another run: %+v", p)
		}
		if p.Type != host.ProgressText || p.ResponseID != second.ResponseID {
			continue
		}
		if p.Offset != next {
			t.Fatalf("delta at offset %d, want %d", p.Offset, next)
		}
		text.WriteString(p.Delta)
		next += len([]rune(p.Delta))
	}
	if text.String() != second.Text {
		t.Fatalf("the answering pass streamed %q, want %q", text.String(), second.Text)
	}
}

// TestQueuedAnswerSurvivesTheStartersContext: a run belongs to the host, not
// to the caller that started it. When the starter's context ends while
// another caller's message waits in the run, only the starter stops
// waiting: the run goes on and answers the other message. Without such a
// message, the starter's context ending still cancels the run.
func TestQueuedAnswerSurvivesTheStartersContext(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1}, host.Agent{})
	sess := hs.host.Session("owner")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sd sendDuring
	var once sync.Once
	passes := 0
	first, err := sess.Send(ctx, "first question", host.SendOptions{OnProgress: func(p host.Progress) {
		sd.hook(t, sess, "second question")(p)
		if p.Type == host.ProgressResponseStart {
			passes++
		}
		// The starter gives up while the pass that answers the queued
		// message streams.
		if p.Type == host.ProgressText && passes == 2 && p.Offset > 3 {
			once.Do(cancel)
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the starter's Send: %+v, %v; want context.Canceled", first, err)
	}
	sd.wg.Wait()
	b := sd.res[0]
	if sd.err[0] != nil || b.Status != ledger.RunCompleted || b.Text != "You said: second question" {
		t.Fatalf("the queued caller's answer: %+v %v", b, sd.err[0])
	}
	if first.RunID != "" && first.RunID != b.RunID {
		t.Errorf("the starter's run %s, the queued answer's %s", first.RunID, b.RunID)
	}
	evs := hs.events("owner")
	if got, want := kinds(evs), "input run-start input step step run-end"; got != want {
		t.Errorf("ledger = %q, want %q", got, want)
	}

	// Alone in its run, the starter's context ending cancels the run.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	res, err := sess.Send(ctx2, strings.Repeat("long ", 100), host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText && p.Offset > 3 {
			cancel2()
		}
	}})
	if err != nil || res.Status != ledger.RunCancelled || res.Reason != "cancelled by the caller" {
		t.Errorf("a lone starter's cancelled Send: %+v %v", res, err)
	}
}
