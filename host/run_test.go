package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

// TestStartOwnsNoRun: Start returns once the message is durable, and its
// context bounds Start only: the run goes on after that context ends, and
// a Wait whose context ends stops waiting without stopping the run.
func TestStartOwnsNoRun(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1}, host.Agent{})
	sess := hs.host.Session("start")
	ctx, cancel := context.WithCancel(context.Background())
	r, err := sess.Start(ctx, "a question with several words", host.StartOptions{RequestID: "q1"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	durable := false
	for _, e := range hs.events("start") {
		durable = durable || (e.Input != nil && e.Input.MessageID == r.MessageID() && e.Input.RequestID == "q1")
	}
	if !durable || r.ID() == "" {
		t.Fatalf("after Start: message durable %v, run %q", durable, r.ID())
	}
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	stopWaiting()
	if _, err := r.Wait(waitCtx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on a done context: %v", err)
	}
	res, err := r.Wait(context.Background())
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: a question with several words" ||
		res.MessageID != r.MessageID() || res.RunID != r.ID() {
		t.Fatalf("Wait: %+v %v (run %s)", res, err, r.ID())
	}
	// The same request id: the same message and run, nothing appended.
	again, err := sess.Start(context.Background(), "a question with several words", host.StartOptions{RequestID: "q1"})
	if err != nil || again.MessageID() != r.MessageID() {
		t.Fatalf("restarted request: %v, message %s", err, again.MessageID())
	}
	if res2, err := again.Wait(context.Background()); err != nil || res2.RunID != res.RunID || res2.Text != res.Text {
		t.Errorf("restarted request's result: %+v %v", res2, err)
	}
	if got := kinds(hs.events("start")); got != "input run-start step run-end" {
		t.Errorf("ledger = %q", got)
	}
}

func TestRunCancel(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1, Script: []fakemodel.Reply{{Text: strings.Repeat("word ", 300)}}}, host.Agent{})
	r, err := hs.host.Session("rc").Start(context.Background(), "talk", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sub := r.Subscribe(0)
	defer sub.Close()
	for {
		p, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == host.ProgressText && p.Offset > 5 {
			break
		}
	}
	if !r.Cancel("enough") || r.Cancel("again") {
		t.Error("Cancel: want true, then false")
	}
	res, err := r.Wait(context.Background())
	if err != nil || res.Status != ledger.RunCancelled || res.Reason != "enough" || res.Text == "" {
		t.Errorf("%+v %v", res, err)
	}
	// The subscription ends with the run's end.
	var last host.Progress
	for {
		p, err := sub.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = p
	}
	if last.Type != host.ProgressRunEnd || last.Status != ledger.RunCancelled || last.RunID != r.ID() {
		t.Errorf("last event = %+v", last)
	}
}

// TestRunSubscribeHammer: subscribers come at every point of a long run —
// before it streams, in the middle, after its end — some reading slowly and
// one not reading at all until the run ended. The run never waits for any
// of them; each reads the events after its offset in order, exactly once,
// up to the run's end, picking up where it left off when it was dropped for
// falling behind; those that started from the first event see the answer
// whole.
func TestRunSubscribeHammer(t *testing.T) {
	words := make([]string, 1500)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	hs := newHarness(t, fakemodel.Options{ChunkSize: 1}, host.Agent{})
	r, err := hs.host.Session("hammer").Start(context.Background(), strings.Join(words, " "), host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	idle := r.Subscribe(0) // reads nothing until the run ended
	defer idle.Close()

	type report struct {
		after, drops int
		text         string
		end          host.Progress
		err          error
	}
	read := func(after int, slow bool) report {
		rep := report{after: after}
		next := after + 1
		sub := r.Subscribe(after)
		defer func() { sub.Close() }()
		var text strings.Builder
		for {
			p, err := sub.Next(context.Background())
			switch {
			case errors.Is(err, host.ErrSlowSubscriber):
				rep.drops++
				sub.Close()
				sub = r.Subscribe(next - 1)
				continue
			case errors.Is(err, io.EOF):
				rep.text = text.String()
				return rep
			case err != nil:
				rep.err = err
				return rep
			}
			if p.Seq != next {
				rep.err = fmt.Errorf("event %d (%s) after %d", p.Seq, p.Type, next-1)
				return rep
			}
			next++
			if p.Type == host.ProgressText {
				text.WriteString(p.Delta)
			}
			rep.end = p
			if slow && rep.drops == 0 {
				time.Sleep(time.Millisecond) // slow until dropped once
			}
		}
	}
	var wg sync.WaitGroup
	reports := make(chan report, 64)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 200 * time.Microsecond) // come in at various points
			after := 0
			if i%3 == 1 {
				after = i * 7
			}
			reports <- read(after, i%4 == 0)
		}()
	}
	res, err := r.Wait(context.Background())
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	wg.Wait()
	reports <- read(0, false) // after the end: the whole log, then EOF
	close(reports)
	want := "You said: " + strings.Join(words, " ")
	if res.Text != want {
		t.Fatalf("answer %.40q…", res.Text)
	}
	drops := 0
	for rep := range reports {
		drops += rep.drops
		if rep.err != nil {
			t.Errorf("subscriber after %d: %v", rep.after, rep.err)
			continue
		}
		if rep.end.Type != host.ProgressRunEnd || rep.end.Status != ledger.RunCompleted {
			t.Errorf("subscriber after %d ended on %+v", rep.after, rep.end)
		}
		if rep.after == 0 && rep.text != want {
			t.Errorf("subscriber from the start read %.40q…", rep.text)
		}
	}
	// The subscriber that read nothing while the run went on was dropped,
	// not waited for; it picks up from the start.
	if _, err := idle.Next(context.Background()); !errors.Is(err, host.ErrSlowSubscriber) {
		t.Errorf("the idle subscriber: %v, want ErrSlowSubscriber", err)
	}
	if drops == 0 {
		t.Error("no slow subscriber was dropped")
	}
	t.Logf("%d drops among the subscribers", drops)
}
