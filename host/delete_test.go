package host_test

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestSessionDelete: a finished session goes whole; one parked for
// approvals is refused with an InUseError unless forced, and a forced
// deletion empties the inbox of it; one whose lease another host holds is
// refused; a missing one is no error.
func TestSessionDelete(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	var published atomic.Int64
	agent := host.Agent{Tools: []host.Tool{publishTool(&published)}}
	hs := approvalHost(t, store, agent)

	// A finished session.
	if _, err := hs.Host.Session("done").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(hs.Events("done"))
	rep, err := hs.Host.Session("done").Delete(ctx, host.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != n || rep.Bytes == 0 || rep.SessionID != "done" {
		t.Errorf("report %+v, want %d events", rep, n)
	}
	if got := hs.Events("done"); len(got) != 0 {
		t.Errorf("%d events left", len(got))
	}
	if ids, _ := store.ListSessions(ctx); len(ids) != 0 {
		t.Errorf("sessions left: %q", ids)
	}

	// A parked session.
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{"title":"x"}`}}})
	res, err := hs.Host.Session("parked").Send(ctx, "publish", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("send: %+v, %v", res, err)
	}
	_, err = hs.Host.Session("parked").Delete(ctx, host.DeleteOptions{})
	inUse, ok := errors.AsType[*host.InUseError](err)
	if !ok || !errors.Is(err, host.ErrSessionInUse) || inUse.State != host.StateApprovalRequired || inUse.Approvals != 1 {
		t.Fatalf("Delete of a parked session = %v, want an InUseError for its approval", err)
	}
	if len(hs.Events("parked")) == 0 {
		t.Fatal("a refused Delete deleted the session")
	}
	rep, err = hs.Host.Session("parked").Delete(ctx, host.DeleteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.IndexEntries != 2 { // the inbox entry and the approval's session
		t.Errorf("report %+v, want 2 index entries", rep)
	}
	if inbox, err := hs.Host.PendingApprovals(ctx); err != nil || len(inbox) != 0 {
		t.Errorf("inbox after a forced Delete: %+v, %v", inbox, err)
	}
	if sid, err := hs.Host.ApprovalSession(ctx, res.Approvals[0].ApprovalID); err != nil || sid != "" {
		t.Errorf("ApprovalSession after Delete = %q, %v; want none", sid, err)
	}
	if published.Load() != 0 {
		t.Error("the parked call ran")
	}

	// A missing session.
	if rep, err := hs.Host.Session("never").Delete(ctx, host.DeleteOptions{}); err != nil || rep.Events != 0 {
		t.Errorf("Delete of a missing session = %+v, %v", rep, err)
	}
	if _, err := hs.Host.Session("bad/id").Delete(ctx, host.DeleteOptions{}); !errors.Is(err, host.ErrInvalidInput) {
		t.Errorf("Delete of an invalid id = %v, want ErrInvalidInput", err)
	}
}

// TestSessionDeleteLeased: a session whose lease another host holds is
// refused, naming the holder; forced, it goes, lease included.
func TestSessionDeleteLeased(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	store := mhOpen(t, srv.URL())
	hs := hosttest.New(t, host.Options{Storage: store})
	if _, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AcquireLease(ctx, "s", "other-host", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := hs.Host.Session("s").Delete(ctx, host.DeleteOptions{})
	if inUse, ok := errors.AsType[*host.InUseError](err); !ok || inUse.Holder != "other-host" {
		t.Fatalf("Delete of a leased session = %v, want an InUseError naming the holder", err)
	}
	if _, err := hs.Host.Session("s").Delete(ctx, host.DeleteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if holder, _, _ := store.LeaseHolder(ctx, "s"); holder != "" {
		t.Errorf("the lease is held by %q after the deletion", holder)
	}
}

// TestSessionDeleteLiveRun: a session whose run is in flight here is
// refused; forced, the run is cancelled, waited for, and the session goes.
func TestSessionDeleteLiveRun(t *testing.T) {
	ctx := context.Background()
	hs := hosttest.New(t, host.Options{Storage: memory.New()})
	hs.Model.Enqueue(hosttest.Reply{Text: "thinking ", Stall: time.Hour})
	run, err := hs.Host.Session("live").Start(ctx, "think", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = hs.Host.Session("live").Delete(ctx, host.DeleteOptions{})
	if inUse, ok := errors.AsType[*host.InUseError](err); !ok || inUse.State != host.StateRunning {
		t.Fatalf("Delete of a session with a run in flight = %v, want an InUseError", err)
	}
	if len(hs.Events("live")) == 0 {
		t.Fatal("a refused Delete deleted the session")
	}
	rep, err := hs.Host.Session("live").Delete(ctx, host.DeleteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events == 0 || len(hs.Events("live")) != 0 {
		t.Errorf("report %+v, %d events left", rep, len(hs.Events("live")))
	}
	res, _ := run.Wait(ctx)
	if res.Status != ledger.RunCancelled {
		t.Errorf("the run ended %s, want cancelled", res.Status)
	}
	if hs.Host.IsRunning("live") {
		t.Error("the run is still in flight")
	}
}

// slowDeletes is a memory store whose removal of a session (the fenced
// replacement a deletion makes) waits until released, and which counts the
// reads and appends of that session made meanwhile.
type slowDeletes struct {
	*memory.Store
	entered, release chan struct{}
	deleting         atomic.Bool
	during           atomic.Int32
}

func (s *slowDeletes) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	s.deleting.Store(true)
	close(s.entered)
	<-s.release
	defer s.deleting.Store(false)
	return s.Store.ReplaceSession(ctx, id, version, events)
}

func (s *slowDeletes) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	if s.deleting.Load() {
		s.during.Add(1)
	}
	return s.Store.Load(ctx, id)
}

func (s *slowDeletes) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	if s.deleting.Load() {
		s.during.Add(1)
	}
	return s.Store.LoadSnapshot(ctx, id)
}

func (s *slowDeletes) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if s.deleting.Load() {
		s.during.Add(1)
	}
	return s.Store.Append(ctx, id, evs...)
}

// TestSendWaitsForDelete: a message sent to this host while it deletes the
// session waits for the deletion (it neither reads nor appends to the
// ledger being deleted), then starts a new session of that id.
func TestSendWaitsForDelete(t *testing.T) {
	ctx := context.Background()
	store := &slowDeletes{Store: memory.New(), entered: make(chan struct{}), release: make(chan struct{})}
	hs := hosttest.New(t, host.Options{Storage: store})
	sess := hs.Host.Session("d")
	if _, err := sess.Send(ctx, "old", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := sess.Delete(ctx, host.DeleteOptions{})
		deleted <- err
	}()
	<-store.entered
	sent := make(chan host.RunResult, 1)
	go func() {
		res, err := sess.Send(ctx, "new", host.SendOptions{})
		if err != nil {
			t.Error(err)
		}
		sent <- res
	}()
	// The send's chance to touch the ledger under deletion, if it did
	// not wait (the assertions hold however long this is).
	time.Sleep(100 * time.Millisecond)
	close(store.release)
	if err := <-deleted; err != nil {
		t.Fatalf("Delete: %v", err)
	}
	res := <-sent
	if n := store.during.Load(); n != 0 {
		t.Errorf("the send read or appended to the session %d times while it was deleted", n)
	}
	evs := hs.Events("d")
	if res.Status != ledger.RunCompleted || len(evs) == 0 || evs[0].Input == nil || ledger.TextOf(evs[0].Input.Parts) != "new" ||
		hosttest.CountKind(evs, ledger.KindInput) != 1 {
		t.Errorf("after the deletion: %+v, ledger %s; want a new session holding the new message alone", res, hosttest.Kinds(evs))
	}
}
