package redis_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// poke returns a small valid event of session id, numbered n.
func poke(id string, n int) ledger.Event {
	return ledger.Event{
		ID:    id + "-" + itoa(n),
		Kind:  ledger.KindPoke,
		Time:  time.Date(2025, 6, 1, 12, 0, 0, n, time.UTC),
		RunID: "run-" + id,
		Poke:  &ledger.Poke{Text: "poke " + itoa(n)},
	}
}

func pokes(id string, from, n int) []ledger.Event {
	evs := make([]ledger.Event, n)
	for i := range evs {
		evs[i] = poke(id, from+i)
	}
	return evs
}

func itoa(n int) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{digits[n%10]}, b...)
	}
	return string(b)
}

// rawClient returns a plain go-redis client on a server, closed when the
// test ends.
func rawClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func mustLoad(t *testing.T, s storage.Storage, id string) []ledger.Event {
	t.Helper()
	got, err := s.Load(t.Context(), id)
	if err != nil {
		t.Fatalf("Load(%s): %v", id, err)
	}
	return got
}

func sameEvents(t *testing.T, what string, got, want []ledger.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s: event %d is %s, want %s", what, i, got[i].ID, want[i].ID)
		}
	}
}

// TestKillRestartAOF appends batches while Redis (appendonly yes,
// appendfsync always) is SIGKILLed: after a restart from its append-only
// file, every acknowledged batch is there, in order, and at most the batch
// in flight at the kill besides, whole; the Store reconnects and appends
// again.
func TestKillRestartAOF(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	st := open(t, srv.URL(), redis.Options{})
	ctx := t.Context()
	const id = "aof"

	var (
		acked    []ledger.Event
		inFlight []ledger.Event
		ackedN   atomic.Int64
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for n := 0; ; {
			batch := pokes(id, n, n%3+1)
			n += len(batch)
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := st.Append(actx, id, batch...)
			cancel()
			if err != nil {
				inFlight = batch
				return
			}
			acked = append(acked, batch...)
			ackedN.Store(int64(len(acked)))
		}
	}()
	for ackedN.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	<-done
	srv.Restart()

	got := mustLoad(t, st, id)
	if len(got) < len(acked) {
		t.Fatalf("after the restart the session has %d events, fewer than the %d acknowledged", len(got), len(acked))
	}
	sameEvents(t, "acknowledged events after the restart", got[:len(acked)], acked)
	switch extra := got[len(acked):]; {
	case len(extra) == 0:
	case reflect.DeepEqual(extra, inFlight):
		t.Logf("the batch in flight at the kill (%d events) was persisted, whole", len(extra))
	default:
		t.Fatalf("after the acknowledged events, %d more that are not the whole batch in flight (%d events)", len(extra), len(inFlight))
	}
	t.Logf("%d events acknowledged before the kill, all kept", len(acked))

	// The same Store appends again: its client reconnects.
	more := pokes(id, 100000, 2)
	if err := st.Append(ctx, id, more...); err != nil {
		t.Fatalf("Append after the restart: %v", err)
	}
	got = mustLoad(t, st, id)
	sameEvents(t, "the last events after the restart", got[len(got)-2:], more)
}

// TestFencing: owner A takes a short lease and stalls (no renewal); after
// it expires owner B, on another Store, takes it; A's fenced append fails
// with ErrLeaseLost, and the stream holds only B's events.
func TestFencing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	hostA := open(t, srv.URL(), redis.Options{})
	hostB := open(t, srv.URL(), redis.Options{})
	ctx := t.Context()
	const id = "fenced"

	leaseA, err := hostA.AcquireLease(ctx, id, "host-a", 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hostB.AcquireLease(ctx, id, "host-b", time.Minute); !errors.Is(err, storage.ErrLeaseHeld) {
		t.Fatalf("AcquireLease by B while A holds it: %v, want ErrLeaseHeld", err)
	} else if held, ok := errors.AsType[*storage.LeaseHeldError](err); !ok || held.Holder != "host-a" || held.Session != id ||
		held.Left <= 0 || held.Left > 150*time.Millisecond || !strings.Contains(err.Error(), "expires in") {
		t.Errorf("ErrLeaseHeld does not name the holder and say when its lease expires: %v (%+v)", err, held)
	}
	// A stalls (a GC pause, a partition) past its ttl.
	time.Sleep(300 * time.Millisecond)
	leaseB, err := hostB.AcquireLease(ctx, id, "host-b", time.Minute)
	if err != nil {
		t.Fatalf("AcquireLease by B after A's lease expired: %v", err)
	}
	bEvents := pokes("b", 0, 3)
	if err := leaseB.Append(ctx, bEvents[:1]...); err != nil {
		t.Fatal(err)
	}
	// A wakes up and appends: refused, nothing appended.
	err = leaseA.Append(ctx, pokes("a", 0, 2)...)
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("A's fenced append after its lease expired = %v, want ErrLeaseLost", err)
	}
	if !strings.Contains(err.Error(), `storage/redis: append session "fenced"`) {
		t.Errorf("error %q does not name the operation and session", err)
	}
	// Nor may anyone append without the lease while B holds it...
	if err := hostA.Append(ctx, id, poke("a", 9)); !errors.Is(err, storage.ErrLeaseHeld) {
		t.Errorf("unfenced Append to a session under B's lease = %v, want ErrLeaseHeld", err)
	}
	if err := leaseB.Append(ctx, bEvents[1:]...); err != nil {
		t.Fatal(err)
	}
	// ...but queued messages: any host may queue one into B's run.
	queued := ledger.Event{ID: "q1", Kind: ledger.KindInput, Time: time.Now().UTC(),
		Input: &ledger.Input{MessageID: "mq1", Parts: []ledger.Part{ledger.TextPart("also this")}}}
	if err := hostA.Append(ctx, id, queued); err != nil {
		t.Errorf("queued message under B's lease: %v", err)
	}
	bEvents = append(bEvents, queued)
	if _, err := hostA.AcquireLease(ctx, id, "!queue", time.Second); err == nil {
		t.Error("AcquireLease accepted an owner starting with '!'")
	}

	// The stream, read raw: B's events only.
	raw := rawClient(t, srv.Addr())
	msgs, err := raw.XRange(ctx, "agentic:{default:fenced}:events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []ledger.Event
	for _, m := range msgs {
		e, err := ledger.Decode([]byte(m.Values["e"].(string)))
		if err != nil {
			t.Fatalf("entry %s: %v", m.ID, err)
		}
		got = append(got, e)
	}
	sameEvents(t, "the stream after A's fenced append", got, bEvents)

	// After B releases, unfenced appends work again.
	if err := leaseB.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hostA.Append(ctx, id, poke("a", 10)); err != nil {
		t.Errorf("unfenced Append after the lease was released: %v", err)
	}
}

// TestRedisDown: with the server killed, every call fails within a few
// seconds with an error that names the operation; when it is back, the
// Store works again.
func TestRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{})
	ctx := t.Context()
	if err := st.Append(ctx, "down", poke("down", 0)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for _, c := range []struct {
		what string
		call func() error
	}{
		{`append session "down"`, func() error { return st.Append(ctx, "down", poke("down", 1)) }},
		{`load session "down"`, func() error { _, err := st.Load(ctx, "down"); return err }},
		{`list sessions`, func() error { _, err := st.ListSessions(ctx); return err }},
		{`acquire lease of session "down"`, func() error { _, err := st.AcquireLease(ctx, "down", "o", time.Second); return err }},
		{`watch session "down"`, func() error { _, err := st.Watch(ctx, "down"); return err }},
	} {
		start := time.Now()
		err := c.call()
		took := time.Since(start)
		if err == nil {
			t.Errorf("%s with Redis down: no error", c.what)
			continue
		}
		if took > 5*time.Second {
			t.Errorf("%s with Redis down took %v, want an error within seconds", c.what, took)
		}
		if want := "storage/redis: " + c.what; !strings.Contains(err.Error(), want) {
			t.Errorf("%s with Redis down: error %q does not say %q", c.what, err, want)
		}
		t.Logf("%s with Redis down: %v after %v", c.what, err, took.Round(time.Millisecond))
	}
	srv.Restart()
	if err := st.Append(ctx, "down", poke("down", 2)); err != nil {
		t.Errorf("Append when Redis is back: %v", err)
	}
}

// TestRedisHangs: a server that stops answering (SIGSTOP) makes calls fail
// after the read timeout and retries, or at the ctx deadline, whichever
// comes first: never a hang.
func TestRedisHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{ReadTimeout: 300 * time.Millisecond, MaxRetries: 1})
	ctx := t.Context()
	if err := st.Append(ctx, "hang", poke("hang", 0)); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()

	start := time.Now()
	err := st.Append(ctx, "hang", poke("hang", 1))
	took := time.Since(start)
	if err == nil || took > 3*time.Second {
		t.Errorf("Append to a hung server = %v after %v; want an error within 2 read timeouts and a backoff", err, took)
	}
	t.Logf("Append to a hung server: %v after %v", err, took.Round(time.Millisecond))

	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = st.Load(dctx, "hang")
	took = time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("Load from a hung server with a 100ms deadline = %v after %v; want context.DeadlineExceeded at the deadline", err, took)
	}
	srv.Resume()
	// The events the hung server received may or may not be there; the
	// store is usable again.
	if _, err := st.Load(ctx, "hang"); err != nil {
		t.Errorf("Load after the server resumed: %v", err)
	}
}

// cutProxy forwards TCP to a server and, when armed, drops the connection
// on the next reply, after the server executed the command: what a
// network failure does to a client waiting for its reply.
type cutProxy struct {
	ln    net.Listener
	armed atomic.Bool
	cuts  atomic.Int64
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						break // drop the reply and the connection
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
				s.Close()
			})
		}
	})
	return p
}

// TestRetriedAppendIsNotDuplicated: the reply of an append is lost after
// Redis ran it; go-redis retries on a new connection; the batch is in the
// stream once.
func TestRetriedAppendIsNotDuplicated(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	proxy := startCutProxy(t, srv.Addr())
	st := open(t, "redis://"+proxy.ln.Addr().String(), redis.Options{})
	ctx := t.Context()
	const id = "retry"
	first := pokes(id, 0, 2)
	if err := st.Append(ctx, id, first...); err != nil { // loads the script
		t.Fatal(err)
	}
	batch := pokes(id, 2, 3)
	proxy.armed.Store(true)
	if err := st.Append(ctx, id, batch...); err != nil {
		t.Fatalf("Append whose first reply was lost: %v (go-redis should retry)", err)
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d replies, want 1", proxy.cuts.Load())
	}
	sameEvents(t, "events after a retried append", mustLoad(t, st, id), append(first, batch...))

	// The same for a message appended under its request id: the retry is
	// the same append, not a second message of the request.
	msg := ledger.Event{ID: "evt-req", Kind: ledger.KindInput, Time: time.Now().UTC(),
		Input: &ledger.Input{MessageID: "msg-req", RequestID: "req-1", Parts: []ledger.Part{ledger.TextPart("m")}}}
	proxy.armed.Store(true)
	if err := st.AppendRequest(ctx, id, "req-1", msg); err != nil {
		t.Fatalf("AppendRequest whose first reply was lost: %v, want the retry taken for the same append", err)
	}
	if proxy.cuts.Load() != 2 {
		t.Fatalf("the proxy cut %d replies, want 2", proxy.cuts.Load())
	}
	sameEvents(t, "events after a retried AppendRequest", mustLoad(t, st, id), append(append(first, batch...), msg))
}

// TestFailedFirstAppendKeepsTheIndex: the append script sets the batch's
// token before its first XADD; when that XADD fails (here the stream's key
// holds a string), it puts the token key back as it was, so that the next
// Append is still the session's first and lists it.
func TestFailedFirstAppendKeepsTheIndex(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{Prefix: "f"})
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	const events, token = "f:{default:s}:events", "f:{default:s}:token"
	for _, prev := range []string{"an-earlier-token", ""} {
		raw.Del(ctx, events, token)
		if prev != "" {
			raw.Set(ctx, token, prev, 0)
		}
		raw.Set(ctx, events, "not a stream", 0)
		for _, batch := range [][]ledger.Event{pokes("s", 0, 1), pokes("s", 1, 3)} {
			err := st.Append(ctx, "s", batch...)
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Append onto a key of another type: %v, want WRONGTYPE", err)
			}
			if got, err := raw.Get(ctx, token).Result(); (prev == "" && err != goredis.Nil) || (prev != "" && got != prev) {
				t.Fatalf("the token key after a failed Append: %q, %v; want it as it was (%q)", got, err, prev)
			}
		}
	}
	raw.Del(ctx, events)
	if err := st.Append(ctx, "s", pokes("s", 0, 2)...); err != nil {
		t.Fatal(err)
	}
	if ids, err := st.ListSessions(ctx); err != nil || len(ids) != 1 || ids[0] != "s" {
		t.Fatalf("ListSessions after the failed appends and a good one: %q, %v", ids, err)
	}
}

// TestCorruptEntry: an entry that does not decode fails Load with a
// CorruptError naming the stream and the entry.
func TestCorruptEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{Prefix: "c"})
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	for _, tc := range []struct {
		id     string
		values []any
		want   string
	}{
		{"garbage", []any{"e", "not json"}, "invalid character"},
		{"no-field", []any{"x", "y"}, `no field "e"`},
		{"version", []any{"e", `{"v":99,"id":"x","kind":"poke"}`}, "unsupported schema version"},
	} {
		if err := st.Append(ctx, tc.id, poke(tc.id, 0)); err != nil {
			t.Fatal(err)
		}
		key := "c:{default:" + tc.id + "}:events"
		entry, err := raw.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: tc.values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Load(ctx, tc.id)
		var ce *redis.CorruptError
		switch {
		case !errors.As(err, &ce) || !errors.Is(err, redis.ErrCorrupt) || !errors.Is(err, storage.ErrCorrupt):
			t.Errorf("Load of a session with a bad entry (%s) = %v, want a *CorruptError", tc.id, err)
		case ce.EntryID != entry || ce.Key != key:
			t.Errorf("CorruptError names %s entry %s, want %s entry %s", ce.Key, ce.EntryID, key, entry)
		case !strings.Contains(err.Error(), entry) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("error %q does not name entry %s and say %q", err, entry, tc.want)
		}
	}
}

// TestKeyLayout pins the documented keys and entry fields.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{Prefix: "app:agentic", Tenant: "acme"})
	other := open(t, srv.URL(), redis.Options{Prefix: "app:agentic"})
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	if err := st.Append(ctx, "s:1", pokes("s", 0, 3)...); err != nil {
		t.Fatal(err)
	}
	msg := ledger.Event{ID: "evt-req", Kind: ledger.KindInput, Time: time.Now().UTC(),
		Input: &ledger.Input{MessageID: "msg-1", RequestID: "req-1", Parts: []ledger.Part{ledger.TextPart("m")}}}
	if err := st.AppendRequest(ctx, "s:1", "req-1", msg); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSnapshot(ctx, "s:1", "evt-req", []byte("state")); err != nil {
		t.Fatal(err)
	}
	lease, err := st.AcquireLease(ctx, "s:1", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := raw.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app:agentic:{acme:s:1}:events":   "stream",
		"app:agentic:{acme:s:1}:lease":    "string",
		"app:agentic:{acme:s:1}:token":    "string",
		"app:agentic:{acme:s:1}:requests": "hash",
		"app:agentic:{acme:s:1}:snapshot": "hash",
		"app:agentic:{acme}:sessions":     "zset",
	}
	if len(keys) != len(want) {
		t.Errorf("keys %q, want %d keys", keys, len(want))
	}
	for _, k := range keys {
		typ, err := raw.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want[k] != typ {
			t.Errorf("key %q of type %s, want %q", k, typ, want[k])
		}
	}
	if reqs := raw.HGetAll(ctx, "app:agentic:{acme:s:1}:requests").Val(); len(reqs) != 1 || !strings.HasPrefix(reqs["req-1"], "msg-1 ") {
		t.Errorf("requests hash holds %v, want req-1 → msg-1", reqs)
	}
	msgs := raw.XRange(ctx, "app:agentic:{acme:s:1}:events", "-", "+").Val()
	snap := raw.HGetAll(ctx, "app:agentic:{acme:s:1}:snapshot").Val()
	if sum := sha256.Sum256([]byte(msgs[len(msgs)-1].Values["e"].(string))); len(snap) != 4 || snap["entry"] != msgs[len(msgs)-1].ID ||
		snap["event"] != "evt-req" || snap["data"] != "state" || snap["sum"] != hex.EncodeToString(sum[:]) {
		t.Errorf("snapshot hash holds %v, want entry %s, event evt-req, its sum and data state", snap, msgs[len(msgs)-1].ID)
	}
	if owner := raw.Get(ctx, "app:agentic:{acme:s:1}:lease").Val(); owner != "me" {
		t.Errorf("lease key holds %q, want the owner token", owner)
	}
	if ttl := raw.PTTL(ctx, "app:agentic:{acme:s:1}:lease").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("lease key PTTL %v, want at most a minute", ttl)
	}
	for i, m := range msgs {
		if _, ok := m.Values["e"]; !ok || len(m.Values) != 1 {
			t.Errorf("entry %d has fields %v, want e only", i, m.Values)
		}
	}
	if score := raw.ZScore(ctx, "app:agentic:{acme}:sessions", "s:1").Val(); time.Since(time.UnixMilli(int64(score))) > time.Minute {
		t.Errorf("index score %v is not the time of the first append", score)
	}
	// Tenants do not see each other.
	if ids, err := other.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSessions of another tenant = %q, %v; want none", ids, err)
	}
	if got, err := other.Load(ctx, "s:1"); err != nil || len(got) != 0 {
		t.Errorf("Load by another tenant = %d events, %v; want none", len(got), err)
	}
	_ = lease.Release(ctx)
	if n := raw.Exists(ctx, "app:agentic:{acme:s:1}:lease").Val(); n != 0 {
		t.Errorf("the lease key survived Release")
	}
}

// TestWatchAcrossRestart: a watch reconnects after the server restarts and
// reports the appends made then.
func TestWatchAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts redis-server")
	}
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	st := open(t, srv.URL(), redis.Options{WatchBlock: 200 * time.Millisecond})
	other := open(t, srv.URL(), redis.Options{})
	ctx := t.Context()
	ch, err := st.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Append(ctx, "w", poke("w", 0)); err != nil {
		t.Fatal(err)
	}
	waitFire(t, ch)
	srv.Kill()
	time.Sleep(300 * time.Millisecond) // the watch fails and backs off
	srv.Restart()
	if err := other.Append(ctx, "w", poke("w", 1)); err != nil {
		t.Fatal(err)
	}
	waitFire(t, ch)
}

func waitFire(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not fire within 10s")
	}
}

// TestRequestOfAGoneEntry: a request id whose message's entry is gone from
// the stream (an older build deleted or replaced the session, leaving the
// requests hash as it was) refuses no new message.
func TestRequestOfAGoneEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{Prefix: "g"})
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	now := time.Now().UTC()
	msg := func(id string) ledger.Event {
		return ledger.Event{ID: "evt-" + id, Kind: ledger.KindInput, Time: now,
			Input: &ledger.Input{MessageID: id, RequestID: "req", Parts: []ledger.Part{ledger.TextPart("m")}}}
	}
	if err := st.AppendRequest(ctx, "s", "req", msg("m1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := errors.AsType[*storage.RequestSeenError](st.AppendRequest(ctx, "s", "req", msg("m2"))); !ok {
		t.Fatal("a request appended already was not refused")
	}
	// What an older build's DeleteSession removes: not the hash.
	raw.Del(ctx, "g:{default:s}:events", "g:{default:s}:token")
	if err := st.AppendRequest(ctx, "s", "req", msg("m3")); err != nil {
		t.Fatalf("AppendRequest after the first message's entry went: %v, want it appended", err)
	}
	sameEvents(t, "the session after an old delete and the request again", mustLoad(t, st, "s"), []ledger.Event{msg("m3")})
	if _, ok := errors.AsType[*storage.RequestSeenError](st.AppendRequest(ctx, "s", "req", msg("m4"))); !ok {
		t.Fatal("the request's new message does not refuse another")
	}
}

// TestSnapshotStale: a snapshot whose entry no longer holds what it was
// taken of — the entry's encoding changed below the store (a rewrite keeps
// entry ids), or the stream rebuilt with new entries by a build that knew
// no snapshots and left the hash — is no snapshot: LoadSnapshot returns
// the whole ledger, as Load does.
func TestSnapshotStale(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st := open(t, srv.URL(), redis.Options{Tenant: "acme"})
	raw := rawClient(t, srv.Addr())
	ctx := t.Context()
	evs := pokes("s", 0, 4)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, key string)
	}{
		{"encoding", func(t *testing.T, key string) {
			// The snapshot's entry rewritten in place, its id kept.
			msgs := raw.XRange(ctx, key, "-", "+").Val()
			e := evs[1]
			e.Poke = &ledger.Poke{Text: "edited"}
			b, err := ledger.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			tmp := key + ":tmp"
			for i, m := range msgs {
				v := m.Values["e"]
				if i == 1 {
					v = string(b)
				}
				raw.XAdd(ctx, &goredis.XAddArgs{Stream: tmp, ID: m.ID, Values: []any{"e", v}})
			}
			raw.Rename(ctx, tmp, key)
		}},
		{"rebuilt earlier", func(t *testing.T, key string) {
			// The same events in new entries, of ids before the
			// snapshot's.
			msgs := raw.XRange(ctx, key, "-", "+").Val()
			raw.Del(ctx, key)
			for i, m := range msgs {
				raw.XAdd(ctx, &goredis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-1", i+1), Values: []any{"e", m.Values["e"]}})
			}
		}},
		{"rebuilt later", func(t *testing.T, key string) {
			// The events from the snapshot's on, in new entries of ids
			// after the snapshot's: its entry's encoding comes first.
			msgs := raw.XRange(ctx, key, "-", "+").Val()
			raw.Del(ctx, key)
			for i, m := range msgs[1:] {
				raw.XAdd(ctx, &goredis.XAddArgs{Stream: key, ID: fmt.Sprintf("9999999999999-%d", i+1), Values: []any{"e", m.Values["e"]}})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "stale-" + strings.ReplaceAll(tc.name, " ", "-")
			if err := st.Append(ctx, id, evs...); err != nil {
				t.Fatal(err)
			}
			if err := st.PutSnapshot(ctx, id, evs[1].ID, []byte("state")); err != nil {
				t.Fatal(err)
			}
			if data, at, tail, err := st.LoadSnapshot(ctx, id); err != nil || string(data) != "state" || at != evs[1].ID || len(tail) != 2 {
				t.Fatalf("before the damage: %q at %q, %d events, %v", data, at, len(tail), err)
			}
			tc.damage(t, "agentic:{acme:"+id+"}:events")
			full, err := st.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			data, at, events, err := st.LoadSnapshot(ctx, id)
			if err != nil || data != nil || at != "" || !reflect.DeepEqual(events, full) {
				t.Errorf("after the damage: snapshot %q at %q, %d events, %v; want none and the whole ledger (%d)", data, at, len(events), err, len(full))
			}
		})
	}
}
