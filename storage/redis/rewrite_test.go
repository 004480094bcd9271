package redis_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

func rewritePoke(n int) ledger.Event {
	return ledger.Event{ID: fmt.Sprintf("ev-%d", n), Kind: ledger.KindPoke, RunID: "run-1",
		Time: time.Date(2025, 6, 1, 12, 0, 0, n, time.UTC), Poke: &ledger.Poke{Text: fmt.Sprintf("poke %d", n)}}
}

// TestRewrite: an entry another writer left in a non-canonical form is
// rewritten in place, with the stream's ids and batch tokens kept; a
// second pass changes nothing.
func TestRewrite(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.Options{})
		testRewrite(t, srv.URL(), []string{srv.Addr()})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t, 3)
		testRewrite(t, clusterURL(c), c.Addrs())
	})
}

func testRewrite(t *testing.T, url string, addrs []string) {
	prefix := freshPrefix()
	st := open(t, url, redis.Options{Prefix: prefix})
	raw := goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: addrs, IsClusterMode: len(addrs) > 1})
	defer raw.Close()
	ctx := t.Context()
	key := prefix + ":{default:s}:events"
	dump := func() []goredis.XMessage {
		t.Helper()
		msgs, err := raw.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}

	if err := st.Append(ctx, "s", rewritePoke(1), rewritePoke(2)); err != nil {
		t.Fatal(err)
	}
	// An event with its keys in another order, as another tool may write.
	canonical, _ := ledger.Encode(rewritePoke(3))
	reordered := "{" + strings.TrimPrefix(string(canonical[:len(canonical)-1]), `{"v":1,`) + `,"v":1}`
	if err := raw.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: []any{"e", reordered, "b", "an-old-token"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, "s", rewritePoke(4)); err != nil {
		t.Fatal(err)
	}
	before := dump()
	events, err := st.Load(ctx, "s")
	if err != nil || len(events) != 4 {
		t.Fatalf("Load = %d events, %v", len(events), err)
	}

	stats, err := st.Rewrite(ctx, "s", ledger.Upgrade, true)
	if err != nil || stats != (storage.RewriteStats{Events: 4, Changed: 1}) {
		t.Fatalf("dry run = %+v, %v; want 4 events, 1 changed", stats, err)
	}
	if got := dump(); !reflect.DeepEqual(got, before) {
		t.Fatalf("a dry run changed the stream")
	}

	stats, err = st.Rewrite(ctx, "s", ledger.Upgrade, false)
	if err != nil || stats != (storage.RewriteStats{Events: 4, Changed: 1}) {
		t.Fatalf("Rewrite = %+v, %v; want 4 events, 1 changed", stats, err)
	}
	after := dump()
	if len(after) != len(before) {
		t.Fatalf("%d entries after, %d before", len(after), len(before))
	}
	for i := range after {
		want := before[i].Values
		if i == 2 {
			want = map[string]any{"e": string(canonical), "b": "an-old-token"}
		}
		if after[i].ID != before[i].ID || !reflect.DeepEqual(after[i].Values, want) {
			t.Errorf("entry %d: %s %v, want %s %v", i, after[i].ID, after[i].Values, before[i].ID, want)
		}
	}
	if got, err := st.Load(ctx, "s"); err != nil || !reflect.DeepEqual(got, events) {
		t.Fatalf("Load after the rewrite = %d events, %v; want the same events", len(got), err)
	}
	if n, err := raw.Exists(ctx, prefix+":{default:s}:rewrite", prefix+":{default:s}:lease").Result(); err != nil || n != 0 {
		t.Errorf("the rewrite left %d keys behind (%v)", n, err)
	}

	stats, err = st.Rewrite(ctx, "s", ledger.Upgrade, false)
	if err != nil || stats != (storage.RewriteStats{Events: 4, Changed: 0}) {
		t.Fatalf("second Rewrite = %+v, %v; want nothing changed", stats, err)
	}
	if got := dump(); !reflect.DeepEqual(got, after) {
		t.Fatalf("a second rewrite changed the stream")
	}
	// The store appends after the rewritten entries.
	if err := st.Append(ctx, "s", rewritePoke(5)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, "s"); err != nil || len(got) != 5 {
		t.Fatalf("Load after an append = %d events, %v", len(got), err)
	}
}

// TestRewriteRefuses: a session another owner leads, one appended to
// during the rewrite, and an entry of a newer version are refused, and the
// stream stays as it was.
func TestRewriteRefuses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	prefix := freshPrefix()
	st := open(t, srv.URL(), redis.Options{Prefix: prefix})
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer raw.Close()
	ctx := t.Context()
	changeAll := func(b []byte) ([]byte, error) { // a rewrite that changes every event
		return append([]byte(" "), b...), nil
	}
	dump := func(id string) []goredis.XMessage {
		msgs, err := raw.XRange(ctx, prefix+":{default:"+id+"}:events", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}

	t.Run("lease held", func(t *testing.T) {
		if err := st.Append(ctx, "led", rewritePoke(1)); err != nil {
			t.Fatal(err)
		}
		before := dump("led")
		lease, err := st.AcquireLease(ctx, "led", "host-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		_, err = st.Rewrite(ctx, "led", changeAll, false)
		if !errors.Is(err, storage.ErrLeaseHeld) || !strings.Contains(err.Error(), "host-a") {
			t.Fatalf("Rewrite of a led session = %v; want ErrLeaseHeld naming host-a", err)
		}
		if !reflect.DeepEqual(dump("led"), before) {
			t.Fatal("the stream changed")
		}
		if stats, err := st.Rewrite(ctx, "led", changeAll, true); err != nil || stats.Changed != 1 {
			t.Fatalf("a dry run of a led session = %+v, %v; want it read", stats, err)
		}
	})

	t.Run("raced", func(t *testing.T) {
		if err := st.Append(ctx, "busy", rewritePoke(1)); err != nil {
			t.Fatal(err)
		}
		queued := ledger.Event{ID: "ev-q", Kind: ledger.KindInput, Time: time.Now().UTC(),
			Input: &ledger.Input{MessageID: "m1", Parts: []ledger.Part{ledger.TextPart("queued")}}}
		first := true
		_, err := st.Rewrite(ctx, "busy", func(b []byte) ([]byte, error) {
			if first { // another host queues a message meanwhile
				first = false
				if err := st.Append(ctx, "busy", queued); err != nil {
					t.Errorf("a queued message under the rewrite's lease: %v", err)
				}
			}
			return changeAll(b)
		}, false)
		if !errors.Is(err, storage.ErrRewriteRaced) {
			t.Fatalf("Rewrite = %v; want ErrRewriteRaced", err)
		}
		got, err := st.Load(ctx, "busy")
		if err != nil || len(got) != 2 || got[1].ID != "ev-q" {
			t.Fatalf("Load = %v, %v; want the poke and the queued message, as written", got, err)
		}
		if n, _ := raw.Exists(ctx, prefix+":{default:busy}:rewrite").Result(); n != 0 {
			t.Error("the rewritten stream was left behind")
		}
	})

	t.Run("newer version", func(t *testing.T) {
		if err := st.Append(ctx, "new", rewritePoke(1)); err != nil {
			t.Fatal(err)
		}
		b, _ := ledger.Encode(rewritePoke(2))
		newer := strings.Replace(string(b), `"v":1`, `"v":2`, 1)
		if err := raw.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + ":{default:new}:events", Values: []any{"e", newer}}).Err(); err != nil {
			t.Fatal(err)
		}
		before := dump("new")
		_, err := st.Rewrite(ctx, "new", ledger.Upgrade, false)
		var ce *redis.CorruptError
		if !errors.As(err, &ce) || ce.EntryID != before[1].ID || !errors.Is(err, ledger.ErrVersion) {
			t.Fatalf("Rewrite = %v; want a CorruptError of entry %s matching ErrVersion", err, before[1].ID)
		}
		if !reflect.DeepEqual(dump("new"), before) {
			t.Fatal("the stream changed")
		}
	})
}
