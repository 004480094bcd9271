package storagetest_test

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"math"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

func TestEveryKind(t *testing.T) {
	evs := storagetest.EveryKind("run-1")
	kinds := ledger.Kinds()
	if len(evs) != len(kinds) {
		t.Fatalf("EveryKind returned %d events, want one per kind (%d)", len(evs), len(kinds))
	}
	ids := map[string]bool{}
	for i, e := range evs {
		if e.Kind != kinds[i] {
			t.Errorf("event %d has kind %s, want %s", i, e.Kind, kinds[i])
		}
		if err := ledger.Validate(e); err != nil {
			t.Errorf("event %d is invalid: %v", i, err)
		}
		if ids[e.ID] {
			t.Errorf("event %d repeats id %q", i, e.ID)
		}
		ids[e.ID] = true
		if e.Time.Location() != time.UTC || e.Time.Nanosecond()%1000 == 0 {
			t.Errorf("event %d: time %v is not UTC with nanoseconds", i, e.Time)
		}
		if i > 0 && !e.Time.After(evs[i-1].Time) {
			t.Errorf("event %d: time does not increase", i)
		}
		// The codec itself must round-trip the generator's events, or
		// the suite would blame stores for the codec's faults.
		b, err := ledger.Encode(e)
		if err != nil {
			t.Errorf("event %d: Encode: %v", i, err)
			continue
		}
		d, err := ledger.Decode(b)
		if err != nil {
			t.Errorf("event %d: Decode: %v", i, err)
		} else if !reflect.DeepEqual(d, e) {
			t.Errorf("event %d (%s) does not round-trip through the ledger codec", i, e.Kind)
		}
	}
	in := evs[0].Input
	var binary int
	for _, p := range in.Parts {
		if len(p.Data) == 0 {
			continue
		}
		binary++
		if !bytes.Contains(p.Data, []byte{0}) || utf8.Valid(p.Data) {
			t.Errorf("%s part data has no NUL or is valid UTF-8", p.Type)
		}
	}
	if binary < 3 {
		t.Errorf("the input has %d binary parts, want image, audio and file", binary)
	}
	if again := storagetest.EveryKind("run-1"); !reflect.DeepEqual(again, evs) {
		t.Error("EveryKind is not deterministic")
	}
	if other := storagetest.EveryKind("run-2"); reflect.DeepEqual(other[0].Input.Parts[1].Data, in.Parts[1].Data) {
		t.Error("EveryKind gives the same binary data for two run ids")
	}
	// Fresh values: modifying one result leaves the next alone.
	evs[0].Input.Parts[1].Data[0] = 42
	if storagetest.EveryKind("run-1")[0].Input.Parts[1].Data[0] == 42 {
		t.Error("EveryKind results share memory")
	}
}

// broken wraps a correct store and breaks one rule of the contract.
type broken struct {
	*memory.Store
	mode    string
	mu      sync.Mutex
	aliased map[string][]ledger.Event
	values  map[string][]byte
	appends int
	// rewritten holds, by session, the events a Rewrite put in place of
	// the memory store's first ones (which it cannot replace).
	rewritten map[string][]ledger.Event
}

func (b *broken) Append(ctx context.Context, id string, events ...ledger.Event) error {
	switch b.mode {
	case "partial-batch":
		for _, e := range events {
			if err := b.Store.Append(ctx, id, e); err != nil {
				return err
			}
		}
		return nil
	case "ignore-ctx":
		ctx = context.Background()
	case "accept-any-id":
		if !storage.ValidSessionID(id) {
			return nil
		}
	case "round-time":
		events = slices.Clone(events)
		for i := range events {
			events[i].Time = events[i].Time.Round(time.Microsecond)
		}
	case "alias":
		b.mu.Lock()
		defer b.mu.Unlock()
		b.aliased[id] = append(b.aliased[id], events...)
		return nil
	case "lose-some":
		b.mu.Lock()
		b.appends++
		lose := b.appends%17 == 0
		b.mu.Unlock()
		if lose {
			return nil
		}
	}
	return b.Store.Append(ctx, id, events...)
}

func (b *broken) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	switch b.mode {
	case "reorder":
		evs, err := b.Store.Load(ctx, id)
		slices.Reverse(evs)
		return evs, err
	case "missing-is-error":
		evs, err := b.Store.Load(ctx, id)
		if err == nil && len(evs) == 0 {
			return nil, errors.New("no such session")
		}
		return evs, err
	case "alias":
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.aliased[id], nil
	case "ignore-ctx":
		ctx = context.Background()
	}
	evs, err := b.Store.Load(ctx, id)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.rewritten[id]; ok && err == nil {
		evs = append(slices.Clone(r), evs[len(r):]...)
	}
	return evs, err
}

// Rewrite rewrites a session as the contract says, but for the rule its
// mode breaks.
func (b *broken) Rewrite(ctx context.Context, id string, fn func([]byte) ([]byte, error), dryRun bool) (storage.RewriteStats, error) {
	var stats storage.RewriteStats
	evs, err := b.Load(ctx, id)
	if err != nil {
		return stats, err
	}
	put := func(events []ledger.Event) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.rewritten == nil {
			b.rewritten = map[string][]ledger.Event{}
		}
		b.rewritten[id] = events
	}
	var out []ledger.Event
	for _, e := range evs {
		enc, err := ledger.Encode(e)
		if err != nil {
			return stats, err
		}
		got, err := fn(enc)
		if err != nil {
			if b.mode == "rewrite-keep-partial" {
				put(append(out, evs[len(out):]...))
			}
			return stats, err
		}
		stats.Events++
		if !bytes.Equal(got, enc) {
			stats.Changed++
		}
		if e, err = ledger.Decode(got); err != nil {
			return stats, err
		}
		out = append(out, e)
	}
	if (dryRun && b.mode != "rewrite-dry-writes") || b.mode == "rewrite-drop" {
		return stats, nil
	}
	put(out)
	return stats, nil
}

func (b *broken) ListSessions(ctx context.Context) ([]string, error) {
	ids, err := b.Store.ListSessions(ctx)
	if b.mode == "list-extra" && len(ids) > 0 {
		ids = append(ids, "ghost", ids[0]) // one with no events, one twice
	}
	return ids, err
}

func (b *broken) Close() error {
	if b.mode == "close-noop" {
		return nil
	}
	return b.Store.Close()
}

func (b *broken) Get(ctx context.Context, ns, key string) ([]byte, bool, error) {
	switch b.mode {
	case "kv-join":
		ns, key = "joined", ns+":"+key
	case "kv-alias":
		b.mu.Lock()
		defer b.mu.Unlock()
		v, ok := b.values[ns+"\x00"+key]
		return v, ok, nil
	case "kv-missing-is-error":
		v, ok, err := b.Store.Get(ctx, ns, key)
		if err == nil && !ok {
			err = errors.New("not found")
		}
		return v, ok, err
	case "kv-ignore-ctx":
		ctx = context.Background()
	}
	return b.Store.Get(ctx, ns, key)
}

func (b *broken) Set(ctx context.Context, ns, key string, value []byte) error {
	switch b.mode {
	case "kv-join":
		ns, key = "joined", ns+":"+key
	case "kv-alias":
		b.mu.Lock()
		defer b.mu.Unlock()
		b.values[ns+"\x00"+key] = value
		return nil
	case "kv-no-bounds":
		if len(value) > storage.MaxValueBytes {
			value = value[:storage.MaxValueBytes]
		}
		if len(key) > storage.MaxKeyBytes {
			key = key[:storage.MaxKeyBytes]
		}
	case "kv-ignore-ctx":
		ctx = context.Background()
	}
	return b.Store.Set(ctx, ns, key, value)
}

func (b *broken) Len(ctx context.Context, ns string) (int, error) {
	n, err := b.Store.Len(ctx, ns)
	if b.mode == "kv-len-stale" && n > 0 {
		n++ // counts a deleted key
	}
	return n, err
}

func (b *broken) Keys(ctx context.Context, ns string) ([]string, error) {
	keys, err := b.Store.Keys(ctx, ns)
	if b.mode == "kv-keys-unsorted" {
		slices.Reverse(keys)
	}
	return keys, err
}

// AddWithin breaks Counter: "counter-racy" reads and writes in two steps,
// "counter-no-limit" adds past the limit.
func (b *broken) AddWithin(ctx context.Context, ns, key string, delta, limit int64) (int64, bool, error) {
	switch b.mode {
	case "counter-racy":
		cur, ok, err := b.Store.Get(ctx, ns, key)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			cur = nil
		}
		v, added, err := storage.AddCounter(cur, delta, limit)
		if err != nil || !added {
			return v, false, err
		}
		time.Sleep(time.Millisecond) // another add comes between
		return v, true, b.Store.Set(ctx, ns, key, strconv.AppendInt(nil, v, 10))
	case "counter-no-limit":
		limit = math.MaxInt64
	}
	return b.Store.AddWithin(ctx, ns, key, delta, limit)
}

// PutBlob breaks Blobs: "blob-no-refresh" keeps the Stored time of bytes
// already there.
func (b *broken) PutBlob(ctx context.Context, data []byte) (string, error) {
	if b.mode == "blob-no-refresh" {
		if _, ok, err := b.Store.GetBlob(ctx, storage.BlobDigest(data)); ok && err == nil {
			return storage.BlobDigest(data), nil
		}
	}
	return b.Store.PutBlob(ctx, data)
}

// GetBlob breaks Blobs: "blob-missing-is-error" fails on a missing blob.
func (b *broken) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	data, ok, err := b.Store.GetBlob(ctx, digest)
	if b.mode == "blob-missing-is-error" && err == nil && !ok {
		return nil, false, errors.New("not found")
	}
	return data, ok, err
}

// BlobScope breaks Blobs: "blob-unscoped" gives every prefix the store's
// own blobs.
func (b *broken) BlobScope(scope string) storage.Blobs {
	if b.mode == "blob-unscoped" {
		return b.Store
	}
	return b.Store.BlobScope(scope)
}

// SessionVersion breaks Fencer: "fence-static" names every state of a
// session with events alike.
func (b *broken) SessionVersion(ctx context.Context, id string) (string, error) {
	v, err := b.Store.SessionVersion(ctx, id)
	if b.mode == "fence-static" && v != "" {
		v = "v"
	}
	return v, err
}

// ReplaceSession breaks Fencer: "fence-ignore-version" and "fence-static"
// replace whatever version they are given.
func (b *broken) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	if b.mode == "fence-ignore-version" || b.mode == "fence-static" {
		v, err := b.Store.SessionVersion(ctx, id)
		if err != nil {
			return err
		}
		version = v
	}
	return b.Store.ReplaceSession(ctx, id, version, events)
}

// HoldBlob breaks BlobFence: "hold-nothing" holds nothing.
func (b *broken) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	if b.mode == "hold-nothing" {
		return "h", nil
	}
	return b.Store.HoldBlob(ctx, digest, ttl)
}

// DeleteMarkedBlob breaks BlobFence: "mark-ignored" deletes whatever the
// mark.
func (b *broken) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	if b.mode == "mark-ignored" && mark != "" {
		if _, ok, _ := b.Store.GetBlob(ctx, digest); !ok {
			return false, nil
		}
		return true, b.Store.DeleteBlob(ctx, digest)
	}
	return b.Store.DeleteMarkedBlob(ctx, digest, mark)
}

// LoadSnapshot returns the whole ledger beside a snapshot when broken by
// snapshot-whole.
func (b *broken) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	data, at, events, err := b.Store.LoadSnapshot(ctx, id)
	if b.mode == "snapshot-whole" && data != nil {
		events, err = b.Store.Load(ctx, id)
	}
	return data, at, events, err
}

// TestBrokenStore is run in a subprocess by TestSuiteCatchesBrokenStores.
func TestBrokenStore(t *testing.T) {
	mode := os.Getenv("STORAGETEST_BROKEN")
	if mode == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		return &broken{Store: memory.New(), mode: mode, aliased: map[string][]ledger.Event{}, values: map[string][]byte{}}
	})
}

// TestSuiteCatchesBrokenStores checks that the suite reports each broken
// rule, in the subtest about it, with a message that says what is wrong.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	for _, tc := range []struct {
		mode, subtest, want string
	}{
		{"reorder", "Order", "differs: event.ID"},
		{"partial-batch", "AtomicBatch", "must leave nothing visible"},
		{"round-time", "RoundTripEveryKind", "event.Time ="},
		{"ignore-ctx", "DoneContext", "want context canceled"},
		{"accept-any-id", "InvalidSessionID", "want an error matching storage.ErrInvalidSessionID"},
		{"alias", "NoAliasing", "after the caller modified"},
		{"lose-some", "ConcurrentSessions", "events, want"},
		{"missing-is-error", "EmptySession", "a missing session is a value"},
		{"list-extra", "ListSessions", `lists "ghost", which has no events`},
		{"list-extra", "ListSessions", "times, want once"},
		{"close-noop", "Close", "want storage.ErrClosed"},
		{"kv-join", "KV/Isolation", `Get("a:b", "c") = "value-1", want "value-0"`},
		{"kv-alias", "KV/NoAliasing", "after the caller changed the slice it set"},
		{"kv-missing-is-error", "KV/Missing", "not found"},
		{"kv-no-bounds", "KV/Invalid", "want storage.ErrValueTooLarge"},
		{"kv-ignore-ctx", "DoneContext", "KV Set with a canceled ctx"},
		{"kv-len-stale", "KV/Len", `after 3 Sets: Len("len") = 4`},
		{"kv-keys-unsorted", "KV/Keys", `after 4 Sets (sorted, another namespace apart): Keys("keys")`},
		{"counter-racy", "Counter/AtOnce", "64 adds of 1 within 40 at once"},
		{"counter-no-limit", "Counter/Adds", "want 10 refused"},
		{"rewrite-dry-writes", "Rewriter/DryRun", "after a dry run"},
		{"rewrite-keep-partial", "Rewriter/FnFails", "after a rewrite whose fn failed"},
		{"rewrite-drop", "Rewriter/Rewrites", "after the rewrite"},
		{"blob-no-refresh", "Blobs/Refresh", "keeps Stored"},
		{"blob-missing-is-error", "Blobs/Missing", "not found"},
		{"blob-unscoped", "Blobs/Prefix", "the store's own blobs, after two views put one"},
		{"fence-ignore-version", "Fencer", "ReplaceSession with a stale version = <nil>, want storage.ErrSessionChanged"},
		{"fence-static", "Fencer", "before and after an Append: every Append changes it"},
		{"hold-nothing", "BlobFence", "DeleteMarkedBlob of a held blob = true, want false"},
		{"mark-ignored", "BlobFence", "DeleteMarkedBlob of a blob put again after its mark = true, want false"},
		{"snapshot-whole", "Snapshotter/Tail", "a snapshot in a batch: LoadSnapshot(\"snap-tail\") = 5 events after the snapshot, want 2"},
	} {
		t.Run(tc.mode+"/"+tc.subtest, func(t *testing.T) {
			t.Parallel()
			run := "^TestBrokenStore$"
			for _, part := range strings.Split(tc.subtest, "/") {
				run += "/^" + part + "$"
			}
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
			cmd.Env = append(os.Environ(), "STORAGETEST_BROKEN="+tc.mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store broken by %s:\n%s", tc.mode, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenStore/"+tc.subtest) {
				t.Errorf("subtest %s did not fail:\n%s", tc.subtest, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}
