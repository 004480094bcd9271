package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
	"github.com/agentichost/agentic/webhook"
)

var secret = []byte("whsec-0123456789abcdef")

// receiver is an endpoint that checks each delivery's signature and
// records it.
type receiver struct {
	t    testing.TB
	srv  *httptest.Server
	fail atomic.Int64 // answer this many more requests 503

	mu   sync.Mutex
	got  []webhook.Payload
	bad  []string // what failed the checks
	seen chan struct{}
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{t: t, seen: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if r.fail.Add(-1) >= 0 {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	r.fail.Store(0)
	r.mu.Lock()
	defer r.mu.Unlock()
	var p webhook.Payload
	switch err := webhook.Verify(secret, req.Header.Get(webhook.SignatureHeader), body, 0, time.Now()); {
	case err != nil:
		r.bad = append(r.bad, err.Error())
	case json.Unmarshal(body, &p) != nil:
		r.bad = append(r.bad, "not JSON: "+string(body))
	case req.Header.Get("X-Agentic-Event") != p.Type || req.Header.Get("X-Agentic-Delivery") != p.ID:
		r.bad = append(r.bad, "headers do not name the payload: "+string(body))
	default:
		r.got = append(r.got, p)
	}
	select {
	case r.seen <- struct{}{}:
	default:
	}
}

// ids returns the distinct ids received, sorted, and how many came twice.
func (r *receiver) ids() (ids []string, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range r.got {
		if seen[p.ID] {
			dups++
			continue
		}
		seen[p.ID] = true
		ids = append(ids, p.ID)
	}
	sort.Strings(ids)
	return ids, dups
}

func (r *receiver) payloads() []webhook.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// waitFor waits until the receiver holds n distinct deliveries.
func (r *receiver) waitFor(n int, d time.Duration) {
	r.t.Helper()
	deadline := time.After(d)
	for {
		if ids, _ := r.ids(); len(ids) >= n {
			return
		}
		select {
		case <-r.seen:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			ids, _ := r.ids()
			r.mu.Lock()
			r.t.Fatalf("the receiver got %d deliveries (%v), want %d; refused: %v", len(ids), ids, n, r.bad)
			r.mu.Unlock()
		}
	}
}

// expected returns the ids of the webhook events the sessions' ledgers
// tell, sorted.
func expected(t testing.TB, store storage.Storage, sessions ...string) []string {
	t.Helper()
	var ids []string
	for _, s := range sessions {
		for _, ev := range hosttest.Load(t, store, s) {
			ids = append(ids, webhook.EventIDs(s, ev)...)
		}
	}
	sort.Strings(ids)
	return ids
}

// waitDelivered waits until the outbox lists n deliveries, every one
// finished, and returns them.
func waitDelivered(t testing.TB, ob *webhook.Outbox, n int) []webhook.Delivery {
	t.Helper()
	var list []webhook.Delivery
	for range 400 {
		var err error
		if list, err = ob.Deliveries(context.Background(), webhook.Query{}); err != nil {
			t.Fatal(err)
		}
		if len(list) == n && !slices.ContainsFunc(list, func(d webhook.Delivery) bool { return d.State == webhook.StatePending }) {
			return list
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("deliveries %+v, want %d finished", list, n)
	return nil
}

// stores are the topologies the outbox runs on.
func stores(t *testing.T) map[string]func(t *testing.T) storage.Storage {
	return map[string]func(t *testing.T) storage.Storage{
		"memory": func(*testing.T) storage.Storage { return memory.New() },
		"file": func(t *testing.T) storage.Storage {
			s, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) storage.Storage { return openRedis(t, redistest.Start(t, redistest.Options{}).URL()) },
	}
}

func openRedis(t testing.TB, url string) storage.Storage {
	s, err := redis.Open(context.Background(), url, redis.Options{WatchBlock: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newOutbox(t testing.TB, store storage.Storage, url string, tune func(*webhook.Options)) *webhook.Outbox {
	t.Helper()
	opts := webhook.Options{Storage: store, Endpoints: []webhook.Endpoint{{URL: url}}, Secret: secret, Tenant: "acme",
		Poll: 20 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	if tune != nil {
		tune(&opts)
	}
	o, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// run runs the outbox until the test ends.
func run(t testing.TB, o *webhook.Outbox) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func publishTool(runs *atomic.Int64) host.Tool {
	return host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal},
		func(context.Context, host.ToolCall) (host.ToolResult, error) {
			runs.Add(1)
			return host.ToolResult{Output: "published"}, nil
		})
}

// TestWebhooksTellRunsAndApprovals: on every storage, a run that parks for
// an approval, is approved and ends is told to the endpoint as
// approval.requested, approval.decided and run.ended, each signed, once,
// with the ledger's ids; the outbox lists them delivered.
func TestWebhooksTellRunsAndApprovals(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			rcv := newReceiver(t)
			ob := newOutbox(t, store, rcv.srv.URL, nil)
			run(t, ob)
			var published atomic.Int64
			hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob, Agent: host.Agent{Tools: []host.Tool{publishTool(&published)}}})
			hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish"}}})
			sess := hs.Host.Session("s")
			res, err := sess.Send(ctx, "publish it", host.SendOptions{})
			if err != nil || res.Status != ledger.RunApprovalRequired {
				t.Fatalf("%+v %v", res, err)
			}
			rcv.waitFor(1, 20*time.Second)
			r, err := sess.Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true, By: "ann"})
			if err != nil {
				t.Fatal(err)
			}
			if end, err := r.Wait(ctx); err != nil || end.Status != ledger.RunCompleted {
				t.Fatalf("%+v %v", end, err)
			}
			rcv.waitFor(3, 20*time.Second)
			ids, dups := rcv.ids()
			if want := expected(t, store, "s"); !slices.Equal(ids, want) || dups != 0 {
				t.Fatalf("received %v (%d twice), want %v", ids, dups, want)
			}
			var types []string
			for _, p := range rcv.payloads() {
				types = append(types, p.Type)
				if p.SessionID != "s" || p.Tenant != "acme" || p.RunID != res.RunID {
					t.Errorf("payload %+v", p)
				}
				if p.Type == webhook.ApprovalDecided {
					var d webhook.ApprovalDecidedData
					if json.Unmarshal(p.Data, &d) != nil || d.Decision != "approve" || d.By != "ann" || d.ApprovalID != res.Approvals[0].ApprovalID {
						t.Errorf("decision %s", p.Data)
					}
				}
				if p.Type == webhook.RunEnded {
					var d webhook.RunEndedData
					if json.Unmarshal(p.Data, &d) != nil || d.Status != ledger.RunCompleted {
						t.Errorf("run end %s", p.Data)
					}
				}
			}
			if want := []string{webhook.ApprovalRequested, webhook.ApprovalDecided, webhook.RunEnded}; !slices.Equal(types, want) {
				t.Errorf("types %v, want %v", types, want)
			}
			list := waitDelivered(t, ob, 3)
			for _, d := range list {
				if d.State != webhook.StateDelivered || d.Targets[0].Attempts != 1 || d.Targets[0].LastStatus != 200 {
					t.Errorf("delivery %+v", d)
				}
			}
		})
	}
}

// TestWebhooksRetryThenGiveUp: an endpoint that fails is tried again with
// a backoff until it takes the delivery, each attempt recorded; one that
// fails past RetryFor is given up, listed failed with its last error.
func TestWebhooksRetryThenGiveUp(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	rcv := newReceiver(t)
	rcv.fail.Store(2)
	ob := newOutbox(t, store, rcv.srv.URL, nil)
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob})
	if _, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if ids, _ := rcv.ids(); len(ids) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	list, err := ob.Deliveries(ctx, webhook.Query{State: webhook.StateDelivered})
	if err != nil || len(list) != 1 || list[0].Targets[0].Attempts != 3 || list[0].Type != webhook.RunEnded {
		t.Fatalf("deliveries %+v %v", list, err)
	}

	// An endpoint that never answers 2xx, past RetryFor.
	gone := newReceiver(t)
	gone.fail.Store(1 << 40)
	store2 := memory.New()
	ob2 := newOutbox(t, store2, gone.srv.URL, func(o *webhook.Options) { o.RetryFor = time.Nanosecond })
	end := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: "run_x",
		RunEnd: &ledger.RunEnd{Status: ledger.RunFailed, Reason: "model: budget_exceeded: tenant acme spent $1 of its $1 daily budget"}}
	if err := ob2.Stage(ctx, "s", []ledger.Event{end}); err != nil {
		t.Fatal(err)
	}
	if err := store2.Append(ctx, "s", end); err != nil {
		t.Fatal(err)
	}
	if err := ob2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	failed, err := ob2.Deliveries(ctx, webhook.Query{State: webhook.StateFailed})
	if err != nil || len(failed) != 2 {
		t.Fatalf("failed deliveries %+v %v", failed, err)
	}
	// A run that failed past its budget is told twice: it ended, and a
	// budget stopped it.
	if failed[0].Type != webhook.BudgetExceeded || failed[1].Type != webhook.RunEnded || failed[0].ID != end.ID+".budget" {
		t.Errorf("failed deliveries %+v", failed)
	}
	for _, d := range failed {
		if tg := d.Targets[0]; tg.LastStatus != http.StatusServiceUnavailable || tg.LastError == "" || tg.State != webhook.StateFailed {
			t.Errorf("target %+v", tg)
		}
	}
}

// TestWebhooksNeverInvented: a delivery staged for an event its ledger
// never got (the host died between the two writes) is not sent while its
// append may be on its way, and is forgotten after the grace, unsent and
// unlisted.
func TestWebhooksNeverInvented(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	rcv := newReceiver(t)
	end := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: "run_x",
		RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}}
	ob := newOutbox(t, store, rcv.srv.URL, nil) // a grace of 2m
	if err := ob.Stage(ctx, "s", []ledger.Event{end}); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := ob.Deliveries(ctx, webhook.Query{}); len(list) != 0 {
		t.Fatalf("an unrecorded event is listed: %+v", list)
	}
	short := newOutbox(t, store, rcv.srv.URL, func(o *webhook.Options) { o.Grace = time.Nanosecond })
	if err := short.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Appended now, it is too late: the delivery is gone.
	if err := store.Append(ctx, "s", end); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := rcv.ids(); len(ids) != 0 {
		t.Fatalf("sent %v", ids)
	}
}

// TestWebhooksOneSenderOnRedis: two hosts on one Redis, each with its
// outbox running: every event is told once, by whichever leads; when the
// leader stops, the other takes over and tells what follows.
func TestWebhooksOneSenderOnRedis(t *testing.T) {
	ctx := context.Background()
	rds := redistest.Start(t, redistest.Options{})
	rcv := newReceiver(t)
	var hosts []*hosttest.Harness
	var stops []context.CancelFunc
	for range 2 {
		store := openRedis(t, rds.URL())
		ob := newOutbox(t, store, rcv.srv.URL, func(o *webhook.Options) { o.LeaseTTL = time.Second })
		octx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); ob.Run(octx) }()
		t.Cleanup(func() { stop(); <-done })
		stops = append(stops, func() { stop(); <-done })
		hosts = append(hosts, hosttest.New(t, host.Options{Storage: store, Outbox: ob}))
	}
	var sessions []string
	for i := range 6 {
		s := string(rune('a' + i))
		sessions = append(sessions, s)
		if _, err := hosts[i%2].Host.Session(s).Send(ctx, "hello", host.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rcv.waitFor(6, 20*time.Second)
	stops[0]()
	stops[1]() // both stop; then one comes back
	store := openRedis(t, rds.URL())
	ob := newOutbox(t, store, rcv.srv.URL, func(o *webhook.Options) { o.LeaseTTL = time.Second })
	run(t, ob)
	for i := range 2 {
		s := "later" + string(rune('0'+i))
		sessions = append(sessions, s)
		if _, err := hosts[i].Host.Session(s).Send(ctx, "hello", host.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rcv.waitFor(8, 20*time.Second)
	ids, dups := rcv.ids()
	if want := expected(t, store, sessions...); !slices.Equal(ids, want) || dups != 0 {
		t.Fatalf("received %v (%d twice), want %v", ids, dups, want)
	}
}

func TestSignature(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	now := time.Now()
	h := webhook.Sign(secret, body, now)
	for _, tc := range []struct {
		name   string
		header string
		body   []byte
		secret []byte
		now    time.Time
		want   error
	}{
		{"good", h, body, secret, now, nil},
		{"another secret", h, body, []byte("another secret, long enough"), now, webhook.ErrSignature},
		{"tampered", h, []byte(`{"id":"evt_2"}`), secret, now, webhook.ErrSignature},
		{"old", h, body, secret, now.Add(6 * time.Minute), webhook.ErrTimestamp},
		{"future", h, body, secret, now.Add(-6 * time.Minute), webhook.ErrTimestamp},
		{"rotated", "v1=00," + h, body, secret, now, nil},
		{"empty", "", body, secret, now, webhook.ErrSignature},
		{"no v1", "t=1", body, secret, now, webhook.ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.Verify(tc.secret, tc.header, tc.body, 0, tc.now)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWebhooksRedirectNotFollowed: an endpoint that answers a redirect is
// not followed (the target of a redirect is not the endpoint the operator
// named, and would get the signed body): the delivery is a failure,
// retried, with the 3xx as its last status.
func TestWebhooksRedirectNotFollowed(t *testing.T) {
	ctx := context.Background()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	var asked atomic.Int64
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(moved.Close)
	store := memory.New()
	ob := newOutbox(t, store, moved.URL, func(o *webhook.Options) { o.RetryFor = time.Nanosecond })
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob})
	if _, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	failed, err := ob.Deliveries(ctx, webhook.Query{State: webhook.StateFailed})
	if err != nil || len(failed) != 1 {
		t.Fatalf("failed deliveries %+v %v", failed, err)
	}
	if tg := failed[0].Targets[0]; tg.LastStatus != http.StatusTemporaryRedirect {
		t.Errorf("target %+v, want the 307 as its last status", tg)
	}
	if asked.Load() == 0 || elsewhere.Load() != 0 {
		t.Errorf("the endpoint was asked %d times, the redirect's target %d times; want it asked, the target never", asked.Load(), elsewhere.Load())
	}
}

// TestWebhooksKeep: finished deliveries stay listed for Options.Keep (7
// days by default), then a flush prunes them.
func TestWebhooksKeep(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	rcv := newReceiver(t)
	ob := newOutbox(t, store, rcv.srv.URL, nil)
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob})
	if _, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if list, _ := ob.Deliveries(ctx, webhook.Query{State: webhook.StateDelivered}); len(list) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // older than the short Keep below
	// Outboxes of other processes, on the same storage, prune on their
	// first flush: with the default Keep the delivery stays; with 1ms it
	// goes.
	for _, tc := range []struct {
		keep time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 0}} {
		o := newOutbox(t, store, rcv.srv.URL, func(o *webhook.Options) { o.Keep = tc.keep })
		if err := o.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if list, err := o.Deliveries(ctx, webhook.Query{State: webhook.StateDelivered}); err != nil || len(list) != tc.want {
			t.Errorf("Keep %v: %d delivered deliveries listed after a flush, %v; want %d", tc.keep, len(list), err, tc.want)
		}
	}
}

// TestWebhooksBackoff: a failing endpoint's next attempt waits MinBackoff
// (10 s by default) after its first failure, then twice as long after each
// further one, up to MaxBackoff (an hour by default).
func TestWebhooksBackoff(t *testing.T) {
	ctx := context.Background()
	waits := func(tune func(*webhook.Options), attempts int) []time.Duration {
		t.Helper()
		store := memory.New()
		rcv := newReceiver(t)
		rcv.fail.Store(1 << 40)
		ob := newOutbox(t, store, rcv.srv.URL, tune)
		end := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: "run_x",
			RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}}
		if err := ob.Stage(ctx, "s", []ledger.Event{end}); err != nil {
			t.Fatal(err)
		}
		if err := store.Append(ctx, "s", end); err != nil {
			t.Fatal(err)
		}
		var got []time.Duration
		for len(got) < attempts {
			if err := ob.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			list, err := ob.Deliveries(ctx, webhook.Query{})
			if err != nil || len(list) != 1 {
				t.Fatalf("deliveries %+v, %v", list, err)
			}
			if tg := list[0].Targets[0]; tg.Attempts > len(got) {
				got = append(got, tg.NextAt.Sub(tg.LastAt))
			}
			time.Sleep(time.Millisecond)
		}
		return got
	}
	if got := waits(func(o *webhook.Options) { o.MinBackoff, o.MaxBackoff = 0, 0 }, 1); got[0] != 10*time.Second {
		t.Errorf("the default wait after a first failure: %v, want 10s", got[0])
	}
	got := waits(func(o *webhook.Options) { o.MinBackoff, o.MaxBackoff = 2*time.Millisecond, 10*time.Millisecond }, 5)
	want := []time.Duration{2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Errorf("the waits after each failure: %v, want %v ms", got, want)
			break
		}
	}
	if d := webhook.DefaultMaxBackoff; d != time.Hour {
		t.Errorf("DefaultMaxBackoff %v, want an hour", d)
	}
}
