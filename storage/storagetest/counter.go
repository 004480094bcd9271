package storagetest

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/storage"
)

// runCounter checks a storage.Counter through two handles a and b (the same
// one for a store of one host): adds within a limit, refusals past it, a
// counter's text as a KV value, a value that is no counter, and adds at
// once through both handles that never pass the limit together.
func runCounter(t *testing.T, a, b storage.Storage) {
	ca, ok := a.(storage.Counter)
	if !ok {
		t.Skip("the store does not implement storage.Counter")
	}
	cb, ok := b.(storage.Counter)
	if !ok {
		t.Fatal("the second handle does not implement storage.Counter, the first does")
	}
	kv, ok := a.(storage.KV)
	if !ok {
		t.Fatal("a storage.Counter that is no storage.KV")
	}
	ctx := t.Context()
	add := func(c storage.Counter, key string, delta, limit int64) (int64, bool) {
		t.Helper()
		v, added, err := c.AddWithin(ctx, "counters", key, delta, limit)
		if err != nil {
			t.Fatalf("AddWithin(%q, %d, %d): %v", key, delta, limit, err)
		}
		return v, added
	}
	t.Run("Adds", func(t *testing.T) {
		if v, added := add(ca, "a", 5, 10); v != 5 || !added {
			t.Errorf("the first add of 5 within 10: %d %v, want 5 added", v, added)
		}
		if v, added := add(cb, "a", 5, 10); v != 10 || !added {
			t.Errorf("5 more within 10, through the other handle: %d %v, want 10 added", v, added)
		}
		if v, added := add(ca, "a", 1, 10); v != 10 || added {
			t.Errorf("1 more within 10: %d %v, want 10 refused", v, added)
		}
		if v, added := add(cb, "a", -3, 0); v != 7 || !added {
			t.Errorf("-3 (a negative delta passes any limit): %d %v, want 7 added", v, added)
		}
		if v, added := add(ca, "a", 0, math.MaxInt64); v != 7 || !added {
			t.Errorf("a read (0): %d %v, want 7", v, added)
		}
		got, ok, err := kv.Get(ctx, "counters", "a")
		if err != nil || !ok || string(got) != "7" {
			t.Errorf("the counter as a value: %q %v %v, want \"7\"", got, ok, err)
		}
		if v, _ := add(ca, "other", 0, 0); v != 0 {
			t.Errorf("another key: %d, want 0", v)
		}
	})
	t.Run("NotACounter", func(t *testing.T) {
		if err := kv.Set(ctx, "counters", "text", []byte("seven")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ca.AddWithin(ctx, "counters", "text", 1, 10); !errors.Is(err, storage.ErrNotCounter) {
			t.Errorf("AddWithin on a value that is no counter: %v, want ErrNotCounter", err)
		}
		if got, _, _ := kv.Get(ctx, "counters", "text"); string(got) != "seven" {
			t.Errorf("the value after the refused add: %q", got)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		if _, _, err := ca.AddWithin(ctx, "", "k", 1, 10); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("an empty namespace: %v, want ErrInvalidKey", err)
		}
	})
	t.Run("AtOnce", func(t *testing.T) {
		// 64 adds of 1 within 40, from both handles at once: exactly 40
		// are added.
		var added atomic.Int64
		var wg sync.WaitGroup
		for i := range 64 {
			c := ca
			if i%2 == 1 {
				c = cb
			}
			wg.Go(func() {
				_, ok, err := c.AddWithin(ctx, "counters", "race", 1, 40)
				if err != nil {
					t.Error(err)
				}
				if ok {
					added.Add(1)
				}
			})
		}
		wg.Wait()
		if v, _ := add(ca, "race", 0, 0); v != 40 || added.Load() != 40 {
			t.Errorf("64 adds of 1 within 40 at once: %d added, the counter at %d; want 40 and 40", added.Load(), v)
		}
	})
}
