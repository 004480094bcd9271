package storagetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// requestInput returns a queued message sent under requestID, whose message
// id is msgID.
func requestInput(session string, n int, requestID, msgID string) ledger.Event {
	e := queuedInput(session, n)
	e.Input.MessageID, e.Input.RequestID = msgID, requestID
	return e
}

// wantSeen checks that err is a *storage.RequestSeenError naming msgID.
func wantSeen(t *testing.T, err error, what, msgID string) {
	t.Helper()
	seen, ok := errors.AsType[*storage.RequestSeenError](err)
	switch {
	case !ok:
		t.Errorf("%s = %v, want a *storage.RequestSeenError naming %s", what, err, msgID)
	case seen.MessageID != msgID:
		t.Errorf("%s names message %q, want %q", what, seen.MessageID, msgID)
	case !errors.Is(err, storage.ErrRequestSeen):
		t.Errorf("%s = %v does not match storage.ErrRequestSeen", what, err)
	}
}

// requestAppender returns s's RequestAppender, skipping the test when it has
// none or the store under a view has none (errors.ErrUnsupported).
func requestAppender(t *testing.T, s storage.Storage) storage.RequestAppender {
	t.Helper()
	ra, ok := s.(storage.RequestAppender)
	if !ok {
		t.Skip("the store does not implement storage.RequestAppender")
	}
	if err := ra.AppendRequest(t.Context(), "requests-probe", "probe", requestInput("requests-probe", 1, "probe", "probe-msg")); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the store under the view does not implement storage.RequestAppender")
	} else if err != nil && !errors.Is(err, storage.ErrRequestSeen) { // (probed through both handles)
		t.Fatalf("AppendRequest of a first message: %v", err)
	}
	return ra
}

// runRequestAppender runs the checks of storage.RequestAppender with store
// a and, for what another host would see, store b (the same store, or
// another handle on one backend).
func runRequestAppender(t *testing.T, a, b storage.Storage) {
	ra := requestAppender(t, a)
	rb := requestAppender(t, b)
	t.Run("Once", func(t *testing.T) {
		ctx := t.Context()
		const id = "requests-once"
		first := requestInput(id, 1, "r1", "m1")
		if err := ra.AppendRequest(ctx, id, "r1", first); err != nil {
			t.Fatalf("AppendRequest of a new request: %v", err)
		}
		// The same request again, by the other handle, as another message
		// in a batch with another event: refused whole.
		wantSeen(t, rb.AppendRequest(ctx, id, "r1", seqEvent(id, 2), requestInput(id, 3, "r1", "m3")), "AppendRequest of a request appended already", "m1")
		// A plain Append records its messages' request ids too.
		plain := requestInput(id, 4, "r2", "m4")
		appendOK(t, b, ctx, id, plain)
		wantSeen(t, ra.AppendRequest(ctx, id, "r2", requestInput(id, 5, "r2", "m5")), "AppendRequest of a request a plain Append wrote", "m4")
		// The first message of a request id is the one kept, even when a
		// plain Append wrote a second.
		second := requestInput(id, 6, "r2", "m6")
		appendOK(t, a, ctx, id, second)
		wantSeen(t, rb.AppendRequest(ctx, id, "r2", requestInput(id, 7, "r2", "m7")), "AppendRequest after a request's second message", "m4")
		// Another request goes on, after the refusals.
		other := requestInput(id, 8, "r3", "m8")
		if err := rb.AppendRequest(ctx, id, "r3", other); err != nil {
			t.Fatalf("AppendRequest of another request after refusals: %v", err)
		}
		// No request id: a plain append.
		poke := seqEvent(id, 9)
		if err := ra.AppendRequest(ctx, id, "", poke); err != nil {
			t.Fatalf("AppendRequest with no request id: %v", err)
		}
		wantLoad(t, b, ctx, id, []ledger.Event{first, plain, second, other, poke}, "after requests refused and appended")
		// Sessions are apart.
		if err := ra.AppendRequest(ctx, id+"-other", "r1", requestInput(id+"-other", 1, "r1", "x1")); err != nil {
			t.Errorf("AppendRequest of a request id another session holds: %v", err)
		}
	})
	t.Run("Lease", func(t *testing.T) {
		la, okA := a.(storage.Leaser)
		if !okA {
			t.Skip("the store does not implement storage.Leaser")
		}
		ctx := t.Context()
		const id = "requests-lease"
		lease := acquire(t, la, id, "owner-a", longTTL)
		defer lease.Release(ctx)
		lra, ok := lease.(storage.LeaseRequestAppender)
		if !ok {
			t.Fatalf("the lease of a storage.RequestAppender (%T) does not implement storage.LeaseRequestAppender", lease)
		}
		led := seqEvent(id, 1)
		led.Kind, led.Poke = ledger.KindInput, nil
		led.Input = &ledger.Input{MessageID: "m1", RequestID: "r1", Parts: []ledger.Part{ledger.TextPart("led")}}
		if err := lra.AppendRequest(ctx, "r1", led); err != nil {
			t.Fatalf("Lease.AppendRequest of a new request: %v", err)
		}
		// Another host queues the same request: refused, naming the
		// leaseholder's message.
		wantSeen(t, rb.AppendRequest(ctx, id, "r1", requestInput(id, 2, "r1", "m2")), "AppendRequest of a queued message the leaseholder appended", "m1")
		// Another host queues a new request; the leaseholder's copy is
		// refused.
		queued := requestInput(id, 3, "r2", "m3")
		if err := rb.AppendRequest(ctx, id, "r2", queued); err != nil {
			t.Fatalf("AppendRequest of a queued message into a leased session: %v", err)
		}
		wantSeen(t, lra.AppendRequest(ctx, "r2", led), "Lease.AppendRequest of a request another host queued", "m3")
		// Unfenced, a batch that is not only queued messages is refused
		// under the lease, as Append's is.
		if err := rb.AppendRequest(ctx, id, "r4", seqEvent(id, 4)); !errors.Is(err, storage.ErrLeaseHeld) {
			t.Errorf("unfenced AppendRequest of a run's event under another's lease = %v, want storage.ErrLeaseHeld", err)
		}
		wantLoad(t, b, ctx, id, []ledger.Event{led, queued}, "after leased and queued requests")
	})
	t.Run("AtOnce", func(t *testing.T) {
		ctx := t.Context()
		const id, n = "requests-at-once", 8
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			appended []string
			seen     = map[string]int{}
		)
		for i := range n {
			s := ra
			if i%2 == 1 {
				s = rb
			}
			wg.Go(func() {
				msg := fmt.Sprintf("m%d", i)
				err := s.AppendRequest(ctx, id, "r", requestInput(id, i, "r", msg))
				mu.Lock()
				defer mu.Unlock()
				if e, ok := errors.AsType[*storage.RequestSeenError](err); ok {
					seen[e.MessageID]++
				} else if err != nil {
					t.Errorf("AppendRequest %d: %v", i, err)
				} else {
					appended = append(appended, msg)
				}
			})
		}
		wg.Wait()
		if len(appended) != 1 {
			t.Fatalf("%d appends of one request at once landed (%v), want 1", len(appended), appended)
		}
		if seen[appended[0]] != n-1 {
			t.Errorf("refusals named %v, want %d naming %s", seen, n-1, appended[0])
		}
		got, err := b.Load(ctx, id)
		if err != nil || len(got) != 1 || got[0].Input == nil || got[0].Input.MessageID != appended[0] {
			t.Errorf("Load after the appends at once = %d events, %v; want %s alone", len(got), err, appended[0])
		}
	})
	t.Run("Forgotten", func(t *testing.T) {
		ctx := t.Context()
		const id = "requests-forgotten"
		if err := ra.AppendRequest(ctx, id, "r1", requestInput(id, 1, "r1", "m1")); err != nil {
			t.Fatal(err)
		}
		if d, ok := a.(storage.Deleter); ok {
			if err := d.DeleteSession(ctx, id); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("DeleteSession: %v", err)
			} else if err == nil {
				again := requestInput(id, 2, "r1", "m2")
				if err := rb.AppendRequest(ctx, id, "r1", again); err != nil {
					t.Errorf("AppendRequest of a deleted session's request: %v, want it appended (the session's request ids go with it)", err)
				}
				wantLoad(t, b, ctx, id, []ledger.Event{again}, "after the session was deleted and its request sent again")
			}
		}
		f, ok := a.(storage.Fencer)
		if !ok {
			return
		}
		const rid = "requests-replaced"
		if err := ra.AppendRequest(ctx, rid, "old", requestInput(rid, 1, "old", "m-old")); err != nil {
			t.Fatal(err)
		}
		repl := []ledger.Event{requestInput(rid, 2, "new", "m-new")}
		if err := f.ReplaceSession(ctx, rid, version(t, f, ctx, rid), eventsSeq(repl, nil)); err != nil {
			t.Fatalf("ReplaceSession: %v", err)
		}
		wantSeen(t, rb.AppendRequest(ctx, rid, "new", requestInput(rid, 3, "new", "m3")), "AppendRequest of a request the replacement holds", "m-new")
		old := requestInput(rid, 4, "old", "m4")
		if err := rb.AppendRequest(ctx, rid, "old", old); err != nil {
			t.Errorf("AppendRequest of a request only the replaced ledger held: %v, want it appended", err)
		}
		wantLoad(t, b, ctx, rid, append(repl, old), "after a replacement and requests")
	})
}
