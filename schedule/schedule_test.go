package schedule

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

// clock is a clock a test sets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func at(t *testing.T, s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// inputs returns the request ids of the session's messages.
func inputs(t *testing.T, store storage.Storage, session string) []string {
	var ids []string
	for _, ev := range hosttest.Load(t, store, session) {
		if ev.Input != nil {
			ids = append(ids, ev.Input.RequestID)
		}
	}
	return ids
}

func newRunner(t *testing.T, h *host.Host, store storage.Storage, c *clock, s Schedule) *Runner {
	r, err := New(Options{Host: h, Storage: store, Schedules: []Schedule{s}, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tick(t *testing.T, r *Runner) {
	t.Helper()
	if err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleFiresInItsTimezone: "0 8 * * *" in Europe/Paris fires at
// 07:00 UTC in winter, once per occurrence, as an ordinary message whose
// request id names the schedule and the occurrence.
func TestScheduleFiresInItsTimezone(t *testing.T) {
	store := memory.New()
	hs := hosttest.New(t, host.Options{Storage: store})
	c := &clock{t: at(t, "2026-12-03T06:59:30Z")}
	r := newRunner(t, hs.Host, store, c, Schedule{ID: "digest", Session: "daily", Cron: "0 8 * * *", Timezone: "Europe/Paris", Text: "the digest"})
	tick(t, r)
	c.set(at(t, "2026-12-03T06:59:59Z"))
	tick(t, r)
	if got := inputs(t, store, "daily"); len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	c.set(at(t, "2026-12-03T07:00:05Z"))
	tick(t, r)
	tick(t, r)
	c.set(at(t, "2026-12-04T07:00:01Z"))
	tick(t, r)
	want := "schedule:digest@2026-12-03T07:00:00Z,schedule:digest@2026-12-04T07:00:00Z"
	evs := hosttest.WaitLedger(t, store, "daily", 10*time.Second, "both answered", func(evs []ledger.Event) bool { return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0 })
	if got := strings.Join(inputs(t, store, "daily"), ","); got != want {
		t.Fatalf("fired %s, want %s", got, want)
	}
	// The state names the last message sent and its run, and the next
	// occurrence.
	states, err := r.States(context.Background())
	if err != nil || len(states) != 1 {
		t.Fatalf("%v %v", states, err)
	}
	st := states[0]
	var lastMsg string
	for _, ev := range evs {
		if ev.Input != nil {
			lastMsg = ev.Input.MessageID
		}
	}
	if !st.Fixed || st.Last == nil || st.Last.Outcome != OutcomeSent || st.Last.MessageID != lastMsg || st.Last.RunID == "" ||
		!st.Last.Occurrence.Equal(at(t, "2026-12-04T07:00:00Z")) || !st.Next.Equal(at(t, "2026-12-05T07:00:00Z")) {
		t.Errorf("state %+v, last %+v; want message %s and its run", st, st.Last, lastMsg)
	}
}

// TestScheduleMissed: occurrences that passed while no host ran fire once
// (the latest) with run_once, and not at all with skip; then the schedule
// goes on.
func TestScheduleMissed(t *testing.T) {
	for _, tc := range []struct{ missed, want string }{
		{MissedRunOnce, "schedule:m@2026-12-06T08:00:00Z,schedule:m@2026-12-07T08:00:00Z"},
		{MissedSkip, "schedule:m@2026-12-07T08:00:00Z"},
	} {
		t.Run(tc.missed, func(t *testing.T) {
			store := memory.New()
			hs := hosttest.New(t, host.Options{Storage: store})
			c := &clock{t: at(t, "2026-12-03T07:00:00Z")}
			s := Schedule{ID: "m", Session: "s", Cron: "0 8 * * *", Text: "hi", Missed: tc.missed}
			tick(t, newRunner(t, hs.Host, store, c, s))
			// Every host was down for three days; one starts.
			c.set(at(t, "2026-12-06T09:30:00Z"))
			r := newRunner(t, hs.Host, store, c, s)
			tick(t, r)
			tick(t, r)
			c.set(at(t, "2026-12-07T08:00:00Z"))
			tick(t, r)
			hosttest.WaitLedger(t, store, "s", 10*time.Second, "answered", func(evs []ledger.Event) bool { return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0 })
			if got := strings.Join(inputs(t, store, "s"), ","); got != tc.want {
				t.Fatalf("fired %s, want %s", got, tc.want)
			}
		})
	}
}

// TestScheduleOnceAcrossHosts: two hosts on one Redis run their
// runners: the one that leads fires the occurrence; the other then fires
// it again as after a crash between sending it and recording it: the
// session gets it once.
func TestScheduleOnceAcrossHosts(t *testing.T) {
	rds := redistest.Start(t, redistest.Options{})
	c := &clock{t: at(t, "2026-12-03T07:59:00Z")}
	s := Schedule{ID: "x", Session: "shared", Cron: "0 8 * * *", Text: "hello"}
	var runners []*Runner
	var store storage.Storage
	for range 2 {
		st, err := redis.Open(context.Background(), rds.URL(), redis.Options{WatchBlock: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		store = st
		hs := hosttest.New(t, host.Options{Storage: st, LeaseTTL: 2 * time.Second})
		runners = append(runners, newRunner(t, hs.Host, st, c, s))
	}
	tick(t, runners[0])
	c.set(at(t, "2026-12-03T08:00:01Z"))
	// Both run: one leads, under the lease, and fires.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range runners {
		r.opts.Poll = 20 * time.Millisecond
		wg.Go(func() { r.Run(ctx) })
	}
	hosttest.WaitLedger(t, store, "shared", 15*time.Second, "fired", func(evs []ledger.Event) bool { return len(evs) > 0 })
	for range 10 { // a few more polls of both
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	// A host that died after sending, before recording.
	if err := runners[1].setFired(context.Background(), "x", Fired{Occurrence: at(t, "2026-12-03T07:59:00Z")}); err != nil {
		t.Fatal(err)
	}
	tick(t, runners[1])
	hosttest.WaitLedger(t, store, "shared", 15*time.Second, "answered", func(evs []ledger.Event) bool { return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0 })
	if got := strings.Join(inputs(t, store, "shared"), ","); got != "schedule:x@2026-12-03T08:00:00Z" {
		t.Fatalf("fired %s", got)
	}
}

// TestScheduleOverlapReject: an occurrence found while the session's run
// works is refused when its agent rejects overlapping turns, and skipped.
func TestScheduleOverlapReject(t *testing.T) {
	store := memory.New()
	m := hosttest.NewModel()
	m.Delay = 50 * time.Millisecond
	agent := host.Agent{Name: "strict", Model: hosttest.DefaultModel, Overlap: host.OverlapReject}
	hs := hosttest.New(t, host.Options{Storage: store, Model: m, Agent: agent})
	c := &clock{t: at(t, "2026-12-03T07:59:00Z")}
	r, err := New(Options{Host: hs.Host, Storage: store, Now: c.now, Agents: map[string]host.Agent{"strict": agent},
		Schedules: []Schedule{{ID: "o", Session: "busy", Agent: "strict", Cron: "0 8 * * *", Text: "scheduled"}}})
	if err != nil {
		t.Fatal(err)
	}
	tick(t, r)
	if _, err := hs.Host.Session("busy").Start(context.Background(), strings.Repeat("word ", 40), host.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	c.set(at(t, "2026-12-03T08:00:00Z"))
	tick(t, r)
	hosttest.WaitLedger(t, store, "busy", 20*time.Second, "answered", func(evs []ledger.Event) bool { return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0 })
	if got := inputs(t, store, "busy"); len(got) != 1 || got[0] != "" {
		t.Fatalf("inputs %q: want the user's message only", got)
	}
	states, err := r.States(context.Background())
	if err != nil || len(states) != 1 || states[0].Last == nil || states[0].Last.Outcome != OutcomeRejected || states[0].Last.RunID == "" {
		t.Fatalf("state %+v %v: want the occurrence rejected, naming the run that worked", states, err)
	}
}

func TestScheduleValidate(t *testing.T) {
	err := Schedule{ID: "", Session: "bad id", Cron: "61 * * * *", Timezone: "Mars/Olympus", Missed: "sometimes"}.Validate()
	for _, want := range []string{"id", "session", "text is required", "missed", "timezone", "cron"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want %q", err, want)
		}
	}
	if err := (Schedule{ID: "feb30", Session: "s", Cron: "0 0 30 2 *", Text: "x"}).Validate(); err == nil || !strings.Contains(err.Error(), "never occurs") {
		t.Errorf("a date that never comes: %v", err)
	}
}
