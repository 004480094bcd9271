package hosttest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// Streaming fixtures for UI tests: a run's progress recorded from a real
// host (scripted model, memory store), with stable ids and a virtual time
// for each event, and a virtual clock that plays it — so that a team can
// test its own UI against the host's streams without timing. The AI SDK's
// UI message stream of the same run is protocol/uistream's Converter fed
// with [Stream.Updates] (see its Example).

// StreamSpec scripts a run to record (see [RecordStream]).
type StreamSpec struct {
	// SessionID names the session. Default: "session".
	SessionID string
	// Message is the user's message. Default: "hello".
	Message string
	// Replies script the model (see [Reply]); once they are spent, the
	// model answers as [DefaultReply]. Default: none.
	Replies []Reply
	// Tools are the agent's tools. Default: none.
	Tools []host.Tool
	// Pace is the virtual time between two events (and a retry's delay,
	// as its event tells it). A reply that fails with a transient error
	// is retried at once in real time. Default: 0, which means 20ms.
	Pace time.Duration
}

// TimedProgress is a progress event and the virtual time it comes at,
// counted from the run's start.
type TimedProgress struct {
	At       time.Duration
	Progress host.Progress
}

// Stream is a recorded run (see [RecordStream]): its progress events in
// order, each at a virtual time, and the session once the run ended.
type Stream struct {
	SessionID string
	RunID     string
	Events    []TimedProgress
	// Final is the session after the run: its transcript and status.
	Final host.Snapshot
}

// stableIDs matches the ids the host mints (a prefix, "_", 26 characters).
var stableIDs = regexp.MustCompile(`\b(run|msg|resp|call|evt|appr)_[0-9A-Z]{26}\b`)

// RecordStream runs spec on a host over a memory store with a scripted
// model, and records what a client of the run receives. Every id the host
// minted is replaced by a stable one (run_1, resp_1, resp_2, call_1, …, in
// order of appearance) and every time by the zero time, and the events get
// virtual times, so that the stream is the same every time it is
// recorded.
func RecordStream(ctx context.Context, spec StreamSpec) (Stream, error) {
	if spec.SessionID == "" {
		spec.SessionID = "session"
	}
	if spec.Message == "" {
		spec.Message = "hello"
	}
	if spec.Pace == 0 {
		spec.Pace = 20 * time.Millisecond
	}
	h, err := host.New(host.Options{Storage: memory.New(), Model: NewModel(spec.Replies...),
		Agent:  host.Agent{Model: DefaultModel, Tools: spec.Tools},
		Logger: slog.New(slog.DiscardHandler),
		Retry:  model.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	if err != nil {
		return Stream{}, fmt.Errorf("hosttest: record the stream: %w", err)
	}
	defer h.Close(context.WithoutCancel(ctx))
	var got []host.Progress
	sess := h.Session(spec.SessionID)
	res, err := sess.Send(ctx, spec.Message, host.SendOptions{OnProgress: func(p host.Progress) { got = append(got, p) }})
	if err != nil {
		return Stream{}, fmt.Errorf("hosttest: record the stream: %w", err)
	}
	snap, err := snapshotOf(ctx, sess)
	if err != nil {
		return Stream{}, fmt.Errorf("hosttest: record the stream: %w", err)
	}
	// One JSON document of everything, its ids made stable at once, so
	// that an id has one name throughout.
	type recording struct {
		Run      string
		Progress []host.Progress
		Final    host.Snapshot
	}
	raw, err := json.Marshal(recording{res.RunID, got, snap})
	if err != nil {
		return Stream{}, fmt.Errorf("hosttest: record the stream: %w", err)
	}
	var out recording
	if err := json.Unmarshal(stabilize(raw), &out); err != nil {
		return Stream{}, fmt.Errorf("hosttest: record the stream: %w", err)
	}
	// A tool's duration is the wall clock's, which a recording made on
	// virtual time does not keep (it would differ between recordings).
	for i := range out.Final.Transcript.Items {
		for j := range out.Final.Transcript.Items[i].ToolCalls {
			out.Final.Transcript.Items[i].ToolCalls[j].DurationMS = 0
		}
	}
	s := Stream{SessionID: spec.SessionID, RunID: out.Run, Final: out.Final}
	for i, p := range out.Progress {
		if p.Retry != nil {
			p.Retry.DelayMS = spec.Pace.Milliseconds()
		}
		s.Events = append(s.Events, TimedProgress{At: time.Duration(i+1) * spec.Pace, Progress: p})
	}
	return s, nil
}

// snapshotOf is the session as a viewer attaching to it sees it.
func snapshotOf(ctx context.Context, s *host.Session) (host.Snapshot, error) {
	tr, err := s.Transcript(ctx)
	if err != nil {
		return host.Snapshot{}, err
	}
	st, err := s.Status(ctx)
	if err != nil {
		return host.Snapshot{}, err
	}
	return host.Snapshot{Transcript: tr, Status: st}, nil
}

// stabilize renames the minted ids of a JSON document in order of
// appearance, and sets its times to the zero time.
func stabilize(raw []byte) []byte {
	names := map[string]string{}
	counts := map[string]int{}
	raw = stableIDs.ReplaceAllFunc(raw, func(id []byte) []byte {
		if n, ok := names[string(id)]; ok {
			return []byte(n)
		}
		m := stableIDs.FindSubmatch(id)
		kind := string(m[1])
		counts[kind]++
		n := fmt.Sprintf("%s_%d", kind, counts[kind])
		names[string(id)] = n
		return []byte(n)
	})
	return times.ReplaceAll(raw, []byte(`"0001-01-01T00:00:00Z"`))
}

// times matches the RFC 3339 times of a JSON document.
var times = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)

// Updates returns the stream as a viewer attached from the start reads it
// ([host.Attachment]): the session before the run (its user message), then
// each progress event, then the session after the run.
func (s Stream) Updates() []host.Update {
	before := host.Snapshot{Status: host.Status{SessionID: s.SessionID, State: host.StateRunning, RunID: s.RunID}}
	before.Transcript.SessionID = s.SessionID
	for _, it := range s.Final.Transcript.Items {
		if it.Kind == ledger.ItemUser {
			before.Transcript.Items = append(before.Transcript.Items, it)
			break
		}
	}
	out := []host.Update{{Snapshot: &before}}
	for i := range s.Events {
		out = append(out, host.Update{Progress: &s.Events[i].Progress})
	}
	final := s.Final
	return append(out, host.Update{Snapshot: &final})
}

// Play hands the stream's events to fn, each once clock reaches its
// virtual time, in order, until the last or ctx's end. The test moves the
// clock on ([Clock.Advance]): nothing waits on real time.
func (s Stream) Play(ctx context.Context, clock *Clock, fn func(host.Progress)) error {
	for _, e := range s.Events {
		if err := clock.WaitUntil(ctx, e.At); err != nil {
			return err
		}
		fn(e.Progress)
	}
	return nil
}

// Clock is a virtual clock for UI tests: it stands at a time that only
// [Clock.Advance] moves on, and wakes those waiting for a time it passed.
// The zero value stands at 0. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Duration
	waiters []clockWaiter
}

type clockWaiter struct {
	at   time.Duration
	wake chan struct{}
}

// NewClock returns a clock standing at 0.
func NewClock() *Clock { return &Clock{} }

// Now returns the clock's time.
func (c *Clock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d and wakes those waiting for a time up to
// the new one.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
	sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at < c.waiters[j].at })
	n := 0
	for n < len(c.waiters) && c.waiters[n].at <= c.now {
		close(c.waiters[n].wake)
		n++
	}
	c.waiters = c.waiters[n:]
}

// WaitUntil returns once the clock stands at at or later, or with ctx's
// error when ctx ends first.
func (c *Clock) WaitUntil(ctx context.Context, at time.Duration) error {
	c.mu.Lock()
	if c.now >= at {
		c.mu.Unlock()
		return nil
	}
	w := clockWaiter{at: at, wake: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
