//go:build unix

package host_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// staleLoads is a store whose loads leave out the messages of one request
// id until this host appends: a load that does not yet see another host's
// append (a replica behind, a failover) — the window in which a host's
// look for a request id and its append are two steps. It counts the
// appends this host tries of messages sent under a request id.
type staleLoads struct {
	*redis.Store
	hide  atomic.Pointer[string]
	tries atomic.Int32
	// deaf makes the session's watch tell nothing (notifications that lag
	// behind everything the test does).
	deaf bool
}

func (s *staleLoads) Watch(ctx context.Context, id string) (<-chan struct{}, error) {
	if !s.deaf {
		return s.Store.Watch(ctx, id)
	}
	ch := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}

// appending notes an append of evs about to be tried.
func (s *staleLoads) appending(evs []ledger.Event) {
	s.hide.Store(nil)
	for _, e := range evs {
		if e.Input != nil && e.Input.RequestID != "" {
			s.tries.Add(1)
		}
	}
}

func (s *staleLoads) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	evs, err := s.Store.Load(ctx, id)
	return s.hidden(evs), err
}

func (s *staleLoads) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	data, at, evs, err := s.Store.LoadSnapshot(ctx, id)
	return data, at, s.hidden(evs), err
}

// hidden is evs without the message hide names.
func (s *staleLoads) hidden(evs []ledger.Event) []ledger.Event {
	if rid := s.hide.Load(); rid != nil {
		evs = slices.DeleteFunc(evs, func(e ledger.Event) bool { return e.Input != nil && e.Input.RequestID == *rid })
	}
	return evs
}

func (s *staleLoads) AppendRequest(ctx context.Context, id, requestID string, evs ...ledger.Event) error {
	s.appending(evs)
	return s.Store.AppendRequest(ctx, id, requestID, evs...)
}

func (s *staleLoads) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	s.appending(evs)
	return s.Store.Append(ctx, id, evs...)
}

func (s *staleLoads) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (storage.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, id, owner, ttl)
	if err != nil {
		return nil, err
	}
	return &staleLease{Lease: l.(*redis.Lease), s: s}, nil
}

type staleLease struct {
	*redis.Lease
	s *staleLoads
}

func (l *staleLease) AppendRequest(ctx context.Context, requestID string, evs ...ledger.Event) error {
	l.s.appending(evs)
	return l.Lease.AppendRequest(ctx, requestID, evs...)
}

func (l *staleLease) Append(ctx context.Context, evs ...ledger.Event) error {
	l.s.appending(evs)
	return l.Lease.Append(ctx, evs...)
}

// waitTries waits until s has tried n appends of requests in all.
func waitTries(t *testing.T, s *staleLoads, n int32) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.tries.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the host tried %d appends of requests, want %d", s.tries.Load(), n)
		}
	}
}

// requestInputs returns the ids of the messages sent under requestID.
func requestInputs(evs []ledger.Event, requestID string) []string {
	var ids []string
	for _, e := range evs {
		if e.Input != nil && e.Input.RequestID == requestID {
			ids = append(ids, e.Input.MessageID)
		}
	}
	return ids
}

// TestRequestAppendedOnce: a message sent again under its request id (a
// client's retry while its first try was in doubt) by a host whose load
// does not yet show the first is appended once: the store checks the
// request id in the same step as the write, and the host follows the
// message appended first. Before, each of these appended a second copy —
// what the soak found in a Redis failover. Each path a new message takes:
// queued for another host's run, a run of its own, the run in flight here.
func TestRequestAppendedOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := mhOpen(t, srv.URL())
	staleB := &staleLoads{Store: mhOpen(t, srv.URL())}
	hostB := mhHost(t, staleB, "host-b", model.URL())
	gatedHostA := func(t *testing.T, deaf bool) (*host.Host, *staleLoads, *gatedModel) {
		client, err := provider.New(provider.Config{BaseURL: model.URL(), APIKey: "test"})
		if err != nil {
			t.Fatal(err)
		}
		gm := &gatedModel{inner: client, entered: make(chan struct{}), gate: make(chan struct{})}
		st := &staleLoads{Store: mhOpen(t, srv.URL()), deaf: deaf}
		return mhHost(t, st, "host-a", model.URL(), func(o *host.Options) { o.Model = gm }), st, gm
	}
	type result struct {
		res host.RunResult
		err error
	}
	check := func(t *testing.T, session, requestID string, results ...result) {
		t.Helper()
		evs := hosttest.Load(t, raw, session)
		ids := requestInputs(evs, requestID)
		if len(ids) != 1 {
			t.Fatalf("the ledger holds %d messages of request %s (%v), want 1: %s", len(ids), requestID, ids, kinds(evs))
		}
		for i, r := range results {
			if r.err != nil || r.res.Status != ledger.RunCompleted || r.res.MessageID != ids[0] {
				t.Errorf("send %d: %+v, %v; want message %s answered", i, r.res, r.err, ids[0])
			}
		}
		if n := hosttest.CountKind(evs, ledger.KindRunStart); n != 1 {
			t.Errorf("%d runs, want 1: %s", n, kinds(evs))
		}
	}

	t.Run("queued for another host's run", func(t *testing.T) {
		hostA, _, gm := gatedHostA(t, false)
		aDone := make(chan result, 1)
		go func() {
			res, err := hostA.Session("q").Send(ctx, "once", host.SendOptions{RequestID: "r1"})
			aDone <- result{res, err}
		}()
		<-gm.entered // A leads the run that holds r1
		rid, tried := "r1", staleB.tries.Load()
		staleB.hide.Store(&rid)
		bDone := make(chan result, 1)
		go func() {
			res, err := hostB.Session("q").Send(ctx, "once", host.SendOptions{RequestID: "r1"})
			bDone <- result{res, err}
		}()
		// B looked, did not see r1, and tried to queue it: the store
		// refused. Then A's run answers both.
		waitTries(t, staleB, tried+1)
		close(gm.gate)
		check(t, "q", "r1", <-aDone, <-bDone)
	})

	t.Run("a run of its own", func(t *testing.T) {
		// Another host queued r2 (and its follower has not taken the
		// session over yet); B does not see it, and starts a run.
		queued := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(),
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: "r2", Parts: []ledger.Part{ledger.TextPart("once")}}}
		if err := raw.Append(ctx, "o", queued); err != nil {
			t.Fatal(err)
		}
		rid := "r2"
		staleB.hide.Store(&rid)
		res, err := hostB.Session("o").Send(ctx, "once", host.SendOptions{RequestID: "r2"})
		check(t, "o", "r2", result{res, err})
	})

	// A's watch of the session tells it nothing: that another host queued
	// the message, A learns from the store's refusal alone.
	t.Run("the run in flight here", func(t *testing.T) {
		hostA, storeA, gm := gatedHostA(t, true)
		aDone := make(chan result, 1)
		go func() {
			res, err := hostA.Session("j").Send(ctx, "first", host.SendOptions{})
			aDone <- result{res, err}
		}()
		<-gm.entered
		// Another host queues r3 into A's run; A's run, held in its model
		// call, has not reloaded its view, and A is sent r3 again.
		queued := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(),
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: "r3", Parts: []ledger.Part{ledger.TextPart("again")}}}
		if err := raw.Append(ctx, "j", queued); err != nil {
			t.Fatal(err)
		}
		jDone := make(chan result, 1)
		go func() {
			res, err := hostA.Session("j").Send(ctx, "again", host.SendOptions{RequestID: "r3"})
			jDone <- result{res, err}
		}()
		waitTries(t, storeA, 1)
		close(gm.gate)
		a, j := <-aDone, <-jDone
		if a.err != nil || a.res.Status != ledger.RunCompleted {
			t.Fatalf("A's first send: %+v, %v", a.res, a.err)
		}
		check(t, "j", "r3", j)
	})
}

// slowLoads is a store whose next load (once armed) lasts until the lease
// taken for it was renewed three times, or, if it never is, until it had
// four times its ttl to lapse: a long session's load on a short lease.
type slowLoads struct {
	*redis.Store
	armed    atomic.Bool
	renewals atomic.Int32
	ttl      time.Duration
	stuck    atomic.Bool // renewals reach nobody (a stalled network): the lease lapses
}

func (s *slowLoads) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (storage.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, id, owner, ttl)
	if err != nil {
		return nil, err
	}
	return &countedLease{Lease: l.(*redis.Lease), s: s}, nil
}

type countedLease struct {
	*redis.Lease
	s *slowLoads
}

func (l *countedLease) Renew(ctx context.Context) error {
	if l.s.stuck.Load() {
		return nil
	}
	err := l.Lease.Renew(ctx)
	if err == nil {
		l.s.renewals.Add(1)
	}
	return err
}

func (s *slowLoads) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	s.slow()
	return s.Store.Load(ctx, id)
}

func (s *slowLoads) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	s.slow()
	return s.Store.LoadSnapshot(ctx, id)
}

// slow makes the armed load last until the lease was renewed 3 times (or 4
// TTLs passed).
func (s *slowLoads) slow() {
	if s.armed.CompareAndSwap(true, false) {
		s.renewals.Store(0)
		for deadline := time.Now().Add(4 * s.ttl); s.renewals.Load() < 3 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestLongLoadKeepsLease: the lease a host takes to lead a session is
// renewed from the moment it is taken, so that a load longer than the
// lease's ttl (a long session, a slow store) does not let it lapse before
// the run's first append: the message is accepted and answered. Before,
// renewals started with the run, and such a message failed with "session
// lease was lost" (a 500 in serve: found measuring recovery at 100,000
// events with lease_ttl 3s). And a lease lost before the first append (a
// host paused past its ttl, renewals that reach nobody) makes the message
// enter the session again rather than fail.
func TestLongLoadKeepsLease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{})
	const ttl = 300 * time.Millisecond
	store := &slowLoads{Store: mhOpen(t, srv.URL()), ttl: ttl}
	h := mhHost(t, store, "host-a", model.URL(), func(o *host.Options) { o.LeaseTTL = ttl })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store.armed.Store(true)
	res, err := h.Session("long").Send(ctx, "hello", host.SendOptions{})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("a send whose load outlasts the lease's ttl: %+v, %v", res, err)
	}
	if n := store.renewals.Load(); n < 3 {
		t.Errorf("%d renewals during the load, want 3", n)
	}

	// Renewals that reach nobody: the lease lapses during the load, the
	// first append is refused, and the message enters the session again
	// (this host leads it again): answered once.
	store.stuck.Store(true)
	store.armed.Store(true)
	res, err = h.Session("stalled").Send(ctx, "hello again", host.SendOptions{})
	store.stuck.Store(false)
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("a send whose lease lapsed before its first append: %+v, %v", res, err)
	}
	evs := hosttest.Load(t, store.Store, "stalled")
	if hosttest.CountKind(evs, ledger.KindInput) != 1 || hosttest.CountKind(evs, ledger.KindRunStart) != 1 {
		t.Errorf("the ledger %s, want one message and one run", hosttest.Kinds(evs))
	}
}
