package plugins

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/agentichost/agentic/ledger"
)

// countJournal is a host.Journal that keeps nothing and counts writes.
type countJournal struct{ writes int }

func (c *countJournal) Recorded() (string, []ledger.JournalEntry) { return "", nil }
func (c *countJournal) Record(context.Context, string, []ledger.JournalEntry) error {
	c.writes++
	return nil
}
func (c *countJournal) Event(context.Context, string) ([]byte, bool, error) { return nil, false, nil }

// aborted runs fn and returns the error a journal ended the call with.
func aborted(fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			a, ok := p.(*callAbort)
			if !ok {
				panic(p)
			}
			err = a.err
		}
	}()
	fn()
	return nil
}

// TestJournalBounds: a call's journal takes MaxJournalEntries entries and
// MaxJournalBytes bytes, and the call past either ends with ErrJournalFull;
// a run of clock readings takes one entry, its bytes counted.
func TestJournalBounds(t *testing.T) {
	j := &journal{sink: &countJournal{}, source: "sha256:x", softQ: map[string][]byte{}}
	ctx := context.Background()
	err := aborted(func() {
		for range MaxJournalEntries {
			j.record(ctx, ledger.JournalEntry{Op: ledger.JournalKVGet, Request: "sha256:k"}, false)
		}
	})
	if err != nil {
		t.Fatalf("%d entries: %v, want room for them", MaxJournalEntries, err)
	}
	err = aborted(func() { j.record(ctx, ledger.JournalEntry{Op: ledger.JournalKVGet, Request: "sha256:k"}, false) })
	if !errors.Is(err, ErrJournalFull) {
		t.Fatalf("entry %d: %v, want ErrJournalFull", MaxJournalEntries+1, err)
	}

	j = &journal{sink: &countJournal{}, source: "sha256:x", softQ: map[string][]byte{}}
	big := make([]byte, MaxJournalBytes/2)
	err = aborted(func() {
		j.record(ctx, ledger.JournalEntry{Op: ledger.JournalHTTP, Answer: big}, true)
		j.record(ctx, ledger.JournalEntry{Op: ledger.JournalHTTP, Answer: big}, true)
	})
	if !errors.Is(err, ErrJournalFull) || j.entries != 1 {
		t.Fatalf("past %d bytes: %v after %d entries, want ErrJournalFull after 1", MaxJournalBytes, err, j.entries)
	}

	j = &journal{sink: &countJournal{}, source: "sha256:x", softQ: map[string][]byte{}}
	for range 1000 {
		j.monotonic(1)
	}
	if len(j.pending) != 1 || len(j.pending[0].Answer) != 8000 || j.bytes != 8000+len(ledger.JournalNanotime) {
		t.Fatalf("1,000 readings of the clock: %d pending entries, %d bytes, want one entry of 8,000", len(j.pending), j.bytes)
	}
	for i := 1; i < 1000; i++ {
		prev := int64(binary.BigEndian.Uint64(j.pending[0].Answer[(i-1)*8:]))
		if cur := int64(binary.BigEndian.Uint64(j.pending[0].Answer[i*8:])); cur <= prev {
			t.Fatalf("reading %d of the monotonic clock is %d, after %d", i, cur, prev)
		}
	}
}

// TestJournalStreamsBounded: a guest spinning on its clock and its random
// numbers journals at most maxJournalStreams of them, and never fails nor
// writes for it: the readings past the bound are the host's own, live.
func TestJournalStreamsBounded(t *testing.T) {
	sink := &countJournal{}
	j := &journal{sink: sink, source: "sha256:x", softQ: map[string][]byte{}}
	err := aborted(func() {
		buf := make([]byte, 256)
		for i := range 200_000 {
			j.monotonic(int64(i))
			j.soft(ledger.JournalRandom, buf)
		}
	})
	if err != nil || sink.writes != 0 {
		t.Fatalf("200,000 readings of each: %v, %d writes; want neither", err, sink.writes)
	}
	kept := 0
	for _, e := range j.pending {
		kept += len(e.Answer)
	}
	if kept > maxJournalStreams {
		t.Errorf("%d bytes of readings journaled, the bound is %d", kept, maxJournalStreams)
	}
}
