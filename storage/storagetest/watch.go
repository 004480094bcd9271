package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage"
)

// runWatcher runs the watch checks: watches on store a, appends through
// store b (the same store, or another handle on its backend).
func runWatcher(t *testing.T, a, b storage.Storage) {
	wa, okA := a.(storage.Watcher)
	_, okB := b.(storage.Watcher)
	switch {
	case !okA && !okB:
		t.Skip("the store does not implement storage.Watcher")
	case okA != okB:
		t.Fatal("only one of the two handles implements storage.Watcher")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b storage.Storage, w storage.Watcher)
	}{
		{"Fires", testWatchFires},
		{"Coalesces", testWatchCoalesces},
		{"LeaseAppend", testWatchLeaseAppend},
		{"Invalid", testWatchInvalid},
		{"Ends", testWatchEnds}, // last: it may close the store
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, a, b, wa) })
	}
}

// startWatch watches a session until the test ends.
func startWatch(t *testing.T, w storage.Watcher, id string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	ch, err := w.Watch(ctx, id)
	if err != nil {
		t.Fatalf("Watch(%q): %v", id, err)
	}
	if ch == nil {
		t.Fatalf("Watch(%q) returned a nil channel", id)
	}
	return ch
}

// wantFire waits for a value on the channel, failing the test after
// patience.
func wantFire(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("the watch channel was closed while waiting for %s", why)
		}
	case <-time.After(patience):
		t.Fatalf("the watch did not fire within %v of %s", patience, why)
	}
}

// drain empties the channel without waiting.
func drain(ch <-chan struct{}) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func testWatchFires(t *testing.T, a, b storage.Storage, w storage.Watcher) {
	ctx := t.Context()
	// A session that had events before the watch, and one that had none.
	appendOK(t, b, ctx, "watch-old", seqEvents("watch-old", 0, 2)...)
	for _, id := range []string{"watch-old", "watch-new"} {
		ch := startWatch(t, w, id)
		for i := range 3 {
			// Earlier appends may have left a value pending; what must
			// hold is that every append is followed by one.
			drain(ch)
			appendOK(t, b, ctx, id, seqEvent(id, 10+i))
			wantFire(t, ch, "an append by the other handle")
		}
	}
}

func testWatchCoalesces(t *testing.T, a, b storage.Storage, w storage.Watcher) {
	ctx := t.Context()
	const id = "watch-many"
	ch := startWatch(t, w, id)
	// Nobody reads the channel: appends must not block on it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			if !appendOK(t, b, ctx, id, seqEvent(id, i)) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatalf("50 appends did not finish within %v while nobody read the watch channel: the store blocks on it", patience)
	}
	wantFire(t, ch, "50 appends")
	got, err := a.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events appended during a watch", got, seqEvents(id, 0, 50))
	// And it still fires after that.
	time.Sleep(50 * time.Millisecond)
	drain(ch)
	appendOK(t, b, ctx, id, seqEvent(id, 50))
	wantFire(t, ch, "an append after a burst")
}

func testWatchLeaseAppend(t *testing.T, a, b storage.Storage, w storage.Watcher) {
	lb, ok := b.(storage.Leaser)
	if !ok {
		t.Skip("the store does not implement storage.Leaser")
	}
	const id = "watch-lease"
	ch := startWatch(t, w, id)
	lease := acquire(t, lb, id, "owner-b", longTTL)
	defer lease.Release(t.Context())
	leaseAppendOK(t, lease, t.Context(), "owner-b", seqEvents(id, 0, 3)...)
	wantFire(t, ch, "a fenced append")
}

func testWatchEnds(t *testing.T, a, b storage.Storage, w storage.Watcher) {
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := w.Watch(ctx, "watch-end")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	appendOK(t, b, t.Context(), "watch-end", seqEvent("watch-end", 0))
	cancel()
	wantClosed(t, ch, "its ctx was canceled")
	// Appends after the end must not panic the store (a send on a closed
	// channel).
	appendOK(t, b, t.Context(), "watch-end", seqEvent("watch-end", 1))

	if _, ok := a.(storage.Closer); !ok || a != b {
		return
	}
	// Closing the store ends its watches. (Only with one handle: closing
	// one of two would leave the other's checks to a closed backend.)
	ch2, err := w.Watch(t.Context(), "watch-end")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := a.(storage.Closer).Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wantClosed(t, ch2, "the store was closed")
	if _, err := w.Watch(t.Context(), "watch-end"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Watch after Close: error %v, want storage.ErrClosed", err)
	}
}

// wantClosed waits for the channel to be closed, reading the values still
// pending.
func wantClosed(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("the watch channel was not closed within %v after %s", patience, why)
		}
	}
}

func testWatchInvalid(t *testing.T, a, b storage.Storage, w storage.Watcher) {
	ctx := t.Context()
	for _, id := range []string{"", "a/b", ".."} {
		if _, err := w.Watch(ctx, id); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("Watch(%q): error %v, want an error matching storage.ErrInvalidSessionID", id, err)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Watch(canceled, "watch-canceled"); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a canceled ctx: error %v, want context.Canceled", err)
	}
}
