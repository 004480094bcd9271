package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

// countingStore counts the whole-ledger loads of a store that keeps
// snapshots, and the loads its snapshots answered.
type countingStore struct {
	storage.Storage
	sn        storage.Snapshotter
	whole     atomic.Int64 // Load, or LoadSnapshot without a snapshot
	fromSnap  atomic.Int64 // LoadSnapshot with one
	snapshots atomic.Int64 // PutSnapshot
}

func (c *countingStore) ListSessions(ctx context.Context) ([]string, error) {
	return c.Storage.(storage.Lister).ListSessions(ctx)
}

func (c *countingStore) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	c.whole.Add(1)
	return c.Storage.Load(ctx, id)
}

func (c *countingStore) PutSnapshot(ctx context.Context, id, at string, data []byte) error {
	c.snapshots.Add(1)
	return c.sn.PutSnapshot(ctx, id, at, data)
}

func (c *countingStore) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	data, at, events, err := c.sn.LoadSnapshot(ctx, id)
	if data != nil {
		c.fromSnap.Add(1)
	} else {
		c.whole.Add(1)
	}
	return data, at, events, err
}

// snapshotStores are the stores the snapshot tests run on. (Wrapped in a
// countingStore, a Redis store keeps its snapshots and loses its leases:
// the host runs as the only one.)
func snapshotStores(t *testing.T) map[string]func() storage.Storage {
	return map[string]func() storage.Storage{
		"memory": func() storage.Storage { return memory.New() },
		"redis": func() storage.Storage {
			return mhOpen(t, redistest.Start(t, redistest.Options{}).URL())
		},
		"file": func() storage.Storage {
			st, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

// longChat runs turns sends in session "long" of a host whose model
// compacts every few turns, and returns what each send answered.
func longChat(t *testing.T, hs *harness, turns int) []string {
	t.Helper()
	sess := hs.host.Session("long")
	var answers []string
	for i := range turns {
		text := filler(i)
		switch {
		case i == 0:
			text = "Remember this: my secret code is ZEBRA42. " + text
		case i == turns-1:
			text = "Tell me: what is my secret code?"
		}
		res, err := sess.Send(context.Background(), text, host.SendOptions{RequestID: fmt.Sprintf("req-%d", i)})
		if err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("turn %d: %+v %v", i, res, err)
		}
		answers = append(answers, res.Text)
	}
	return answers
}

// TestSnapshotAnswersLikeTheLedger: a long chat on a host that keeps
// snapshots and one that does not (NoSnapshots), on each store: the model
// is sent the same prompts, the answers and transcripts are the same, and
// once the session was compacted twice, a snapshot is kept and every
// later send reads it and the events after it — no send reads the whole
// ledger. A request id sent again is answered from before the snapshot.
func TestSnapshotAnswersLikeTheLedger(t *testing.T) {
	for name, open := range snapshotStores(t) {
		t.Run(name, func(t *testing.T) {
			var hosts [2]*harness
			var stores [2]*countingStore
			for i, off := range []bool{false, true} {
				inner := open()
				stores[i] = &countingStore{Storage: inner, sn: inner.(storage.Snapshotter)}
				hosts[i] = newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
					host.Agent{Model: "fake/small"}, func(o *host.Options) {
						o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
						o.Storage = stores[i]
						o.NoSnapshots = off
					})
			}
			const turns = 24
			with, without := longChat(t, hosts[0], turns), longChat(t, hosts[1], turns)
			if !reflect.DeepEqual(with, without) {
				t.Fatalf("answers with snapshots %q, without %q", with, without)
			}
			if with[turns-1] != "Your code is ZEBRA42." {
				t.Errorf("the last answer is %q", with[turns-1])
			}
			prompts := func(hs *harness) []string {
				var out []string
				for _, r := range hs.model.Requests() {
					var b strings.Builder
					for _, m := range r.Messages {
						fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text)
					}
					out = append(out, b.String())
				}
				return out
			}
			if a, b := prompts(hosts[0]), prompts(hosts[1]); !reflect.DeepEqual(a, b) {
				for i := range min(len(a), len(b)) {
					if a[i] != b[i] {
						t.Fatalf("request %d of %d differs:\nwith snapshots:\n%s\nwithout:\n%s", i, len(a), a[i], b[i])
					}
				}
				t.Fatalf("%d requests with snapshots, %d without", len(a), len(b))
			}
			ctx := context.Background()
			ta, _ := hosts[0].host.Session("long").Transcript(ctx)
			tb, _ := hosts[1].host.Session("long").Transcript(ctx)
			if len(ta.Items) != 2*turns || len(tb.Items) != 2*turns {
				t.Errorf("transcripts of %d and %d items, want %d", len(ta.Items), len(tb.Items), 2*turns)
			}
			compactions := 0
			for _, e := range hosts[0].events("long") {
				if e.Compaction != nil {
					compactions++
				}
			}
			if compactions < 4 || stores[0].snapshots.Load() < 2 {
				t.Fatalf("%d compactions, %d snapshots kept; want at least 4 and 2", compactions, stores[0].snapshots.Load())
			}
			if stores[1].snapshots.Load() != 0 || stores[1].fromSnap.Load() != 0 {
				t.Errorf("with NoSnapshots, %d snapshots kept and %d loads from one", stores[1].snapshots.Load(), stores[1].fromSnap.Load())
			}
			// The snapshot answers from now on: sends, and a request sent
			// again from before it.
			stores[0].whole.Store(0)
			stores[0].fromSnap.Store(0)
			sess := hosts[0].host.Session("long")
			for i := range 3 {
				if res, err := sess.Send(ctx, fmt.Sprintf("one more %d", i), host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
					t.Fatalf("a send after the snapshot: %+v %v", res, err)
				}
			}
			if w, s := stores[0].whole.Load(), stores[0].fromSnap.Load(); w != 0 || s < 3 {
				t.Errorf("3 sends after the snapshot read the whole ledger %d times and the snapshot %d times; want 0 and 3 or more", w, s)
			}
			n := len(hosts[0].events("long"))
			res, err := sess.Send(ctx, "a retry", host.SendOptions{RequestID: "req-1"})
			if err != nil || res.Text != with[1] {
				t.Errorf("a request sent again from before the snapshot answered %q, %v; want its first answer %q", res.Text, err, with[1])
			}
			if m := len(hosts[0].events("long")); m != n {
				t.Errorf("a request sent again from before the snapshot appended %d events", m-n)
			}
		})
	}
}

// TestSnapshotDamagedIsRebuilt: a snapshot file damaged on disk is passed
// over — the next send reads the whole ledger and answers as before — and
// a new snapshot takes its place, which the send after reads.
func TestSnapshotDamagedIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	store := &countingStore{Storage: fs, sn: fs}
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
		host.Agent{Model: "fake/small"}, func(o *host.Options) {
			o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
			o.Storage = store
		})
	longChat(t, hs, 16)
	path := filepath.Join(dir, "long.snap")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no snapshot after 16 turns: %v", err)
	}
	b[len(b)/2] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	store.whole.Store(0)
	store.fromSnap.Store(0)
	before := store.snapshots.Load()
	sess := hs.host.Session("long")
	res, err := sess.Send(context.Background(), "Tell me: what is my secret code?", host.SendOptions{})
	if err != nil || res.Text != "Your code is ZEBRA42." {
		t.Fatalf("the send past a damaged snapshot: %+v %v", res, err)
	}
	if w := store.whole.Load(); w == 0 {
		t.Error("the send past a damaged snapshot did not read the whole ledger")
	}
	if store.snapshots.Load() == before {
		t.Fatal("no snapshot was kept in place of the damaged one")
	}
	store.whole.Store(0)
	store.fromSnap.Store(0)
	if _, err := sess.Send(context.Background(), "and again", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if w, s := store.whole.Load(), store.fromSnap.Load(); w != 0 || s == 0 {
		t.Errorf("the send after the rebuilt snapshot read the whole ledger %d times, the snapshot %d times", w, s)
	}
}

// holdModel holds a pass whose last message says HOLD until release is
// closed, telling held when it does.
type holdModel struct {
	host.Model
	held, release chan struct{}
	once          sync.Once
}

// ContextWindow is the client's (so that the host compacts).
func (m *holdModel) ContextWindow(ctx context.Context, name string) (int, error) {
	return m.Model.(interface {
		ContextWindow(context.Context, string) (int, error)
	}).ContextWindow(ctx, name)
}

func (m *holdModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	if n := len(req.Messages); n > 0 && strings.Contains(req.Messages[n-1].Text(), "HOLD") {
		m.once.Do(func() { close(m.held) })
		select {
		case <-m.release:
		case <-ctx.Done():
			return model.Result{}, ctx.Err()
		}
	}
	return m.Model.Stream(ctx, req, onDelta)
}

// TestSnapshotLiveRunReadsWhole: while a run that reads a snapshot's view
// is in flight, what reads the whole session — its transcript, an
// attachment's snapshot, a fork at its first message — sees every item,
// not the view's.
func TestSnapshotLiveRunReadsWhole(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	client, err := provider.New(provider.Config{BaseURL: srv.URL(), APIKey: "test", IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hm := &holdModel{Model: client, held: make(chan struct{}), release: make(chan struct{})}
	store := memory.New()
	counting := &countingStore{Storage: store, sn: store}
	hs := newHarness(t, fakemodel.Options{}, host.Agent{Model: "fake/small"}, func(o *host.Options) {
		o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
		o.Storage, o.Model = counting, hm
	})
	const turns = 16
	longChat(t, hs, turns)
	if counting.snapshots.Load() == 0 {
		t.Fatal("no snapshot after the chat")
	}
	ctx := context.Background()
	sess := hs.host.Session("long")
	counting.fromSnap.Store(0)
	done := make(chan error, 1)
	go func() {
		_, err := sess.Send(ctx, "HOLD on", host.SendOptions{})
		done <- err
	}()
	select {
	case <-hm.held:
	case err := <-done:
		t.Fatalf("the held send ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the send never reached the model")
	}
	if counting.fromSnap.Load() == 0 {
		t.Fatal("the held run does not read the snapshot's view")
	}
	want := 2*turns + 2 // every turn, the held message and its answer streaming
	tr, err := sess.Transcript(ctx)
	if err != nil || len(tr.Items) != want {
		t.Errorf("the transcript during the run: %d items, %v; want %d", len(tr.Items), err, want)
	}
	att, err := sess.Attach(ctx, host.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := att.Next(ctx)
	att.Close()
	if err != nil || u.Snapshot == nil || len(u.Snapshot.Transcript.Items) != want {
		n := -1
		if u.Snapshot != nil {
			n = len(u.Snapshot.Transcript.Items)
		}
		t.Errorf("an attachment's snapshot during the run: %d items, %v; want %d", n, err, want)
	}
	if len(tr.Items) > 0 {
		run, err := hs.host.Fork(ctx, host.ForkOptions{Source: "long", At: tr.Items[0].ID, SessionID: "forked"})
		if err != nil {
			t.Fatalf("a fork at the first message during the run: %v", err)
		}
		if _, err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(hm.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotCallIDsUnique: a model that names every call "call_0" calls
// a tool before the session's snapshot and again after it: the later call
// is renamed, as it would be with the whole ledger in view (the snapshot's
// set of call ids says it may be taken), so that no two calls of the
// ledger share an id.
func TestSnapshotCallIDsUnique(t *testing.T) {
	respond := func(req fakemodel.Request) fakemodel.Reply {
		n := len(req.Messages)
		if n > 0 && req.Messages[n-1].Role == "user" && strings.Contains(req.Messages[n-1].Text, "TOOL") {
			return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{ID: "call_0", Name: "lookup", Arguments: `{}`}}}
		}
		return rememberingModel(req)
	}
	var calls atomic.Int32
	store := memory.New()
	counting := &countingStore{Storage: store, sn: store}
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: respond},
		host.Agent{Model: "fake/small", Tools: []host.Tool{counterTool("lookup", &calls)}}, func(o *host.Options) {
			o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
			o.Storage = counting
		})
	sess := hs.host.Session("long")
	ctx := context.Background()
	if _, err := sess.Send(ctx, "TOOL first", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	longChat(t, hs, 16)
	if counting.snapshots.Load() == 0 {
		t.Fatal("no snapshot after the chat")
	}
	counting.whole.Store(0)
	if _, err := sess.Send(ctx, "TOOL again", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := counting.whole.Load(); w != 0 {
		t.Errorf("the send after the snapshot read the whole ledger %d times", w)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}
	seen := map[string]bool{}
	for _, e := range hs.events("long") {
		if e.Step == nil {
			continue
		}
		for _, c := range e.Step.ToolCalls {
			if seen[c.ID] {
				t.Errorf("call id %q recorded twice", c.ID)
			}
			seen[c.ID] = true
		}
	}
	if len(seen) != 2 {
		t.Errorf("%d calls recorded, want 2", len(seen))
	}
}

// TestSnapshotCompactionBeforeTheCut: a session whose last compaction kept
// nothing (its Through just before it, as hosttest.History writes them),
// answered by an agent that keeps more of the recent turns: its next
// compaction cuts before that compaction's Through, where the snapshot's
// view does not reach — it reads the whole ledger for that, and the model
// is sent what it is sent without snapshots.
func TestSnapshotCompactionBeforeTheCut(t *testing.T) {
	var hosts [2]*harness
	var stores [2]*countingStore
	for i, off := range []bool{false, true} {
		inner := memory.New()
		history := hosttest.History(1001) // 251 turns, compacted at the last
		if err := inner.Append(context.Background(), "long", history...); err != nil {
			t.Fatal(err)
		}
		stores[i] = &countingStore{Storage: inner, sn: inner}
		hosts[i] = newHarness(t, fakemodel.Options{Models: map[string]int{"fake/echo": 10000}, Respond: rememberingModel},
			host.Agent{Model: "fake/echo"}, func(o *host.Options) {
				// Every pass compacts (the last pass's tokens pass 1% of
				// the window), and the summary requests fit the window.
				o.Compaction = &host.Compaction{Limit: 0.01, KeepRecent: 8}
				o.Storage = stores[i]
				o.NoSnapshots = off
			})
	}
	ctx := context.Background()
	for i, hs := range hosts {
		for _, text := range []string{"first since the boot", "second"} {
			if res, err := hs.host.Session("long").Send(ctx, text, host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("host %d, %q: %+v %v", i, text, res, err)
			}
		}
	}
	if stores[0].snapshots.Load() == 0 || stores[0].fromSnap.Load() == 0 {
		t.Fatalf("%d snapshots kept, %d loads from one: want the second send to read one", stores[0].snapshots.Load(), stores[0].fromSnap.Load())
	}
	compactions := func(hs *harness) (n int) {
		for _, e := range hs.events("long") {
			if e.Compaction != nil {
				n++
			}
		}
		return n
	}
	if a, b := compactions(hosts[0]), compactions(hosts[1]); a != b || a < 2 {
		t.Fatalf("%d and %d compactions, want the same, past History's", a, b)
	}
	ra, rb := hosts[0].model.Requests(), hosts[1].model.Requests()
	if len(ra) != len(rb) {
		t.Fatalf("%d model requests with snapshots, %d without", len(ra), len(rb))
	}
	for i := range ra {
		if !reflect.DeepEqual(ra[i].Messages, rb[i].Messages) {
			t.Fatalf("model request %d differs: %d messages with snapshots, %d without", i, len(ra[i].Messages), len(rb[i].Messages))
		}
	}
}

// TestSnapshotAcrossHostsOnRedis: two hosts on one Redis, with leases. Host
// A chats until the session keeps a snapshot; host B, which never saw the
// session, answers from it — a question whose answer is in the compaction
// notes, and a retry of a message from before the snapshot, answered as
// first and appended once — then A answers after B.
func TestSnapshotAcrossHostsOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel})
	storeA, storeB := mhOpen(t, srv.URL()), mhOpen(t, srv.URL())
	small := func(o *host.Options) {
		o.Agent = host.Agent{Model: "fake/small"}
		o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
	}
	hostA := mhHost(t, storeA, "host-a", model.URL(), small)
	hostB := mhHost(t, storeB, "host-b", model.URL(), small)
	answers := longChat(t, &harness{host: hostA}, 16)
	ctx := context.Background()
	data, _, _, err := storeB.LoadSnapshot(ctx, "long")
	if err != nil || data == nil {
		t.Fatalf("no snapshot on Redis after host A's chat: %v", err)
	}
	before := len(hosttest.Load(t, storeB, "long"))
	res, err := hostB.Session("long").Send(ctx, "a retry", host.SendOptions{RequestID: "req-1"})
	if err != nil || res.Text != answers[1] {
		t.Errorf("host B's retry of a message from before the snapshot: %q, %v; want %q", res.Text, err, answers[1])
	}
	if n := len(hosttest.Load(t, storeB, "long")); n != before {
		t.Errorf("host B's retry appended %d events", n-before)
	}
	for i, h := range []*host.Host{hostB, hostA} {
		res, err := h.Session("long").Send(ctx, "Tell me: what is my secret code?", host.SendOptions{})
		if err != nil || res.Text != "Your code is ZEBRA42." {
			t.Errorf("host %c: %q, %v", "BA"[i], res.Text, err)
		}
	}
}

// TestSnapshotBootSweep: a host booting over a session with a snapshot and
// a run a dead host left open resumes it from the snapshot's view: the
// boot sweep's look and the resume read no whole ledger, and the resumed
// run answers from the compaction notes.
func TestSnapshotBootSweep(t *testing.T) {
	dir := t.TempDir()
	open := func() *countingStore {
		fs, err := file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Close() })
		return &countingStore{Storage: fs, sn: fs}
	}
	small := func(o *host.Options) {
		o.Compaction = &host.Compaction{Limit: 0.3, KeepRecent: 2}
	}
	first := open()
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
		host.Agent{Model: "fake/small"}, small, func(o *host.Options) { o.Storage = first })
	longChat(t, hs, 16)
	if first.snapshots.Load() == 0 {
		t.Fatal("no snapshot after the chat")
	}
	hs.host.Close(context.Background())
	// A dead host's run: its message and run-start, nothing after.
	now := time.Now().UTC()
	if err := first.Append(context.Background(), "long",
		ledger.Event{ID: "evt_dead_in", Kind: ledger.KindInput, Time: now, RunID: "run_dead",
			Input: &ledger.Input{MessageID: "msg_dead", Parts: []ledger.Part{ledger.TextPart("Tell me: what is my secret code?")}}},
		ledger.Event{ID: "evt_dead_start", Kind: ledger.KindRunStart, Time: now, RunID: "run_dead",
			RunStart: &ledger.RunStart{Inputs: []string{"msg_dead"}, ResponseID: "resp_dead", Agent: "default", Model: "fake/small", MaxSteps: host.DefaultMaxSteps}},
	); err != nil {
		t.Fatal(err)
	}
	second := open()
	resumed := make(chan host.RunResult, 1)
	newHarness(t, fakemodel.Options{Models: map[string]int{"fake/small": 2000}, Respond: rememberingModel},
		host.Agent{Model: "fake/small"}, small, func(o *host.Options) {
			o.Storage = second
			o.AutoResume = &host.AutoResume{OnResumed: func(_ string, res host.RunResult, err error) {
				if err != nil {
					t.Errorf("the resume: %v", err)
				}
				resumed <- res
			}}
		})
	select {
	case res := <-resumed:
		if res.Status != ledger.RunCompleted || res.Text != "Your code is ZEBRA42." {
			t.Errorf("the resumed run: %+v", res)
		}
	case <-time.After(time.Minute):
		t.Fatal("the boot sweep resumed nothing")
	}
	if w, s := second.whole.Load(), second.fromSnap.Load(); w != 0 || s < 2 {
		t.Errorf("the boot sweep and the resume read the whole ledger %d times and the snapshot %d times; want 0 and 2 or more", w, s)
	}
}
