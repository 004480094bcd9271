package storagetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// runRewriter checks a [storage.Rewriter] through the contract alone: fn
// sees each event's encoding in order, what it returns is what loads
// after, a dry run, a failing fn and a done ctx write nothing, other
// sessions are untouched, appends go on after a rewrite, and a session
// another owner leases is refused.
func runRewriter(t *testing.T, s storage.Storage) {
	rw, ok := s.(storage.Rewriter)
	if !ok {
		t.Skip("the store does not implement storage.Rewriter")
	}
	ctx := t.Context()
	events := seqEvents("rw", 0, 5)
	appendOK(t, s, ctx, "rw", events[0])
	appendOK(t, s, ctx, "rw", events[1:4]...) // a batch
	appendOK(t, s, ctx, "rw", events[4])
	other := seqEvents("rw-other", 0, 2)
	appendOK(t, s, ctx, "rw-other", other...)

	// edit rewrites each event as a tool that edits ledgers would: its
	// poke's text changed, encoded again.
	edit := func(b []byte) ([]byte, error) {
		e, err := ledger.Decode(b)
		if err != nil {
			return nil, err
		}
		e.Poke.Text += " (edited)"
		return ledger.Encode(e)
	}
	edited := make([]ledger.Event, len(events))
	for i, e := range events {
		p := *e.Poke
		p.Text += " (edited)"
		e.Poke = &p
		edited[i] = e
	}
	wantLoad := func(t *testing.T, id string, want []ledger.Event, why string) {
		t.Helper()
		got, err := s.Load(ctx, id)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Load(%q) = %d events, %v; want the %d expected, in order", why, id, len(got), err, len(want))
		}
	}
	rewrite := func(t *testing.T, id string, fn func([]byte) ([]byte, error), dryRun bool, want storage.RewriteStats, why string) {
		t.Helper()
		if got, err := rw.Rewrite(ctx, id, fn, dryRun); err != nil || got != want {
			t.Errorf("%s: Rewrite(%q) = %+v, %v; want %+v", why, id, got, err, want)
		}
	}

	t.Run("SeesEachEventInOrder", func(t *testing.T) {
		var seen []ledger.Event
		rewrite(t, "rw", func(b []byte) ([]byte, error) {
			e, err := ledger.Decode(b)
			if err != nil {
				t.Errorf("fn got an encoding Decode refuses: %v", err)
			}
			seen = append(seen, e)
			return b, nil
		}, false, storage.RewriteStats{Events: 5}, "an fn that changes nothing")
		if !reflect.DeepEqual(seen, events) {
			t.Errorf("fn saw %d events, want the session's %d in order", len(seen), len(events))
		}
		wantLoad(t, "rw", events, "after a rewrite that changed nothing")
	})
	t.Run("DryRun", func(t *testing.T) {
		rewrite(t, "rw", edit, true, storage.RewriteStats{Events: 5, Changed: 5}, "a dry run")
		wantLoad(t, "rw", events, "after a dry run")
	})
	t.Run("FnFails", func(t *testing.T) {
		errNo := errors.New("storagetest: no")
		n := 0
		_, err := rw.Rewrite(ctx, "rw", func(b []byte) ([]byte, error) {
			if n++; n == 3 {
				return nil, errNo
			}
			return edit(b)
		}, false)
		if !errors.Is(err, errNo) {
			t.Errorf("Rewrite with an fn that fails on the third event = %v, want its error", err)
		}
		wantLoad(t, "rw", events, "after a rewrite whose fn failed")
	})
	t.Run("DoneContext", func(t *testing.T) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := rw.Rewrite(done, "rw", edit, false); !errors.Is(err, context.Canceled) {
			t.Errorf("Rewrite with a done ctx = %v, want context.Canceled", err)
		}
		wantLoad(t, "rw", events, "after a rewrite with a done ctx")
	})
	t.Run("Rewrites", func(t *testing.T) {
		rewrite(t, "rw", edit, false, storage.RewriteStats{Events: 5, Changed: 5}, "a rewrite")
		wantLoad(t, "rw", edited, "after the rewrite")
		wantLoad(t, "rw-other", other, "another session, after the rewrite")
		more := seqEvent("rw", 5)
		appendOK(t, s, ctx, "rw", more)
		wantLoad(t, "rw", append(edited[:5:5], more), "an append after the rewrite")
		rewrite(t, "rw", func(b []byte) ([]byte, error) { return b, nil }, false, storage.RewriteStats{Events: 6},
			"a rewrite after the append")
	})
	t.Run("MissingSession", func(t *testing.T) {
		rewrite(t, "rw-never-appended", edit, false, storage.RewriteStats{}, "a session with no events")
		wantLoad(t, "rw-never-appended", []ledger.Event{}, "a session with no events, after a rewrite")
	})
	t.Run("LeasedElsewhere", func(t *testing.T) {
		l, ok := s.(storage.Leaser)
		if !ok {
			t.Skip("the store does not implement storage.Leaser")
		}
		lease := acquire(t, l, "rw-other", "storagetest-owner", time.Minute)
		defer lease.Release(context.Background())
		if _, err := rw.Rewrite(ctx, "rw-other", edit, false); !errors.Is(err, storage.ErrLeaseHeld) {
			t.Errorf("Rewrite of a session another owner leases = %v, want storage.ErrLeaseHeld", err)
		}
		wantLoad(t, "rw-other", other, "a leased session, after a refused rewrite")
	})
	t.Run("Closed", func(t *testing.T) {
		c, ok := s.(storage.Closer)
		if !ok {
			t.Skip("the store does not implement storage.Closer")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := rw.Rewrite(ctx, "rw", edit, false); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("Rewrite after Close = %v, want storage.ErrClosed", err)
		}
	})
}
