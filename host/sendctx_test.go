package host_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

// deadlineCtx is a context whose deadline passes when the test says so
// (pass), not at a time: what a caller's context.WithTimeout does, with
// no race against the machine's speed.
type deadlineCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newDeadlineCtx() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) pass()                       { c.once.Do(func() { close(c.done) }) }
func (c *deadlineCtx) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }
func (c *deadlineCtx) Value(key any) any           { return c.Context.Value(key) }
func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// heldModel is a fake model whose first reply holds after one chunk until
// the returned release is called.
func heldModel(t *testing.T) (fakemodel.Options, func()) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	var first atomic.Bool
	return fakemodel.Options{ChunkSize: 1, Respond: func(req fakemodel.Request) fakemodel.Reply {
		r := fakemodel.DefaultReply(req)
		if first.CompareAndSwap(false, true) {
			r.Hold, r.HoldAfter = hold, 1
		}
		return r
	}}, release
}

// TestSendDeadlineTimesOut: a Send whose context's deadline passes while
// its run works ends the run timed_out ("the run's deadline passed"), not
// cancelled.
func TestSendDeadlineTimesOut(t *testing.T) {
	opts, _ := heldModel(t)
	hs := newHarness(t, opts, host.Agent{})
	ctx := newDeadlineCtx()
	res, err := hs.host.Session("deadline").Send(ctx, "a long question", host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText {
			ctx.pass()
		}
	}})
	if err != nil || res.Status != ledger.RunTimedOut || res.Reason != "the run's deadline passed" {
		t.Fatalf("%+v %v; want timed_out, the run's deadline passed", res, err)
	}
	evs := hs.events("deadline")
	if end := evs[len(evs)-1]; end.RunEnd == nil || end.RunEnd.Status != ledger.RunTimedOut {
		t.Errorf("the ledger's last event: %+v, want the run's end, timed_out", end)
	}
}

// TestJoinedSendNeverCancelsTheRun: a Send that joined another's run and
// gives up (its context ends) returns its context's error, and the run
// goes on: it answers both messages, the one of the Send that gave up
// too.
func TestJoinedSendNeverCancelsTheRun(t *testing.T) {
	opts, release := heldModel(t)
	hs := newHarness(t, opts, host.Agent{})
	sess := hs.host.Session("join")
	type outcome struct {
		res host.RunResult
		err error
	}
	streaming := make(chan struct{})
	var once sync.Once
	starter := make(chan outcome, 1)
	go func() {
		res, err := sess.Send(context.Background(), "first question", host.SendOptions{OnProgress: func(p host.Progress) {
			if p.Type == host.ProgressText {
				once.Do(func() { close(streaming) })
			}
		}})
		starter <- outcome{res, err}
	}()
	select {
	case <-streaming:
	case o := <-starter:
		t.Fatalf("the starter's run ended before its pass streamed: %+v %v", o.res, o.err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := sess.Send(ctx, "second question", host.SendOptions{OnAccepted: func(host.Accepted) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the joined Send that gave up: %+v, %v; want context.Canceled", res, err)
	}
	release()
	o := <-starter
	if o.err != nil || o.res.Status != ledger.RunCompleted {
		t.Fatalf("the run, after the joined Send gave up: %+v %v; want completed", o.res, o.err)
	}
	evs := hs.events("join")
	if got, want := kinds(evs), "input run-start input step step run-end"; got != want {
		t.Errorf("ledger = %q, want %q", got, want)
	}
	var last string
	for _, e := range evs {
		if e.Step != nil {
			last = e.Step.Text
		}
	}
	if !strings.Contains(last, "second question") {
		t.Errorf("the run's last pass answered %q, want the joined message", last)
	}
}

// TestDefaultToolTimeout: Options.ToolTimeout bounds a tool whose spec
// sets no Timeout (the model is told it timed out; the run goes on), and
// -1 leaves its call with no deadline.
func TestDefaultToolTimeout(t *testing.T) {
	// slow waits for its deadline; a call with none answers at once.
	slow := host.NewTool(host.ToolSpec{Name: "slow"}, func(ctx context.Context, _ host.ToolCall) (host.ToolResult, error) {
		if _, ok := ctx.Deadline(); !ok {
			return host.ToolResult{Output: "no deadline"}, nil
		}
		<-ctx.Done()
		return host.ToolResult{}, ctx.Err()
	})
	result := func(toolTimeout time.Duration) *ledger.ToolResult {
		t.Helper()
		hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{{Name: "slow", Arguments: `{}`}}}, {Text: "over"}}},
			host.Agent{Tools: []host.Tool{slow}}, func(o *host.Options) { o.ToolTimeout = toolTimeout })
		res, err := hs.host.Session("s").Send(context.Background(), "go", host.SendOptions{})
		if err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("ToolTimeout %s: %+v %v", toolTimeout, res, err)
		}
		var out *ledger.ToolResult
		for _, e := range hs.events("s") {
			if e.ToolResult != nil {
				out = e.ToolResult
			}
		}
		return out
	}
	if out := result(50 * time.Millisecond); out == nil || !out.IsError || !strings.Contains(out.Output, "timed out after 50ms") {
		t.Errorf("the slow call's result: %+v; want the 50ms timeout", out)
	}
	if out := result(-1); out == nil || out.IsError || out.Output != "no deadline" {
		t.Errorf("with ToolTimeout -1: %+v; want a call with no deadline", out)
	}
}

// TestOnProgressLosslessWhenSlow: a Send whose OnProgress falls far behind
// the run (blocked while the run streams 3,000 fragments, more than a
// subscriber may lag) is dropped by the run's hub and catches up: it gets
// every fragment, in order, none twice.
func TestOnProgressLosslessWhenSlow(t *testing.T) {
	reply := strings.Repeat("w ", 3000)
	hs := newHarness(t, fakemodel.Options{ChunkSize: 1, Script: []fakemodel.Reply{{Text: reply}}}, host.Agent{})
	release := make(chan struct{})
	var passed atomic.Bool
	go func() {
		// Held until the run's pass is in the ledger: every fragment was
		// published meanwhile, the run never waiting for the subscriber.
		defer close(release)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			for _, e := range hs.events("slow") {
				if e.Step != nil {
					passed.Store(true)
					return
				}
			}
		}
	}()
	var text strings.Builder
	var seq int
	var once sync.Once
	res, err := hs.host.Session("slow").Send(context.Background(), "talk", host.SendOptions{OnProgress: func(p host.Progress) {
		once.Do(func() { <-release })
		if p.Seq <= seq {
			t.Errorf("event %d after %d", p.Seq, seq)
		}
		seq = p.Seq
		if p.Type == host.ProgressText {
			if p.Offset != text.Len() {
				t.Errorf("a fragment at %d, the text so far %d long", p.Offset, text.Len())
			}
			text.WriteString(p.Delta)
		}
	}})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if !passed.Load() {
		t.Error("the run's pass did not end while its subscriber was blocked: the run waited for it")
	}
	if text.String() != res.Text || strings.TrimSpace(res.Text) != strings.TrimSpace(reply) {
		t.Errorf("OnProgress's text is %d bytes, the answer %d", text.Len(), len(res.Text))
	}
}
