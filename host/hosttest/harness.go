package hosttest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// Harness is a host built for a test (see [New]).
type Harness struct {
	// Host is the host under test.
	Host *host.Host
	// Store is its storage.
	Store storage.Storage
	// Model is its model when New made it (Options.Model was nil), nil
	// otherwise.
	Model *Model

	t testing.TB
}

// DefaultModel is the model id of the agent New fills in.
const DefaultModel = "test/model"

// New builds a host for t from opts, filling what opts leaves zero: Storage
// is a memory store, Model a [NewModel] with an empty script (see
// DefaultReply), Agent.Model [DefaultModel], Logger one that discards. The
// host is closed when the test ends (its runs get 10s to end, then stop
// unrecorded); an invalid opts fails the test.
func New(t testing.TB, opts host.Options) *Harness {
	t.Helper()
	hs := &Harness{t: t}
	if opts.Storage == nil {
		opts.Storage = memory.New()
	}
	if opts.Model == nil {
		hs.Model = NewModel()
		opts.Model = hs.Model
	}
	if opts.Agent.Model == "" {
		opts.Agent.Model = DefaultModel
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := host.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	hs.Host, hs.Store = h, opts.Storage
	return hs
}

// Events returns the ledger of the session id, failing the test when it
// cannot be loaded.
func (hs *Harness) Events(id string) []ledger.Event {
	hs.t.Helper()
	return Load(hs.t, hs.Store, id)
}

// Load returns the ledger of the session id of store, failing the test when
// it cannot be loaded within 10s.
func Load(t testing.TB, store storage.Storage, id string) []ledger.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := store.Load(ctx, id)
	if err != nil {
		t.Fatalf("load session %s: %v", id, err)
	}
	return events
}

// WaitLedger loads the session id of store until ok accepts its ledger, and
// returns that ledger; it fails the test, saying what it waited for, when
// that takes longer than d.
func WaitLedger(t testing.TB, store storage.Storage, id string, d time.Duration, what string, ok func([]ledger.Event) bool) []ledger.Event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		events := Load(t, store, id)
		if ok(events) {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; ledger: %s", what, d, Kinds(events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kinds returns the kinds of events, space-separated: a ledger's shape, for
// a test to compare ("input run-start step run-end").
func Kinds(events []ledger.Event) string {
	ks := make([]string, len(events))
	for i, e := range events {
		ks[i] = string(e.Kind)
	}
	return strings.Join(ks, " ")
}

// CountKind returns the number of events of kind k.
func CountKind(events []ledger.Event, k ledger.Kind) int {
	n := 0
	for _, e := range events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// Settled reports whether a ledger has events, every run of it ended and
// every message of it was picked up by a run.
func Settled(events []ledger.Event) bool {
	return len(events) > 0 && len(ledger.OpenRuns(events)) == 0 && len(ledger.PendingInputs(events)) == 0
}
