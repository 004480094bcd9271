package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/storage"
)

// runKV checks a [storage.KV]: values set through a are read through b
// (the same store in Run, two handles on one backend in RunShared).
func runKV(t *testing.T, a, b storage.Storage) {
	ka, ok := a.(storage.KV)
	if !ok {
		t.Skip("the store does not implement storage.KV")
	}
	kb, ok := b.(storage.KV)
	if !ok {
		t.Fatal("the second handle does not implement storage.KV, the first does")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b storage.KV)
	}{
		{"Missing", testKVMissing},
		{"RoundTrip", testKVRoundTrip},
		{"OverwriteDelete", testKVOverwriteDelete},
		{"Isolation", testKVIsolation},
		{"Invalid", testKVInvalid},
		{"NoAliasing", testKVNoAliasing},
		{"Concurrent", testKVConcurrent},
		{"Len", testKVLen},
		{"Keys", testKVKeys},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, ka, kb) })
	}
	t.Run("NotSessions", func(t *testing.T) {
		ctx := t.Context()
		setOK(t, ka, ctx, "kv-session", "k", []byte("v"))
		got, err := a.Load(ctx, "kv-session")
		if err != nil || len(got) != 0 {
			t.Errorf("Load of a session named like a KV namespace: %d events, %v; want none", len(got), err)
		}
		if l, ok := a.(storage.Lister); ok {
			ids, err := l.ListSessions(ctx)
			if err != nil {
				t.Errorf("ListSessions: %v", err)
			}
			if len(ids) != 0 {
				t.Errorf("ListSessions lists %q: KV namespaces are not sessions", ids)
			}
		}
	})
}

func setOK(t *testing.T, kv storage.KV, ctx context.Context, ns, key string, value []byte) bool {
	t.Helper()
	if err := kv.Set(ctx, ns, key, value); err != nil {
		t.Errorf("Set(%s, %s, %d bytes): %v", q(ns), q(key), len(value), err)
		return false
	}
	return true
}

// wantValue checks what Get returns; want nil means missing.
func wantValue(t *testing.T, kv storage.KV, ctx context.Context, ns, key string, want []byte, why string) {
	t.Helper()
	got, ok, err := kv.Get(ctx, ns, key)
	switch {
	case err != nil:
		t.Errorf("%s: Get(%s, %s): %v", why, q(ns), q(key), err)
	case want == nil && ok:
		t.Errorf("%s: Get(%s, %s) found %d bytes, want missing", why, q(ns), q(key), len(got))
	case want == nil && got != nil:
		t.Errorf("%s: Get(%s, %s) of a missing key returned a non-nil value", why, q(ns), q(key))
	case want != nil && !ok:
		t.Errorf("%s: Get(%s, %s) found nothing, want %d bytes", why, q(ns), q(key), len(want))
	case want != nil && !bytes.Equal(got, want):
		t.Errorf("%s: Get(%s, %s) = %s, want %s", why, q(ns), q(key), short(got), short(want))
	}
}

// q quotes a namespace or key for a message, shortened.
func q(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q… (%d bytes)", s[:40], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q… (%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func testKVMissing(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	wantValue(t, b, ctx, "ns", "never-set", nil, "a key never set")
	if err := a.Delete(ctx, "ns", "never-set"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	wantValue(t, b, ctx, "never-used", "k", nil, "a namespace never used")
}

func testKVRoundTrip(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), storage.MaxValueBytes/16)
	for name, v := range map[string][]byte{
		"empty":      {},
		"text":       []byte(`{"status":"published","post_id":"p-1"}`),
		"every byte": all,
		"largest":    big,
	} {
		if setOK(t, a, ctx, "round-trip", name, v) {
			wantValue(t, b, ctx, "round-trip", name, v, name+" value")
		}
	}
}

func testKVOverwriteDelete(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	setOK(t, a, ctx, "ns", "k", []byte("first, and longer than the second"))
	setOK(t, a, ctx, "ns", "k", []byte("second"))
	wantValue(t, b, ctx, "ns", "k", []byte("second"), "after an overwrite")
	if err := a.Delete(ctx, "ns", "k"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	wantValue(t, b, ctx, "ns", "k", nil, "after Delete")
	setOK(t, a, ctx, "ns", "k", []byte("third"))
	wantValue(t, b, ctx, "ns", "k", []byte("third"), "set again after Delete")
}

func testKVIsolation(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	// Pairs that a careless encoding (joining with a separator, escaping
	// nothing, folding case) would make collide.
	pairs := [][2]string{
		{"a:b", "c"}, {"a", "b:c"},
		{"a/b", "c"}, {"a", "b/c"},
		{"a", "b"}, {"A", "b"}, {"a", "B"},
		{"..", "x"}, {".", "x"}, {"ns", ".."}, {"ns", "."}, {"ns", "../ns2/k"},
		{"ns", "k\x00"}, {"ns", "k"}, {"ns\x00", "k"},
		{"ünïcode", "ключ"}, {"ns", "%2F"}, {"ns", "/"},
		{"ns", "k k"}, {"ns", "k\n"}, {"{tag}", "k"}, {"tag", "k"},
		{strings.Repeat("n", storage.MaxNamespaceBytes), strings.Repeat("k", storage.MaxKeyBytes)},
	}
	for i, p := range pairs {
		setOK(t, a, ctx, p[0], p[1], []byte(fmt.Sprint("value-", i)))
	}
	for i, p := range pairs {
		wantValue(t, b, ctx, p[0], p[1], []byte(fmt.Sprint("value-", i)), fmt.Sprintf("pair %d of %d set", i, len(pairs)))
	}
	if err := a.Delete(ctx, "a", "b"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	wantValue(t, b, ctx, "a", "b", nil, `deleted ("a", "b")`)
	wantValue(t, b, ctx, "A", "b", []byte("value-5"), `("A", "b") after ("a", "b") was deleted`)
	wantValue(t, b, ctx, "a", "b:c", []byte("value-1"), `("a", "b:c") after ("a", "b") was deleted`)
}

// wantLen checks what Len returns.
func wantLen(t *testing.T, kv storage.KV, ctx context.Context, ns string, want int, why string) {
	t.Helper()
	if n, err := kv.Len(ctx, ns); err != nil || n != want {
		t.Errorf("%s: Len(%s) = %d, %v; want %d", why, q(ns), n, err, want)
	}
}

func testKVLen(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	wantLen(t, b, ctx, "len", 0, "a namespace never used")
	for _, k := range []string{"x", "y", "z"} {
		setOK(t, a, ctx, "len", k, []byte(k))
	}
	wantLen(t, b, ctx, "len", 3, "after 3 Sets")
	setOK(t, a, ctx, "len", "y", []byte("again"))
	wantLen(t, b, ctx, "len", 3, "after an overwrite")
	setOK(t, a, ctx, "len-other", "x", []byte("x"))
	wantLen(t, b, ctx, "len", 3, "after a Set in another namespace")
	wantLen(t, b, ctx, "len-other", 1, "the other namespace")
	for _, k := range []string{"x", "missing"} {
		if err := a.Delete(ctx, "len", k); err != nil {
			t.Errorf("Delete: %v", err)
		}
	}
	wantLen(t, b, ctx, "len", 2, "after deleting a key and a missing one")
	for _, k := range []string{"y", "z"} {
		if err := a.Delete(ctx, "len", k); err != nil {
			t.Errorf("Delete: %v", err)
		}
	}
	wantLen(t, b, ctx, "len", 0, "after deleting every key")
	for _, ns := range []string{"", strings.Repeat("n", storage.MaxNamespaceBytes+1)} {
		if _, err := b.Len(ctx, ns); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Len of an invalid namespace (%d bytes): %v, want storage.ErrInvalidKey", len(ns), err)
		}
	}
}

func testKVKeys(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	wantKeys := func(ns string, want []string, why string) {
		t.Helper()
		got, err := b.Keys(ctx, ns)
		if err != nil {
			t.Errorf("%s: Keys(%s): %v", why, q(ns), err)
			return
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
			t.Errorf("%s: Keys(%s) = %q, want %q", why, q(ns), got, want)
		}
	}
	wantKeys("keys", nil, "a namespace never used")
	odd := "with/slash:colon\x00nul"
	for _, k := range []string{"b", odd, "a", "c"} {
		setOK(t, a, ctx, "keys", k, []byte(k))
	}
	setOK(t, a, ctx, "keys-other", "x", []byte("x"))
	wantKeys("keys", []string{"a", "b", "c", odd}, "after 4 Sets (sorted, another namespace apart)")
	setOK(t, a, ctx, "keys", "b", []byte("again"))
	if err := a.Delete(ctx, "keys", "c"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	wantKeys("keys", []string{"a", "b", odd}, "after an overwrite and a Delete")
	if _, err := b.Keys(ctx, ""); !errors.Is(err, storage.ErrInvalidKey) {
		t.Errorf("Keys of an invalid namespace: %v, want storage.ErrInvalidKey", err)
	}
}

func testKVInvalid(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, c := range []struct{ name, ns, key string }{
		{"empty namespace", "", "k"},
		{"empty key", "ns", ""},
		{"namespace too long", long(storage.MaxNamespaceBytes + 1), "k"},
		{"key too long", "ns", long(storage.MaxKeyBytes + 1)},
	} {
		if err := a.Set(ctx, c.ns, c.key, []byte("v")); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Set with an %s: %v, want storage.ErrInvalidKey", c.name, err)
		}
		if _, _, err := b.Get(ctx, c.ns, c.key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Get with an %s: %v, want storage.ErrInvalidKey", c.name, err)
		}
		if err := a.Delete(ctx, c.ns, c.key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Delete with an %s: %v, want storage.ErrInvalidKey", c.name, err)
		}
	}
	setOK(t, a, ctx, "ns", "big", []byte("kept"))
	if err := a.Set(ctx, "ns", "big", make([]byte, storage.MaxValueBytes+1)); !errors.Is(err, storage.ErrValueTooLarge) {
		t.Errorf("Set of %d bytes: %v, want storage.ErrValueTooLarge", storage.MaxValueBytes+1, err)
	}
	wantValue(t, b, ctx, "ns", "big", []byte("kept"), "after a refused Set")
}

func testKVNoAliasing(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	v := []byte("original")
	setOK(t, a, ctx, "ns", "k", v)
	copy(v, "MUTATED!")
	wantValue(t, b, ctx, "ns", "k", []byte("original"), "after the caller changed the slice it set")
	got, _, err := b.Get(ctx, "ns", "k")
	if err == nil && len(got) > 0 {
		got[0] = 'X'
	}
	wantValue(t, b, ctx, "ns", "k", []byte("original"), "after the caller changed a slice Get returned")
}

// testKVConcurrent: 8 goroutines set their own keys and one shared key,
// while another reads the shared key: every key ends with its last value,
// and the shared key is always one of the values written, whole.
func testKVConcurrent(t *testing.T, a, b storage.KV) {
	ctx := t.Context()
	const writers, rounds = 8, 25
	value := func(g, i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("g%d-i%d;", g, i)), 100) }
	written := map[string]bool{}
	for g := range writers {
		for i := range rounds {
			written[string(value(g, i))] = true
		}
	}
	setOK(t, a, ctx, "conc", "shared", value(0, 0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readErr error
	var readMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, ok, err := b.Get(ctx, "conc", "shared")
			readMu.Lock()
			if readErr == nil {
				switch {
				case err != nil:
					readErr = err
				case !ok:
					readErr = errors.New("the shared key was missing while being overwritten")
				case !written[string(got)]:
					readErr = fmt.Errorf("read a value never written whole: %s", short(got))
				}
			}
			readMu.Unlock()
		}
	}()
	var writers_ sync.WaitGroup
	for g := range writers {
		writers_.Add(1)
		go func() {
			defer writers_.Done()
			for i := range rounds {
				if err := a.Set(ctx, "conc", fmt.Sprint("own-", g), value(g, i)); err != nil {
					t.Errorf("Set: %v", err)
					return
				}
				if err := a.Set(ctx, "conc", "shared", value(g, i)); err != nil {
					t.Errorf("Set: %v", err)
					return
				}
			}
		}()
	}
	writers_.Wait()
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Error(readErr)
	}
	for g := range writers {
		wantValue(t, b, ctx, "conc", fmt.Sprint("own-", g), value(g, rounds-1), "a key after its writer's last Set")
	}
	got, _, err := b.Get(ctx, "conc", "shared")
	if err != nil || !written[string(got)] {
		t.Errorf("the shared key ends as %s, %v: want one of the values written", short(got), err)
	}
}

// kvDoneContext checks that a done ctx stops KV operations.
func kvDoneContext(t *testing.T, s storage.Storage, ctx context.Context, name string, want error) {
	kv, ok := s.(storage.KV)
	if !ok {
		return
	}
	if err := kv.Set(ctx, "done", "k", []byte("new")); !errors.Is(err, want) {
		t.Errorf("KV Set with a %s ctx = %v, want %v", name, err, want)
	}
	if _, _, err := kv.Get(ctx, "done", "k"); !errors.Is(err, want) {
		t.Errorf("KV Get with a %s ctx: error %v, want %v", name, err, want)
	}
	if err := kv.Delete(ctx, "done", "k"); !errors.Is(err, want) {
		t.Errorf("KV Delete with a %s ctx = %v, want %v", name, err, want)
	}
	if _, err := kv.Len(ctx, "done"); !errors.Is(err, want) {
		t.Errorf("KV Len with a %s ctx: error %v, want %v", name, err, want)
	}
}

// kvClosed checks that a closed store refuses KV operations.
func kvClosed(t *testing.T, s storage.Storage, ctx context.Context) {
	kv, ok := s.(storage.KV)
	if !ok {
		return
	}
	if err := kv.Set(ctx, "closing", "k", []byte("v")); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("KV Set after Close = %v, want storage.ErrClosed", err)
	}
	if _, _, err := kv.Get(ctx, "closing", "k"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("KV Get after Close: error %v, want storage.ErrClosed", err)
	}
	if err := kv.Delete(ctx, "closing", "k"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("KV Delete after Close = %v, want storage.ErrClosed", err)
	}
	if _, err := kv.Len(ctx, "closing"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("KV Len after Close: error %v, want storage.ErrClosed", err)
	}
}
