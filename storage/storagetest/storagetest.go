// Package storagetest is the conformance suite for [storage.Storage]
// implementations, in the manner of testing/fstest.TestFS: an adapter's
// tests call [Run] with a function that opens a fresh, empty store, and
// Run reports every way in which the store breaks the contract documented
// in package storage, each as its own t.Errorf under a named subtest.
//
// Stores that several hosts share also call [RunShared], with a function
// that opens two handles on one backend.
//
// The package also exports [EveryKind], a generator of one valid event of
// each ledger kind with every field set, for anyone who needs realistic
// events in a test.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Run runs the conformance suite against the stores that open returns.
//
// Each check is a subtest, run sequentially, and calls open once to get a
// fresh store that holds no sessions; open should register whatever
// cleanup the store needs with t.Cleanup (which, for a [storage.Closer],
// may find the store already closed by the suite: Close must then not
// panic). open may call t.Fatal if it cannot open a store.
//
// Run checks, for every store:
//
//   - a session that has no events loads as an empty slice and no error;
//   - every event kind round-trips verbatim (reflect.DeepEqual, nothing
//     normalised: times in UTC to the nanosecond, binary data byte for
//     byte), appended alone or in a batch;
//   - order within a session, across single appends and batches;
//   - a batch is atomic: one with an event the codec refuses fails whole,
//     and Loads running during appends see whole batches only;
//   - an Append of no events does not make the session exist;
//   - read-your-writes, from the same and from another goroutine;
//   - the caller's slices and the loaded events do not alias the store;
//   - 200 sessions stay isolated from one another;
//   - large events (a 1 MiB text, a 4 MiB binary part);
//   - concurrent appends to different sessions (16 goroutines × 50
//     appends) lose and interleave nothing;
//   - appends to one session from several goroutines, serialised by the
//     caller, are all kept in the caller's order;
//   - a done ctx makes Append and Load return ctx.Err() without effect;
//   - invalid session ids fail with [storage.ErrInvalidSessionID], and the
//     extreme valid ones work;
//
// and, for the optional interfaces the store implements:
//
//   - [storage.Lister]: ListSessions returns exactly the sessions that have
//     events, once each;
//   - [storage.Closer]: after Close, every method fails with
//     [storage.ErrClosed];
//   - [storage.Leaser]: a lease is exclusive between two owners (and
//     re-entrant for its owner), renewals keep it, it expires after its
//     ttl so that another owner acquires it, a fenced Append by an owner
//     whose lease expired or was released fails with
//     [storage.ErrLeaseLost] and appends nothing, and Release frees it at
//     once;
//   - [storage.RequestAppender] (skipped when a view's store has none): a
//     request's second message is refused with a [*storage.RequestSeenError]
//     naming its first, whole batch and all, whether the first came
//     through AppendRequest, a plain Append or a lease
//     ([storage.LeaseRequestAppender]), and whichever of them is refused;
//     eight appends of one request at once land one; other requests,
//     sessions and no request id go on; a deleted session's request ids
//     go with it, and a replaced one's are the replacement's;
//   - [storage.Watcher]: a watch fires after an append made after it
//     started, coalesces without blocking appends, and its channel is
//     closed when its ctx ends (and, for a [storage.Closer], when the
//     store is closed);
//   - [storage.KV]: a missing key is a value and deleting it a no-op;
//     values round-trip byte for byte (empty, every byte value, the largest
//     allowed); overwrite and delete; namespaces and keys never collide,
//     whatever separators, dots, NUL bytes or case they hold, and are not
//     sessions; Len counts a namespace's keys through Sets, overwrites and
//     Deletes; invalid namespaces, keys and values are refused and change
//     nothing; no aliasing of the caller's slices; concurrent Sets leave
//     each key its last value, and a reader only ever sees whole values; a
//     done ctx and Close stop every operation;
//   - [storage.Blobs]: bytes round-trip under their [storage.BlobDigest]
//     (empty, every byte value, 1 MiB); the same bytes put twice are one
//     blob, whose Stored time the second put moves on; a missing blob is a
//     value and deleting it a no-op; ListBlobs lists each blob once, sorted,
//     with its size; an invalid digest fails with [storage.ErrInvalidKey];
//     no aliasing; puts at once keep every blob whole; blobs are neither
//     sessions nor values; a done ctx and Close stop every operation; and
//     two [storage.Prefix] views keep their blobs apart from each other's
//     and from the store's (which needs [storage.BlobScoper]);
//   - [storage.Rewriter]: fn sees each event's encoding in order, and
//     what it returns is what loads after, with the session's appends
//     going on after it; a dry run, an fn that fails (Rewrite fails with
//     its error) and a done ctx write nothing; other sessions are left as
//     they were; a session with no events is no error; a session another
//     owner leases is refused with [storage.ErrLeaseHeld]; after Close,
//     [storage.ErrClosed];
//   - [storage.Deleter]: a deleted session loads empty and is not listed,
//     its neighbours and KV values are untouched, deleting again (or a
//     session never appended to) is a no-op, the id then starts a new
//     ledger, its lease goes with it, and invalid ids, a done ctx and
//     Close are refused;
//   - [storage.NamespaceLister]: Namespaces lists exactly the namespaces
//     with keys under a prefix (sorted; glob characters are no patterns;
//     no sessions), DeleteNamespace empties one and no other, and a
//     namespace emptied key by key is not listed;
//   - [storage.Fencer]: a version is "" for a session without events,
//     stays with a Load and changes with every Append (a message queued
//     under another owner's lease included); ReplaceSession refuses a
//     stale version (and "" for a session with events) with
//     [storage.ErrSessionChanged], and changes nothing when refused, when
//     its events fail or hold one the codec refuses, or with a done ctx;
//     with the current version it replaces the ledger (more than a page of
//     events, in order), creates a session from "", and deletes one with
//     no events, its lease with it; a long id through a [storage.Prefix]
//     view is listed and forgotten with it; invalid ids and Close;
//   - [storage.BlobFence]: a marked blob is deleted, unless it was put
//     again, marked again, or held since its mark; a release clears the
//     mark; a hold may come before the put, two holds need two releases,
//     and a hold lapses after its ttl; invalid digests and a done ctx are
//     refused; two views' fences are apart.
//
// The checks that need two handles on one backend (what one appends, the
// other loads; leases exclude across handles; a watch on one fires for an
// append by the other) are in [RunShared].
func Run(t *testing.T, open func(t *testing.T) storage.Storage) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Storage)
	}{
		{"EmptySession", testEmptySession},
		{"RoundTripEveryKind", testRoundTripEveryKind},
		{"Order", testOrder},
		{"AtomicBatch", testAtomicBatch},
		{"BatchVisibleWhole", testBatchVisibleWhole},
		{"EmptyAppend", testEmptyAppend},
		{"ReadYourWrites", testReadYourWrites},
		{"NoAliasing", testNoAliasing},
		{"ManySessions", testManySessions},
		{"LargeEvents", testLargeEvents},
		{"ConcurrentSessions", testConcurrentSessions},
		{"SerialisedSameSession", testSerialisedSameSession},
		{"DoneContext", testDoneContext},
		{"InvalidSessionID", testInvalidSessionID},
		{"ListSessions", testListSessions},
		{"Close", testClose},
		{"Leaser", func(t *testing.T, s storage.Storage) { runLeaser(t, s, s) }},
		{"RequestAppender", func(t *testing.T, s storage.Storage) { runRequestAppender(t, s, s) }},
		{"Watcher", func(t *testing.T, s storage.Storage) { runWatcher(t, s, s) }},
		{"KV", func(t *testing.T, s storage.Storage) { runKV(t, s, s) }},
		{"Counter", func(t *testing.T, s storage.Storage) { runCounter(t, s, s) }},
		{"Blobs", func(t *testing.T, s storage.Storage) { runBlobs(t, s, s) }},
		{"Snapshotter", func(t *testing.T, s storage.Storage) { runSnapshotter(t, s, s) }},
		{"Rewriter", runRewriter},
		{"Deleter", runDeleter},
		{"NamespaceLister", runNamespaceLister},
		{"Fencer", func(t *testing.T, s storage.Storage) { runFencer(t, s, s) }},
		{"BlobFence", func(t *testing.T, s storage.Storage) { runBlobFence(t, s, s) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatal("open returned a nil store")
			}
			tc.fn(t, s)
		})
	}
}

func testEmptySession(t *testing.T, s storage.Storage) {
	got, err := s.Load(t.Context(), "never-appended")
	if err != nil {
		t.Errorf("Load of a session with no events: %v, want no error (a missing session is a value)", err)
	}
	if len(got) != 0 {
		t.Errorf("Load of a session with no events returned %d events, want 0", len(got))
	}
}

func testRoundTripEveryKind(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	// One append per event.
	want := EveryKind("run-single")
	for _, e := range want {
		appendOK(t, s, ctx, "single", e)
	}
	got, err := s.Load(ctx, "single")
	if err != nil {
		t.Errorf("Load(single): %v", err)
	} else {
		diffEvents(t, "events appended one by one", got, want)
		checkTimes(t, got)
	}
	// The same kinds in one batch.
	want = EveryKind("run-batch")
	appendOK(t, s, ctx, "batch", want...)
	got, err = s.Load(ctx, "batch")
	if err != nil {
		t.Errorf("Load(batch): %v", err)
	} else {
		diffEvents(t, "events appended as one batch", got, want)
	}
}

// checkTimes reports loaded times that are not in UTC: DeepEqual already
// catches them, but this names the cause.
func checkTimes(t *testing.T, events []ledger.Event) {
	t.Helper()
	for _, e := range events {
		if e.Time.Location() != time.UTC {
			t.Errorf("event %s: loaded time %v is in %v, want UTC", e.ID, e.Time, e.Time.Location())
		}
	}
}

func testOrder(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	var want []ledger.Event
	n := 0
	// Singles and batches of growing size, interleaved.
	for round := range 12 {
		size := 1
		if round%2 == 1 {
			size = round
		}
		batch := seqEvents("order", n, size)
		n += size
		if appendOK(t, s, ctx, "order", batch...) {
			want = append(want, batch...)
		}
	}
	got, err := s.Load(ctx, "order")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events of singles and batches", got, want)
}

func testAtomicBatch(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	want := seqEvents("atomic", 0, 3)
	appendOK(t, s, ctx, "atomic", want...)

	invalid := seqEvent("atomic", 99)
	invalid.ID = "" // the codec refuses an event without an id
	for _, tc := range []struct {
		name  string
		batch []ledger.Event
	}{
		{"first", []ledger.Event{invalid, seqEvent("atomic", 10), seqEvent("atomic", 11)}},
		{"middle", []ledger.Event{seqEvent("atomic", 20), invalid, seqEvent("atomic", 21)}},
		{"last", []ledger.Event{seqEvent("atomic", 30), seqEvent("atomic", 31), invalid}},
	} {
		if err := s.Append(ctx, "atomic", tc.batch...); err == nil {
			t.Errorf("Append of a batch with an invalid event (%s): no error, want the codec's error", tc.name)
		}
	}
	got, err := s.Load(ctx, "atomic")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events after failed batches (a failed Append must leave nothing visible)", got, want)

	// A failed first append must not create the session either.
	if err := s.Append(ctx, "atomic-new", seqEvent("atomic-new", 0), invalid); err == nil {
		t.Errorf("Append of a batch with an invalid event to a new session: no error")
	}
	if got, err := s.Load(ctx, "atomic-new"); err != nil || len(got) != 0 {
		t.Errorf("Load after a failed first Append = %d events, %v; want 0 events, no error", len(got), err)
	}
	if l, ok := s.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		} else if slices.Contains(ids, "atomic-new") {
			t.Errorf("ListSessions lists %q, whose only Append failed", "atomic-new")
		}
	}
}

func testBatchVisibleWhole(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	const batches, size = 40, 5
	all := seqEvents("whole", 0, batches*size)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				got, err := s.Load(ctx, "whole")
				if err != nil {
					t.Errorf("Load during appends: %v", err)
					return
				}
				if len(got)%size != 0 || len(got) > len(all) {
					t.Errorf("Load during appends of batches of %d returned %d events: part of a batch is visible", size, len(got))
					return
				}
				if !diffEvents(t, "Load during appends", got, all[:len(got)]) {
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	for i := range batches {
		appendOK(t, s, ctx, "whole", all[i*size:(i+1)*size]...)
	}
	close(done)
	wg.Wait()
}

func testEmptyAppend(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	// The contract leaves the error of an empty Append open; what matters
	// is that it has no effect.
	_ = s.Append(ctx, "empty")
	_ = s.Append(ctx, "empty", []ledger.Event{}...)
	if got, err := s.Load(ctx, "empty"); err != nil || len(got) != 0 {
		t.Errorf("Load after Append of no events = %d events, %v; want 0 events, no error", len(got), err)
	}
	if l, ok := s.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		} else if slices.Contains(ids, "empty") {
			t.Errorf("ListSessions lists %q, which only had an Append of no events", "empty")
		}
	}
	// And it does not disturb a session that has events.
	want := seqEvents("empty2", 0, 2)
	appendOK(t, s, ctx, "empty2", want[0])
	_ = s.Append(ctx, "empty2")
	appendOK(t, s, ctx, "empty2", want[1])
	got, err := s.Load(ctx, "empty2")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events around an Append of no events", got, want)
}

func testReadYourWrites(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	// Same goroutine: every Append is visible to the next Load.
	var want []ledger.Event
	for i := range 20 {
		e := seqEvent("ryw", i)
		if !appendOK(t, s, ctx, "ryw", e) {
			continue
		}
		want = append(want, e)
		got, err := s.Load(ctx, "ryw")
		if err != nil {
			t.Errorf("Load after append %d: %v", i, err)
			continue
		}
		if !diffEvents(t, fmt.Sprintf("Load right after append %d", i), got, want) {
			return
		}
	}
	// Another goroutine: Append there, Load here once it returned.
	done := make(chan error)
	want = nil
	for i := range 20 {
		e := seqEvent("ryw-other", i)
		go func() { done <- s.Append(ctx, "ryw-other", e) }()
		if err := <-done; err != nil {
			t.Errorf("Append %d from another goroutine: %v", i, err)
			continue
		}
		want = append(want, e)
		got, err := s.Load(ctx, "ryw-other")
		if err != nil {
			t.Errorf("Load after append %d from another goroutine: %v", i, err)
			continue
		}
		if !diffEvents(t, fmt.Sprintf("Load right after append %d from another goroutine", i), got, want) {
			return
		}
	}
}

func testNoAliasing(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	events := EveryKind("run-alias")
	appendOK(t, s, ctx, "alias", events...)
	// The caller reuses its buffers after Append returned.
	scribble(events)
	got, err := s.Load(ctx, "alias")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := EveryKind("run-alias")
	diffEvents(t, "events after the caller modified the slices it appended", got, want)
	// A reader modifies what it loaded.
	scribble(got)
	got, err = s.Load(ctx, "alias")
	if err != nil {
		t.Fatalf("second Load: %v", err)
	}
	diffEvents(t, "events after a reader modified the slices it loaded", got, want)
}

// scribble modifies, in place, everything of the events that a store could
// share with its caller: byte slices, slices of values and pointed-to
// bodies.
func scribble(events []ledger.Event) {
	for i := range events {
		e := &events[i]
		if e.Input != nil {
			for j := range e.Input.Parts {
				for k := range e.Input.Parts[j].Data {
					e.Input.Parts[j].Data[k] ^= 0x5a
				}
				e.Input.Parts[j].Text += " (changed)"
			}
			e.Input.MessageID = "changed"
		}
		if e.RunStart != nil && len(e.RunStart.Inputs) > 0 {
			e.RunStart.Inputs[0] = "changed"
		}
		if e.Step != nil {
			for j := range e.Step.ToolCalls {
				e.Step.ToolCalls[j].Name = "changed"
			}
			for k := range e.Step.Raw {
				if e.Step.Raw[k] == 'x' {
					e.Step.Raw[k] = 'y'
				}
			}
			if e.Step.Usage.IsBYOK != nil {
				*e.Step.Usage.IsBYOK = !*e.Step.Usage.IsBYOK
			}
		}
		if e.ApprovalRequest != nil && len(e.ApprovalRequest.Input) > 1 {
			e.ApprovalRequest.Input[1] = ' '
		}
		if e.Poke != nil {
			e.Poke.Text = "changed"
		}
	}
}

func testManySessions(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	const n = 200
	id := func(i int) string { return fmt.Sprintf("many-%03d", i) }
	all := make([][]ledger.Event, n)
	want := make([][]ledger.Event, n)
	// Each session's events go in two appends, the second pass after every
	// session had its first, so that sessions interleave.
	for i := range n {
		all[i] = seqEvents(id(i), 0, i%4+1)
		if appendOK(t, s, ctx, id(i), all[i][0]) {
			want[i] = append(want[i], all[i][0])
		}
	}
	for i := range n {
		if rest := all[i][1:]; len(rest) > 0 && appendOK(t, s, ctx, id(i), rest...) {
			want[i] = append(want[i], rest...)
		}
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = id(i)
		got, err := s.Load(ctx, id(i))
		if err != nil {
			t.Errorf("Load(%s): %v", id(i), err)
			continue
		}
		diffEvents(t, id(i), got, want[i])
	}
	if l, ok := s.(storage.Lister); ok {
		got, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		} else {
			checkIDs(t, fmt.Sprintf("ListSessions after %d sessions", n), got, ids)
		}
	}
}

func testLargeEvents(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	// 1 MiB of text with escapes and multi-byte runes, 4 MiB of binary.
	var b strings.Builder
	for b.Len() < 1<<20 {
		b.WriteString("line \"quoted\" <tag> & ünï \U0001F600\n\t")
	}
	text := b.String()[:1<<20]
	text = strings.ToValidUTF8(text, "") // cutting may split a rune
	blob := make([]byte, 4<<20)
	for i := range blob {
		blob[i] = byte(i*7 + i>>11)
	}
	blob[0], blob[1], blob[2] = 0x00, 0xff, 0xc3

	step := seqEvent("large", 0)
	step.Kind, step.Poke = ledger.KindStep, nil
	step.Step = &ledger.Step{ResponseID: "resp", Text: text}
	input := ledger.Event{
		ID: "large-input", Kind: ledger.KindInput, Time: base,
		Input: &ledger.Input{MessageID: "m", Parts: []ledger.Part{
			ledger.TextPart("see attachment"),
			{Type: ledger.PartFile, MIME: "application/octet-stream", Data: blob, Name: "blob.bin"},
		}},
	}
	after := seqEvent("large", 1)
	want := []ledger.Event{step, input, after}
	for _, e := range want {
		appendOK(t, s, ctx, "large", e)
	}
	got, err := s.Load(ctx, "large")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "large events", got, want)
}

func testConcurrentSessions(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	const goroutines, appends = 16, 50
	var wg sync.WaitGroup
	wants := make([][]ledger.Event, goroutines)
	for g := range goroutines {
		id := fmt.Sprintf("conc-%02d", g)
		wg.Go(func() {
			n := 0
			for i := range appends {
				batch := seqEvents(id, n, i%3+1)
				n += len(batch)
				if err := s.Append(ctx, id, batch...); err != nil {
					t.Errorf("Append(%s) %d: %v", id, i, err)
					continue
				}
				wants[g] = append(wants[g], batch...)
				if i%10 == 9 {
					got, err := s.Load(ctx, id)
					if err != nil {
						t.Errorf("Load(%s) during concurrent appends: %v", id, err)
						continue
					}
					diffEvents(t, fmt.Sprintf("%s after %d concurrent appends", id, i+1), got, wants[g])
				}
			}
		})
	}
	wg.Wait()
	for g := range goroutines {
		id := fmt.Sprintf("conc-%02d", g)
		got, err := s.Load(ctx, id)
		if err != nil {
			t.Errorf("Load(%s): %v", id, err)
			continue
		}
		diffEvents(t, id+" after all concurrent appends", got, wants[g])
	}
}

func testSerialisedSameSession(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	const goroutines, appends = 8, 25
	var (
		mu   sync.Mutex // the caller's serialisation, as the host does it
		want []ledger.Event
		wg   sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range appends {
				e := seqEvent(fmt.Sprintf("same-g%d", g), i)
				mu.Lock()
				err := s.Append(ctx, "same", e)
				if err == nil {
					want = append(want, e)
				}
				mu.Unlock()
				if err != nil {
					t.Errorf("Append from goroutine %d: %v", g, err)
				}
			}
		})
	}
	wg.Wait()
	got, err := s.Load(ctx, "same")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events appended from several goroutines in turn", got, want)
}

func testDoneContext(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	prior := seqEvents("done", 0, 2)
	appendOK(t, s, ctx, "done", prior...)
	if kv, ok := s.(storage.KV); ok {
		setOK(t, kv, ctx, "done", "k", []byte("old"))
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"canceled", canceled, context.Canceled},
		{"past deadline", expired, context.DeadlineExceeded},
	} {
		for _, id := range []string{"done", "done-new"} {
			err := s.Append(c.ctx, id, seqEvent(id, 50))
			if !errors.Is(err, c.want) {
				t.Errorf("Append(%s) with a %s ctx = %v, want %v", id, c.name, err, c.want)
			}
			if _, err := s.Load(c.ctx, id); !errors.Is(err, c.want) {
				t.Errorf("Load(%s) with a %s ctx: error %v, want %v", id, c.name, err, c.want)
			}
		}
		if l, ok := s.(storage.Lister); ok {
			if _, err := l.ListSessions(c.ctx); !errors.Is(err, c.want) {
				t.Errorf("ListSessions with a %s ctx: error %v, want %v", c.name, err, c.want)
			}
		}
		kvDoneContext(t, s, c.ctx, c.name, c.want)
	}
	got, err := s.Load(ctx, "done")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events after Appends with a done ctx (they must not happen)", got, prior)
	if kv, ok := s.(storage.KV); ok {
		wantValue(t, kv, ctx, "done", "k", []byte("old"), "after KV operations with a done ctx (they must not happen)")
	}
	if got, err := s.Load(ctx, "done-new"); err != nil || len(got) != 0 {
		t.Errorf("Load(done-new) after Appends with a done ctx = %d events, %v; want 0 events, no error", len(got), err)
	}
}

func testInvalidSessionID(t *testing.T, s storage.Storage) {
	ctx := t.Context()
	invalid := []string{
		"", "../x", "a/b", `a\b`, "..", ".hidden", "a b", "a\x00b", "a\nb", "é",
		strings.Repeat("x", 129), strings.Repeat("x", 200),
	}
	for _, id := range invalid {
		if storage.ValidSessionID(id) {
			t.Errorf("storage.ValidSessionID(%q) = true; the suite expected false", id)
			continue
		}
		err := s.Append(ctx, id, seqEvent("invalid", 0))
		if !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("Append(%q) = %v, want an error matching storage.ErrInvalidSessionID", id, err)
		}
		if _, err := s.Load(ctx, id); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("Load(%q): error %v, want an error matching storage.ErrInvalidSessionID", id, err)
		}
	}
	// The extremes of what is valid must work.
	for _, id := range []string{strings.Repeat("x", 128), "A.b_c:d-9", "0", "x.jsonl", "-"} {
		want := seqEvents(id, 0, 2)
		if !appendOK(t, s, ctx, id, want...) {
			continue
		}
		got, err := s.Load(ctx, id)
		if err != nil {
			t.Errorf("Load(%q): %v", id, err)
			continue
		}
		diffEvents(t, fmt.Sprintf("events of valid session %q", id), got, want)
	}
}

func testListSessions(t *testing.T, s storage.Storage) {
	l, ok := s.(storage.Lister)
	if !ok {
		t.Skip("the store does not implement storage.Lister")
	}
	ctx := t.Context()
	ids, err := l.ListSessions(ctx)
	if err != nil {
		t.Fatalf("ListSessions of an empty store: %v", err)
	}
	if len(ids) != 0 {
		t.Errorf("ListSessions of an empty store = %q, want none", ids)
	}
	want := []string{"list-a", "list-b", "list-c:1", strings.Repeat("L", 128)}
	for i, id := range want {
		appendOK(t, s, ctx, id, seqEvents(id, 0, i+1)...)
	}
	appendOK(t, s, ctx, "list-a", seqEvent("list-a", 9)) // a second append
	// Sessions that must not appear: only loaded, only empty appends.
	_, _ = s.Load(ctx, "list-loaded-only")
	_ = s.Append(ctx, "list-empty-append")
	ids, err = l.ListSessions(ctx)
	if err != nil {
		t.Fatalf("ListSessions: %v", err)
	}
	checkIDs(t, "ListSessions", ids, want)
}

// checkIDs reports every difference between two sets of session ids,
// including duplicates in got.
func checkIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	seen := make(map[string]int, len(got))
	for _, id := range got {
		seen[id]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s lists %q %d times, want once", what, id, n)
		}
		if !slices.Contains(want, id) {
			t.Errorf("%s lists %q, which has no events", what, id)
		}
	}
	for _, id := range want {
		if seen[id] == 0 {
			t.Errorf("%s does not list %q, which has events", what, id)
		}
	}
}

func testClose(t *testing.T, s storage.Storage) {
	c, ok := s.(storage.Closer)
	if !ok {
		t.Skip("the store does not implement storage.Closer")
	}
	ctx := t.Context()
	appendOK(t, s, ctx, "closing", seqEvent("closing", 0))
	if _, err := s.Load(ctx, "closing"); err != nil {
		t.Errorf("Load before Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Append(ctx, "closing", seqEvent("closing", 1)); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Append to a known session after Close = %v, want storage.ErrClosed", err)
	}
	if err := s.Append(ctx, "closing-new", seqEvent("closing-new", 0)); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Append to a new session after Close = %v, want storage.ErrClosed", err)
	}
	if _, err := s.Load(ctx, "closing"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Load after Close: error %v, want storage.ErrClosed", err)
	}
	if l, ok := s.(storage.Lister); ok {
		if _, err := l.ListSessions(ctx); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("ListSessions after Close: error %v, want storage.ErrClosed", err)
		}
	}
	kvClosed(t, s, ctx)
	blobsClosed(t, s, ctx)
}

// appendOK appends and reports an error; it tells whether Append succeeded.
func appendOK(t *testing.T, s storage.Storage, ctx context.Context, id string, events ...ledger.Event) bool {
	t.Helper()
	if err := s.Append(ctx, id, events...); err != nil {
		t.Errorf("Append(%q, %d events): %v", id, len(events), err)
		return false
	}
	return true
}

// maxReported bounds the differing events diffEvents details.
const maxReported = 5

// diffEvents reports every way got differs from want, naming for each
// differing event the first differing field; it tells whether they are
// equal.
func diffEvents(t *testing.T, what string, got, want []ledger.Event) bool {
	t.Helper()
	ok := true
	if len(got) != len(want) {
		t.Errorf("%s: loaded %d events, want %d", what, len(got), len(want))
		ok = false
	}
	bad := 0
	for i := range min(len(got), len(want)) {
		if reflect.DeepEqual(got[i], want[i]) {
			continue
		}
		ok = false
		if bad < maxReported {
			t.Errorf("%s: event %d (want id %q, kind %s) differs: %s", what, i, want[i].ID, want[i].Kind,
				firstDiff(reflect.ValueOf(got[i]), reflect.ValueOf(want[i]), "event"))
		}
		bad++
	}
	if bad > maxReported {
		t.Errorf("%s: %d more events differ", what, bad-maxReported)
	}
	return ok
}

var timeType = reflect.TypeFor[time.Time]()

// firstDiff describes the first difference between two values of the same
// type, by path: a field, an index, a nil-ness, a time's location.
func firstDiff(got, want reflect.Value, path string) string {
	if got.Type() == timeType {
		g, w := got.Interface().(time.Time), want.Interface().(time.Time)
		switch {
		case !g.Equal(w):
			return fmt.Sprintf("%s = %v, want %v", path, g, w)
		case g.Location() != w.Location():
			return fmt.Sprintf("%s is in location %v, want %v", path, g.Location(), w.Location())
		default:
			return fmt.Sprintf("%s = %#v, want %#v (a monotonic clock reading?)", path, g, w)
		}
	}
	switch got.Kind() {
	case reflect.Pointer:
		if got.IsNil() != want.IsNil() {
			return fmt.Sprintf("%s is nil=%v, want nil=%v", path, got.IsNil(), want.IsNil())
		}
		if got.IsNil() {
			break
		}
		return firstDiff(got.Elem(), want.Elem(), path)
	case reflect.Struct:
		for i := range got.NumField() {
			f := got.Type().Field(i)
			if !reflect.DeepEqual(got.Field(i).Interface(), want.Field(i).Interface()) {
				return firstDiff(got.Field(i), want.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Slice:
		if got.IsNil() != want.IsNil() {
			return fmt.Sprintf("%s is nil=%v, want nil=%v", path, got.IsNil(), want.IsNil())
		}
		if got.Type().Elem().Kind() == reflect.Uint8 { // []byte, json.RawMessage
			g, w := got.Bytes(), want.Bytes()
			i := 0
			for i < len(g) && i < len(w) && g[i] == w[i] {
				i++
			}
			return fmt.Sprintf("%s (%d bytes) differs from the %d bytes wanted at byte %d: %s, want %s",
				path, len(g), len(w), i, clip(string(g[i:])), clip(string(w[i:])))
		}
		if got.Len() != want.Len() {
			return fmt.Sprintf("%s has length %d, want %d", path, got.Len(), want.Len())
		}
		for i := range got.Len() {
			if !reflect.DeepEqual(got.Index(i).Interface(), want.Index(i).Interface()) {
				return firstDiff(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	case reflect.String:
		return fmt.Sprintf("%s = %s, want %s", path, clip(got.String()), clip(want.String()))
	}
	return fmt.Sprintf("%s = %s, want %s", path, clip(fmt.Sprint(got.Interface())), clip(fmt.Sprint(want.Interface())))
}

// clip quotes s, shortened to a readable length.
func clip(s string) string {
	const max = 120
	if len(s) > max {
		return fmt.Sprintf("%q… (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}
