package host_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/gatestore"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// viewer rebuilds the text of a session's items from what an attachment
// reads, strictly: a text event must start where the item's text ends.
type viewer struct {
	t     *testing.T
	items map[string][]rune
	snaps int
	cur   host.Cursor
	wake  <-chan time.Time // read with NextOrWake and this wake, when set
	wakes int              // the reads the wake cut short
}

func newViewer(t *testing.T) *viewer { return &viewer{t: t, items: map[string][]rune{}} }

// read applies updates until the attachment has read n progress events
// (n < 0: until a run-end), and returns whether a run-end was read.
func (v *viewer) read(ctx context.Context, a *host.Attachment, n int) bool {
	v.t.Helper()
	ended, err := v.readUntil(ctx, a, n)
	if err != nil {
		v.t.Fatalf("Next: %v", err)
	}
	return ended
}

// readUntil is read, returning Next's error.
func (v *viewer) readUntil(ctx context.Context, a *host.Attachment, n int) (bool, error) {
	for seen := 0; n < 0 || seen < n; {
		u, woke, err := a.NextOrWake(ctx, v.wake)
		if err != nil {
			return false, err
		}
		if woke {
			v.wakes++
			continue
		}
		v.cur = a.Cursor()
		if s := u.Snapshot; s != nil {
			v.snaps++
			v.items = map[string][]rune{}
			for _, it := range s.Transcript.Items {
				if it.Kind == ledger.ItemResponse {
					v.items[it.ID] = []rune(it.Text)
				}
			}
			continue
		}
		p := u.Progress
		seen++
		switch p.Type {
		case host.ProgressText:
			if have := len(v.items[p.ResponseID]); p.Offset != have {
				v.t.Fatalf("text at offset %d of item %s, which the viewer has %d characters of", p.Offset, p.ResponseID, have)
			}
			v.items[p.ResponseID] = append(v.items[p.ResponseID], []rune(p.Delta)...)
		case host.ProgressRetry:
			if p.Retry.Reset {
				v.items[p.ResponseID] = nil
			}
		case host.ProgressRunEnd:
			return true, nil
		}
	}
	return false, nil
}

// check compares the viewer's items with the session's transcript.
func (v *viewer) check(s *host.Session) {
	v.t.Helper()
	tr, err := s.Transcript(context.Background())
	if err != nil {
		v.t.Fatal(err)
	}
	for _, it := range tr.Items {
		if it.Kind != ledger.ItemResponse {
			continue
		}
		if got := string(v.items[it.ID]); got != it.Text {
			v.t.Errorf("item %s: the viewer has %q, the transcript %q", it.ID, got, it.Text)
		}
	}
}

// TestAttachMidStream: a viewer attaching while a run streams gets a
// snapshot with the partial text, then the progress after it; it breaks
// off, attaches again with its cursor, and goes on without a snapshot; in
// the end it has exactly the transcript's text. A viewer whose cursor
// names a run that ended starts over with a snapshot, and a viewer
// staying attached sees the next run start with a snapshot.
func TestAttachMidStream(t *testing.T) {
	m := hosttest.NewModel(hosttest.Reply{Text: strings.Repeat("tick ", 60)}, hosttest.Reply{Text: "second answer here"})
	m.Delay = 3 * time.Millisecond
	hs := hosttest.New(t, host.Options{Model: m})
	ctx := context.Background()
	s := hs.Host.Session("s")
	run, err := s.Start(ctx, "tick", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // some text streamed
	a, err := s.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	v := newViewer(t)
	v.read(ctx, a, 5)
	if v.snaps != 1 || v.cur.RunID != run.ID() {
		t.Fatalf("after attaching: %d snapshots, cursor %+v", v.snaps, v.cur)
	}
	a.Close()
	a, err = s.Attach(ctx, v.cur)
	if err != nil {
		t.Fatal(err)
	}
	if !v.read(ctx, a, -1) || v.snaps != 1 {
		t.Fatalf("resumed with a cursor of the live run: %d snapshots, want no new one", v.snaps)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	v.check(s)

	// The same attachment sees the next run: a snapshot with its message,
	// then its progress.
	next := make(chan error, 1)
	go func() { next <- func() error { _, err := s.Send(ctx, "again", host.SendOptions{}); return err }() }()
	if !v.read(ctx, a, -1) || v.snaps < 2 {
		t.Fatalf("the next run: %d snapshots", v.snaps)
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	v.check(s)
	a.Close()

	// A cursor of a run that ended: a snapshot of the whole session.
	a, err = s.Attach(ctx, host.Cursor{RunID: run.ID(), Seq: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	u, err := a.Next(ctx)
	if err != nil || u.Snapshot == nil || u.Snapshot.Status.State != host.StateCompleted {
		t.Fatalf("attaching after the run ended: %+v %v, want a snapshot of the completed session", u, err)
	}
}

// TestAttachNextOrWake: a viewer whose reads a fast timer keeps cutting
// short (a relay's heartbeats and paced text) loses nothing: it reads a
// snapshot, every character of two runs' text once, in order, and sees the
// second run start; an idle read ends at the wake.
func TestAttachNextOrWake(t *testing.T) {
	m := hosttest.NewModel(hosttest.Reply{Text: strings.Repeat("tick ", 80)}, hosttest.Reply{Text: strings.Repeat("tock ", 80)})
	m.Delay = time.Millisecond
	hs := hosttest.New(t, host.Options{Model: m})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := hs.Host.Session("s")
	a, err := s.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	v := newViewer(t)
	v.wake = tick.C
	// Nothing yet: a snapshot of the empty session, then reads that the
	// wake ends.
	if _, err := v.readUntil(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	u, woke, err := a.NextOrWake(ctx, tick.C)
	if u.Snapshot != nil {
		v.snaps++
		u, woke, err = a.NextOrWake(ctx, tick.C)
	}
	if !woke || err != nil || u.Snapshot != nil || u.Progress != nil {
		t.Fatalf("an idle read: %+v woke %v, %v", u, woke, err)
	}
	for i, text := range []string{"first", "second"} {
		done := make(chan error, 1)
		go func() { _, err := s.Send(ctx, text, host.SendOptions{}); done <- err }()
		if !v.read(ctx, a, -1) {
			t.Fatalf("run %d: no run-end", i+1)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		v.check(s)
	}
	if v.wakes == 0 || v.snaps < 2 {
		t.Errorf("%d reads woken, %d snapshots: the test did not cut the reads short", v.wakes, v.snaps)
	}
}

// TestAttachSnapshotFails: a snapshot that fails midway — here its
// context ends while it reads a tool call's child session — leaves the
// attachment as it was: the next read takes the snapshot again, rather
// than going on with the run's progress as if the viewer had the
// snapshot.
func TestAttachSnapshotFails(t *testing.T) {
	release := make(chan struct{})
	block := host.NewTool(host.ToolSpec{Name: "block", Effect: host.EffectRead}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return host.ToolResult{Output: "done"}, nil
	})
	defer close(release)
	m := hosttest.NewModel(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "block"}}}, hosttest.Reply{Text: "after the tool"})
	gates := &gatestore.Gates{}
	store := &gatestore.Memory{Store: memory.New(), G: gates}
	hs := hosttest.New(t, host.Options{Model: m, Storage: store, Agent: host.Agent{Model: "m", Tools: []host.Tool{block}}})
	ctx := context.Background()
	s := hs.Host.Session("s")
	if _, err := s.Start(ctx, "call it", host.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := hosttest.WaitLedger(t, store, "s", 20*time.Second, "the tool call", func(evs []ledger.Event) bool {
		return hosttest.CountKind(evs, ledger.KindStep) > 0
	})
	var callID string
	for _, e := range evs {
		if e.Step != nil && len(e.Step.ToolCalls) > 0 {
			callID = e.Step.ToolCalls[0].ID
		}
	}
	// The snapshot's status looks for a child session of the call in
	// flight (a sub-agent's): that read is held, and the read's context
	// ends meanwhile.
	gate := gates.Set(gatestore.Load, host.ChildSessionID("s", callID))
	a, err := s.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	first, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() { _, err := a.Next(first); failed <- err }()
	<-gate.Reached()
	cancel()
	gate.Open()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the snapshot whose context ended: %v", err)
	}
	again, cancel2 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel2()
	u, err := a.Next(again)
	if err != nil || u.Snapshot == nil || u.Snapshot.Status.State != host.StateRunning {
		t.Fatalf("the read after: %+v %v, want a snapshot of the running session", u, err)
	}
}

// TestAttachResumeSubscribesAtOnce: an attachment that resumes in the run
// in flight follows that run from Attach on: when the run ends before the
// first Next, Next still gives its progress after the cursor, to its end,
// not a snapshot of the session.
func TestAttachResumeSubscribesAtOnce(t *testing.T) {
	gate := make(chan struct{})
	m := hosttest.NewModel()
	m.Respond = func(model.Request) hosttest.Reply {
		<-gate
		return hosttest.Reply{Text: "one two three"}
	}
	hs := hosttest.New(t, host.Options{Model: m})
	ctx := context.Background()
	s := hs.Host.Session("s")
	run, err := s.Start(ctx, "hi", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Attach(ctx, host.Cursor{RunID: run.ID()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	close(gate)
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the subscription a snapshot of the ended run comes first,
	// and no run-end after it: the read is bounded.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v := newViewer(t)
	if ended, err := v.readUntil(rctx, a, -1); !ended || err != nil {
		t.Fatalf("no run-end (%v) after %d snapshots", err, v.snaps)
	}
	if v.snaps != 0 {
		t.Errorf("%d snapshots, want the run's progress alone", v.snaps)
	}
	v.check(s)
}

// TestAttachHammer: viewers attach, break off and come back at random
// moments of runs that stream fast; every one of them ends with exactly
// the transcript's text, however its reads interleaved with the stream.
func TestAttachHammer(t *testing.T) {
	m := hosttest.NewModel()
	m.Respond = func(model.Request) hosttest.Reply {
		return hosttest.Reply{Text: strings.Repeat("word ", 150)}
	}
	m.Delay = 200 * time.Microsecond
	hs := hosttest.New(t, host.Options{Model: m})
	ctx := context.Background()
	s := hs.Host.Session("s")
	for round := range 3 {
		run, err := s.Start(ctx, fmt.Sprintf("round %d", round), host.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				v := newViewer(t)
				// Once the run has ended, a viewer's last attachment waits
				// for news that never come: stop it shortly after.
				rctx, stop := context.WithCancel(ctx)
				defer stop()
				go func() {
					run.Wait(ctx)
					time.Sleep(50 * time.Millisecond)
					stop()
				}()
				for {
					a, err := s.Attach(ctx, v.cur)
					if err != nil {
						t.Error(err)
						return
					}
					ended, err := v.readUntil(rctx, a, 1+rng.IntN(40))
					a.Close()
					if ended || err != nil {
						if err != nil && !errors.Is(err, context.Canceled) {
							t.Error(err)
						}
						break
					}
				}
				if _, err := run.Wait(ctx); err != nil {
					t.Error(err)
				}
				v.check(s)
			}()
		}
		wg.Wait()
	}
}

// TestAttachEndsWhenTheHostCloses: an attachment waiting for news returns
// ErrClosed when the host closes, and the close does not wait for it.
func TestAttachEndsWhenTheHostCloses(t *testing.T) {
	hs := hosttest.New(t, host.Options{})
	ctx := context.Background()
	s := hs.Host.Session("s")
	if _, err := s.Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := a.Next(ctx); err != nil || u.Snapshot == nil {
		t.Fatalf("%+v %v", u, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Next(ctx)
		a.Close()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := hs.Host.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, host.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}
