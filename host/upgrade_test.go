package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// TestRollingUpgradeFeatures: hosts of two builds share a Redis. While a
// host that reads no ledger feature lives, the newer host writes none:
// a fork and a task are refused, naming that host, with nothing written,
// and an attachment stays inline. A session the newer host forked before
// the older one came is left by the older one: a message sent through it
// is queued (ErrUnreadable), its sweep fails nothing, and the newer host
// answers the message. Once the older host leaves, the newer forks again.
func TestRollingUpgradeFeatures(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{})
	newStore := mhOpen(t, srv.URL())
	manual := func(o *host.Options) { o.AutoResume = &host.AutoResume{Interval: -1} }
	newer := mhHost(t, newStore, "host-new", model.URL(), manual)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if got := newer.Agreement().Agreed(); !slices.Equal(got, ledger.Features()) {
		t.Fatalf("alone, the new host agrees on %v, want every feature", got)
	}
	first, err := newer.Session("s").Send(ctx, "hello", host.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fork, err := newer.Fork(ctx, host.ForkOptions{Source: "s", At: first.MessageID, SessionID: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := fork.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("the fork's run: %+v %v", res, err)
	}

	// An older build joins: it reads (and announces) no feature.
	older := mhHost(t, redistest.OlderBuild{Store: mhOpen(t, srv.URL())}, "host-old", model.URL(), manual,
		func(o *host.Options) { o.Features = []ledger.Feature{} })
	if err := newer.Agreement().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := newer.Agreement().Agreed(); len(got) != 0 {
		t.Fatalf("beside the older host, the new host agrees on %v, want none", got)
	}
	_, err = newer.Fork(ctx, host.ForkOptions{Source: "s", At: first.MessageID, SessionID: "f2"})
	fe, ok := errors.AsType[*host.FeatureError](err)
	if !ok || !errors.Is(err, host.ErrFeatureUnavailable) || !slices.Equal(fe.Features, []ledger.Feature{ledger.FeatureFork}) ||
		len(fe.Hosts) != 1 || fe.Hosts[0].Host != "host-old" || !strings.Contains(err.Error(), "host-old") {
		t.Fatalf("a fork beside the older host: %v", err)
	}
	out := newer.Task(ctx, host.TaskSpec{Prompt: "submit", SessionID: "task", Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, `"task"`) || !strings.Contains(out.Reason, "host-old") {
		t.Fatalf("a task beside the older host: %+v", out)
	}
	for _, id := range []string{"f2", "task"} {
		if events, err := newStore.Load(ctx, id); err != nil || len(events) != 0 {
			t.Fatalf("session %s: %d events (%v), want none written", id, len(events), err)
		}
	}
	image := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: make([]byte, host.DefaultBlobThreshold+1)}
	if _, err := newer.Session("img").Send(ctx, "look", host.SendOptions{Parts: []ledger.Part{image}}); err != nil {
		t.Fatal(err)
	}
	if events, err := newStore.Load(ctx, "img"); err != nil || ledger.BlobRefs(events) != nil {
		t.Fatalf("an attachment beside the older host: refs %v (%v), want it inline", ledger.BlobRefs(events), err)
	}

	// The older host cannot read the fork: a message sent through it is
	// queued for a host that can, and its sweep fails nothing.
	res, err := older.Session("f").Send(ctx, "through the old host", host.SendOptions{})
	if !errors.Is(err, host.ErrUnreadable) || res.MessageID == "" {
		t.Fatalf("a send through the older host: %+v %v", res, err)
	}
	// A message that would stop the run in flight is refused there:
	// only a host that reads the session can tell whether one works.
	before, err := newStore.Load(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := older.Session("f").Send(ctx, "stop that", host.SendOptions{Overlap: host.OverlapInterrupt}); !errors.Is(err, host.ErrUnreadable) {
		t.Fatalf("an interrupting send through the older host: %v", err)
	}
	if after, err := newStore.Load(ctx, "f"); err != nil || len(after) != len(before) {
		t.Fatalf("the refused interrupting send appended %d events (%v)", len(after)-len(before), err)
	}
	rep, err := older.Sweep(ctx)
	if err != nil || rep.Unreadable != 1 || rep.Failed+rep.Errors+rep.GaveUp != 0 {
		t.Fatalf("the older host's sweep: %+v %v", rep, err)
	}
	// The newer host answers it.
	if rep, err := newer.Sweep(ctx); err != nil || rep.Unreadable != 0 || rep.Interrupted != 1 {
		t.Fatalf("the newer host's sweep: %+v %v", rep, err)
	}
	for {
		events, err := newStore.Load(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ledger.PendingInputs(events), res.MessageID) && ledger.OpenRuns(events) == nil {
			last := events[len(events)-1]
			if last.RunEnd == nil || last.RunEnd.Status != ledger.RunCompleted || !slices.Contains(ledger.RunInputs(events, last.RunID), res.MessageID) {
				t.Fatalf("the message queued through the older host ended with %+v", last)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the newer host never answered the message queued through the older host")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The older host leaves, withdrawing its announcement.
	if err := older.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := newer.Agreement().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	fork, err = newer.Fork(ctx, host.ForkOptions{Source: "s", At: first.MessageID, SessionID: "f2"})
	if err != nil {
		t.Fatalf("a fork once the older host left: %v", err)
	}
	if res, err := fork.Wait(ctx); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("the fork's run: %+v %v", res, err)
	}
}

// TestAgreementAnnouncements: a host that died (its announcement not
// renewed) stops counting a ttl after its announcement's end, and is
// forgotten ten ttls after; a value in the hosts' namespace that is no
// announcement counts as a host that reads nothing; bad options are
// refused.
func TestAgreementAnnouncements(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	const ttl = time.Minute
	a, err := host.NewAgreement(ctx, host.AgreementOptions{Storage: store, Host: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	announce := func(id string, until time.Time, features ...ledger.Feature) {
		t.Helper()
		b, _ := json.Marshal(host.AnnouncedHost{ID: id, Host: id, Features: features, Until: until})
		if err := store.Set(ctx, host.HostsNamespace, id, b); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	announce("live", now.Add(ttl), ledger.FeatureFork)    // lives
	announce("late", now.Add(-ttl/2), ledger.FeatureFork) // lapsed, within a ttl: its clock may be behind
	announce("gone", now.Add(-2*ttl))                     // lapsed
	announce("dead", now.Add(-11*ttl))                    // forgotten
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range a.Hosts() {
		names = append(names, h.Host)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "late", "live"}) {
		t.Fatalf("live hosts %v, want a, late and live", names)
	}
	if got := a.Agreed(); !slices.Equal(got, []ledger.Feature{ledger.FeatureFork}) {
		t.Fatalf("agreed %v, want fork alone", got)
	}
	if a.Check(ledger.FeatureFork) != nil {
		t.Fatal("fork is read by every live host")
	}
	if err := a.Check(ledger.FeatureBlob); !errors.Is(err, host.ErrFeatureUnavailable) || !strings.Contains(err.Error(), "live") {
		t.Fatalf("blob: %v", err)
	}
	if _, ok, _ := store.Get(ctx, host.HostsNamespace, "dead"); ok {
		t.Fatal("the announcement of a host dead ten ttls ago was kept")
	}
	if _, ok, _ := store.Get(ctx, host.HostsNamespace, "gone"); !ok {
		t.Fatal("the announcement of a host dead two ttls ago was deleted")
	}

	if err := store.Set(ctx, host.HostsNamespace, "junk", []byte("not an announcement")); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Agreed(); len(got) != 0 {
		t.Fatalf("beside a value that is no announcement, agreed %v, want none", got)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	keys, _ := store.Keys(ctx, host.HostsNamespace)
	if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "host") }) {
		t.Fatalf("the closed agreement's announcement stays: %v", keys)
	}

	for _, bad := range []host.AgreementOptions{
		{Storage: store, Features: []ledger.Feature{"teleport"}},
		{Storage: store, TTL: time.Millisecond},
		{Storage: nil},
	} {
		if _, err := host.NewAgreement(ctx, bad); err == nil {
			t.Fatalf("NewAgreement(%+v) took it", bad)
		}
	}
}

var _ storage.KV = memory.New()

// journaledTool is a tool that says it is journaled and records one entry
// when its call keeps a journal.
type journaledTool struct{ host.Tool }

func (journaledTool) Journaled() bool { return true }

// TestRollingUpgradeJournals: a journaled tool's call that keeps a journal
// goes on keeping it when a host that does not read journals arrives (the
// session holds journal events already: that host cannot read it anyway);
// while that host lives, a new call keeps none (it runs as calls did
// before durable calls) and no tool-journal event is written; once that
// host left, calls keep one again.
func TestRollingUpgradeJournals(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	entry := func(k string) []ledger.JournalEntry {
		return []ledger.JournalEntry{{Op: ledger.JournalKVGet, Request: "sha256:" + k, What: k}}
	}
	midCall, goOn := make(chan struct{}), make(chan struct{})
	tool := journaledTool{host.NewTool(host.ToolSpec{Name: "durable"}, func(ctx context.Context, c host.ToolCall) (host.ToolResult, error) {
		if c.Journal == nil {
			return host.ToolResult{Output: "no journal"}, nil
		}
		if err := c.Journal.Record(ctx, "sha256:test", entry("first")); err != nil {
			return host.ToolResult{}, err
		}
		if c.SessionID == "mid" {
			close(midCall)
			<-goOn
		}
		if err := c.Journal.Record(ctx, "sha256:test", entry("second")); err != nil {
			return host.ToolResult{}, err
		}
		return host.ToolResult{Output: "journaled"}, nil
	})}
	m := hosttest.NewModel()
	m.Respond = func(req model.Request) hosttest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == ledger.RoleTool {
			return hosttest.Reply{Text: "the tool said " + last.Text()}
		}
		return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "durable"}}}
	}
	store := mhOpen(t, srv.URL())
	newer := hosttest.New(t, host.Options{Storage: store, Model: m, LeaseTTL: mhLeaseTTL, HostID: "host-new",
		Agent: host.Agent{Model: hosttest.DefaultModel, Tools: []host.Tool{tool}}}).Host
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	journals := func(id string) int {
		events, err := store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return hosttest.CountKind(events, ledger.KindToolJournal)
	}

	run, err := newer.Session("mid").Start(ctx, "go", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-midCall
	older := mhHost(t, redistest.OlderBuild{Store: mhOpen(t, srv.URL())}, "host-old", "http://127.0.0.1:1",
		func(o *host.Options) { o.Features = []ledger.Feature{} })
	if err := newer.Agreement().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	close(goOn)
	if res, err := run.Wait(ctx); err != nil || res.Text != "the tool said journaled" || journals("mid") != 2 {
		t.Fatalf("a call keeping a journal when the older host came: %+v %v, %d journal events", res, err, journals("mid"))
	}

	if res, err := newer.Session("a").Send(ctx, "go", host.SendOptions{}); err != nil || res.Text != "the tool said no journal" || journals("a") != 0 {
		t.Fatalf("beside the older host: %+v %v, %d journal events", res, err, journals("a"))
	}
	if err := older.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := newer.Agreement().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := newer.Session("b").Send(ctx, "go", host.SendOptions{}); err != nil || res.Text != "the tool said journaled" || journals("b") != 2 {
		t.Fatalf("once the older host left: %+v %v, %d journal events", res, err, journals("b"))
	}
}

// unreachableKV is a store whose key-value store fails, as a Redis that is
// down does.
type unreachableKV struct{ *memory.Store }

func (unreachableKV) Set(context.Context, string, string, []byte) error {
	return errors.New("connection refused")
}

// TestAgreementUnreachable: an agreement that cannot announce (its store
// down) is made all the same, and writes no feature meanwhile, saying why.
func TestAgreementUnreachable(t *testing.T) {
	a, err := host.NewAgreement(context.Background(), host.AgreementOptions{Storage: unreachableKV{memory.New()}, Host: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	err = a.Check(ledger.FeatureFork)
	if fe, ok := errors.AsType[*host.FeatureError](err); !ok || len(fe.Hosts) != 0 || !strings.Contains(err.Error(), "announcements cannot be read") {
		t.Fatalf("a fork while the store is unreachable: %v", err)
	}
	if a.Check() != nil {
		t.Fatal("no feature needs no agreement")
	}
}
