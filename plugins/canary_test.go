package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// canaryRegistry is a registry with version A of module "v" serving, and
// the changes it reports.
func canaryRegistry(t *testing.T) (*plugins.Registry, func() []plugins.Change) {
	t.Helper()
	rt, _ := newRuntime(t)
	var mu sync.Mutex
	var changes []plugins.Change
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true,
		Limits: func(string) plugins.Limits { return plugins.Limits{Fuel: 1 << 40, CallTimeout: time.Minute} },
		OnChange: func(c plugins.Change) {
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		}})
	t.Cleanup(func() { reg.Close(context.Background()) })
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "A")}); err != nil {
		t.Fatal(err)
	}
	return reg, func() []plugins.Change {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(changes)
	}
}

// versionIn calls tool "version" in session and returns the version that
// answered ("error: …" for an error).
func versionIn(t *testing.T, reg *plugins.Registry, session string) string {
	t.Helper()
	tl, ok := reg.Tool("acme", "version")
	if !ok {
		t.Fatal("no tool version")
	}
	res, err := tl.Call(context.Background(), host.ToolCall{ID: "c-" + session, SessionID: session, Name: "version", Input: []byte(`{}`)})
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSuffix(strings.TrimPrefix(res.Output, `{"version":"`), `"}`)
}

// TestCanary: a canary serves the calls of its share of sessions, each
// session always the same version, the others on the version serving; a
// call without a session goes to the version serving; the canary is
// listed with its counts; promoted, it serves every call and the old
// version joins the history; a version that is the one serving is no
// canary; a module that does not serve has none.
func TestCanary(t *testing.T) {
	ctx := context.Background()
	reg, changes := canaryRegistry(t)
	c, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "B")}, plugins.CanaryOptions{Share: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if c.Share != 0.3 || c.RollbackAfter != 1 || c.Serving == c.Hash || c.Serving == "" {
		t.Fatalf("the canary: %+v", c)
	}
	seen := map[string]string{}
	onB := 0
	for i := range 60 {
		s := fmt.Sprintf("s%d", i)
		seen[s] = versionIn(t, reg, s)
		if seen[s] == "B" {
			onB++
		} else if seen[s] != "A" {
			t.Fatalf("session %s: %s", s, seen[s])
		}
	}
	// 60 sessions at 0.3: 18 expected; the ids are fixed, so is the count.
	if onB < 8 || onB > 30 {
		t.Errorf("%d of 60 sessions on the canary at a share of 0.3", onB)
	}
	for s, v := range seen {
		if got := versionIn(t, reg, s); got != v {
			t.Errorf("session %s saw %s, then %s", s, v, got)
		}
	}
	if got := versionIn(t, reg, ""); got != "A" {
		t.Errorf("a call without a session: %s", got)
	}
	if cs := reg.Canaries("acme"); len(cs) != 1 || cs[0].Calls != int64(2*onB) || cs[0].Failures != 0 {
		t.Errorf("listed: %+v, want %d calls", cs, 2*onB)
	}
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "A")}, plugins.CanaryOptions{}); err == nil {
		t.Error("the version serving started as its own canary")
	}
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "none", Wasm: versionWasm(t, "B")}, plugins.CanaryOptions{}); !errors.Is(err, plugins.ErrNotFound) {
		t.Errorf("a canary of a module that does not serve: %v", err)
	}
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "B")}, plugins.CanaryOptions{Share: 1.5}); err == nil {
		t.Error("a share of 1.5 was taken")
	}

	m, err := reg.PromoteCanary(ctx, "acme", "v")
	if err != nil || m.Hash() != c.Hash {
		t.Fatalf("promote: %v", err)
	}
	for s := range seen {
		if got := versionIn(t, reg, s); got != "B" {
			t.Errorf("after the promotion, session %s: %s", s, got)
		}
	}
	if v := reg.Versions("acme", "v"); len(v) != 1 || v[0].Hash != c.Serving {
		t.Errorf("the history after the promotion: %+v", v)
	}
	if _, ok := reg.Canary("acme", "v"); ok {
		t.Error("the canary is still listed after its promotion")
	}
	if err := reg.RollbackCanary(ctx, "acme", "v"); !errors.Is(err, plugins.ErrNotFound) {
		t.Errorf("rolling back a canary promoted: %v", err)
	}
	var kinds []string
	for _, ch := range changes() {
		kinds = append(kinds, string(ch.Kind))
	}
	if got := strings.Join(kinds, ","); got != "loaded,canary_started,replaced,canary_promoted" {
		t.Errorf("changes %s", got)
	}
}

// TestCanaryEnds: a canary that fails as a module (a trap) is rolled back
// by itself, and the calls of its sessions go to the version serving; one
// with PromoteAfter is promoted by itself after that many calls; a person
// rolls one back; a new version loaded in the module's place, or the
// module unloaded, ends it; a canary's calls are refused nothing while
// another canary takes its place.
func TestCanaryEnds(t *testing.T) {
	ctx := context.Background()
	reg, changes := canaryRegistry(t)
	trap := plugintest.CPlugin(t, "testdata/c", []string{"version.c", cKit + "/agentic.c"}, []string{cKit}, []string{`-DVERSION="T"`, "-DTRAP_VERSION"})
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: trap}, plugins.CanaryOptions{Share: 1}); err != nil {
		t.Fatal(err)
	}
	if got := versionIn(t, reg, "s1"); !strings.Contains(got, "error") {
		t.Fatalf("the trapping canary answered %s", got)
	}
	// The canary leaves the list, then its rollback is told (OnChange):
	// wait for the telling, not only the leaving.
	waitUntil(t, "the canary rolled back, and told", func() bool {
		_, ok := reg.Canary("acme", "v")
		cs := changes()
		return !ok && len(cs) > 0 && cs[len(cs)-1].Kind == plugins.CanaryRolledBack
	})
	if got := versionIn(t, reg, "s1"); got != "A" {
		t.Errorf("after the rollback: %s", got)
	}
	last := changes()[len(changes())-1]
	if last.Kind != plugins.CanaryRolledBack || last.Err == nil || !strings.Contains(last.Err.Error(), "trap") || last.Canary == nil || last.Canary.Failures != 1 {
		t.Errorf("the rollback's change: %+v", last)
	}

	// Promoted by itself after 3 calls.
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "B")}, plugins.CanaryOptions{Share: 1, PromoteAfter: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := versionIn(t, reg, fmt.Sprint("p", i)); got != "B" {
			t.Fatalf("call %d: %s", i, got)
		}
	}
	waitUntil(t, "the canary promoted", func() bool {
		m, _ := reg.Module("acme", "v")
		_, ok := reg.Canary("acme", "v")
		return !ok && versionIn(t, reg, "") == "B" && m != nil
	})

	// A person rolls one back; another version, or an unload, ends one.
	for _, end := range []string{"person", "load", "unload"} {
		if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "C-"+end)}, plugins.CanaryOptions{Share: 1}); err != nil {
			t.Fatal(end, err)
		}
		if got := versionIn(t, reg, "s"); got != "C-"+end {
			t.Fatalf("%s: the canary answered %s", end, got)
		}
		switch end {
		case "person":
			if err := reg.RollbackCanary(ctx, "acme", "v"); err != nil {
				t.Fatal(err)
			}
		case "load":
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "D")}); err != nil {
				t.Fatal(err)
			}
		case "unload":
			reg.Unload("acme", "v")
		}
		if _, ok := reg.Canary("acme", "v"); ok {
			t.Errorf("%s: the canary runs on", end)
		}
		if cs := changes(); !slices.ContainsFunc(cs[len(cs)-2:], func(c plugins.Change) bool { return c.Kind == plugins.CanaryRolledBack }) {
			t.Errorf("%s: no rollback among the last changes: %+v", end, cs[len(cs)-2:])
		}
		if want := map[string]string{"person": "B", "load": "D"}[end]; want != "" {
			if got := versionIn(t, reg, "s"); got != want {
				t.Errorf("after the canary ended by %s: %s, want %s", end, got, want)
			}
		}
	}
}

// TestCanaryWideningHeld: under HoldWidening, a version that widens the one
// serving (a tool more) does not start as a canary — it would serve its
// share of the sessions, and be promoted by itself, unapproved — but is
// held as a canary's, the version serving answering every session; once
// approved it starts as the canary (approved over the version serving)
// and is promoted as any canary. A canary that widens nothing starts at
// once. Fails where StartCanary loaded any version: the widening canary
// served, and promoted itself after its first call.
func TestCanaryWideningHeld(t *testing.T) {
	ctx := context.Background()
	rt, _ := newRuntime(t)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true})
	t.Cleanup(func() { reg.Close(ctx) })
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: widenWasm(t, `VERSION="A"`)}); err != nil {
		t.Fatal(err)
	}
	served, _ := reg.Module("acme", "w")
	report := func(session string) string {
		t.Helper()
		tl, ok := reg.Tool("acme", "report")
		if !ok {
			t.Fatal("no report tool")
		}
		res, err := tl.Call(ctx, host.ToolCall{ID: "c-" + session, SessionID: session, Name: "report", Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Output
	}

	wider := widenWasm(t, `VERSION="B"`, "EXTRA")
	_, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "w", Wasm: wider}, plugins.CanaryOptions{Share: 1, PromoteAfter: 1})
	var he *plugins.HeldError
	if !errors.As(err, &he) || !he.Version.Canary || !strings.Contains(err.Error(), "as a canary") || !strings.Contains(err.Error(), "tool extra: new") {
		t.Fatalf("a widening canary: %v, want it held as a canary", err)
	}
	if _, ok := reg.Canary("acme", "w"); ok {
		t.Fatal("the widening canary runs unapproved")
	}
	if got := report("s1"); got != `{"version":"A"}` {
		t.Errorf("a session while the canary is held: %s", got)
	}
	if h := reg.Held("acme"); len(h) != 1 || !h[0].Canary || h[0].Previous != served.Hash() {
		t.Fatalf("held: %+v", h)
	}

	m, err := reg.ApproveHeld(ctx, "acme", "w", he.Version.Hash)
	if err != nil || m.Hash() != he.Version.Hash {
		t.Fatalf("approve: %v", err)
	}
	c, ok := reg.Canary("acme", "w")
	if !ok || c.ApprovedOver != served.Hash() || c.Hash != he.Version.Hash || c.PromoteAfter != 1 || c.Share != 1 {
		t.Fatalf("after the approval: %+v %v, want the canary, approved over the version serving", c, ok)
	}
	if now, _ := reg.Module("acme", "w"); now.Hash() != served.Hash() || len(reg.Held("acme")) != 0 {
		t.Fatalf("the approval loaded the canary in the place of the version serving, or left it held")
	}
	if got := report("s1"); got != `{"version":"B"}` {
		t.Errorf("a session on the approved canary: %s", got)
	}
	waitUntil(t, "the canary promoted by itself", func() bool {
		now, _ := reg.Module("acme", "w")
		return now.Hash() == he.Version.Hash
	})

	// A canary that widens nothing (a tool fewer) starts at once.
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "w", Wasm: widenWasm(t, `VERSION="C"`, "NO_SECOND")}, plugins.CanaryOptions{Share: 1}); err != nil {
		t.Fatalf("a narrower canary: %v", err)
	}
	if c, ok := reg.Canary("acme", "w"); !ok || c.ApprovedOver != "" {
		t.Errorf("the narrower canary: %+v %v", c, ok)
	}
}

// TestCanaryHammer: calls of many sessions at once while a canary serves,
// promotes itself mid-stream, then while another is rolled back by a
// person mid-stream: every call is answered, by a version serving at the
// time; a session never goes back to the version it left (A then B once
// the canary is promoted; C then B once it is rolled back); the
// promotion is reported once. Run under -race.
func TestCanaryHammer(t *testing.T) {
	ctx := context.Background()
	reg, changes := canaryRegistry(t)
	const workers, calls, sessions = 8, 60, 24
	// hammer calls from workers at once and returns what each session
	// saw, in order; between (if not nil) runs once half the calls are
	// made.
	hammer := func(between func()) map[string][]string {
		var mu sync.Mutex
		seen := map[string][]string{}
		var order [sessions]sync.Mutex // a session's calls one at a time: their order is the order seen
		var wg sync.WaitGroup
		var half sync.WaitGroup
		half.Add(workers)
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					if i == calls/2 {
						half.Done()
					}
					k := (g*calls + i) % sessions
					s := fmt.Sprintf("s%d", k)
					order[k].Lock()
					v := versionIn(t, reg, s)
					mu.Lock()
					seen[s] = append(seen[s], v)
					mu.Unlock()
					order[k].Unlock()
				}
			}()
		}
		if between != nil {
			half.Wait()
			between()
		}
		wg.Wait()
		return seen
	}
	// leftOnce checks each session's versions: only from, to, or from
	// then to, never back.
	leftOnce := func(seen map[string][]string, from, to string) {
		t.Helper()
		for s, vs := range seen {
			moved := false
			for _, v := range vs {
				switch {
				case v == to:
					moved = true
				case v == from && !moved:
				default:
					t.Fatalf("session %s saw %v: want %s then %s", s, vs, from, to)
				}
			}
		}
	}

	c, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "B")}, plugins.CanaryOptions{Share: 0.5, PromoteAfter: 100})
	if err != nil {
		t.Fatal(err)
	}
	leftOnce(hammer(nil), "A", "B")
	if _, ok := reg.Canary("acme", "v"); ok {
		t.Fatal("the canary did not promote itself after 100 calls")
	}
	var promoted []plugins.Change
	for _, ch := range changes() {
		if ch.Kind == plugins.CanaryPromoted {
			promoted = append(promoted, ch)
		}
	}
	if len(promoted) != 1 || promoted[0].Hash != c.Hash {
		t.Fatalf("promotions %+v, want one of %s", promoted, c.Hash)
	}

	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "C")}, plugins.CanaryOptions{Share: 0.5}); err != nil {
		t.Fatal(err)
	}
	seen := hammer(func() {
		if err := reg.RollbackCanary(ctx, "acme", "v"); err != nil {
			t.Errorf("rollback: %v", err)
		}
	})
	leftOnce(seen, "C", "B")
	if got := versionIn(t, reg, "s0"); got != "B" {
		t.Errorf("after the rollback: %s", got)
	}
}

// signalHandler is a slog handler that sends the message of every record
// that contains want on ch (without blocking).
type signalHandler struct {
	want string
	ch   chan string
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalHandler) WithGroup(string) slog.Handler            { return h }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.want) {
		select {
		case h.ch <- r.Message:
		default:
		}
	}
	return nil
}

// TestCanaryPromotionHoldsFileReads: while a canary's promotion is told to
// its listeners — serve writes the promoted version into the module's file
// then — a directory watcher's read of that file, which still holds an
// older version, does not put that version in the promoted one's place
// (serve's CI once saw it do so, the version before coming back right
// after a promotion). The test writes another version into the file while
// the promotion is told, and waits for the watcher to decide on it.
func TestCanaryPromotionHoldsFileReads(t *testing.T) {
	ctx := context.Background()
	superseded := make(chan string, 1)
	rt := plugintest.Runtime(t, plugins.Options{Logger: slog.New(signalHandler{want: "read before another version loaded", ch: superseded})})
	dir := t.TempDir()
	file := filepath.Join(dir, "v.wasm")
	if err := os.WriteFile(file, versionWasm(t, "A"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := versionWasm(t, "D")
	sum := sha256.Sum256(stale)
	staleHash := "sha256:" + hex.EncodeToString(sum[:])
	replacedByStale := make(chan struct{}, 1)
	decided := make(chan error, 1)
	var once sync.Once
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return plugins.Limits{Fuel: 1 << 40, CallTimeout: time.Minute} },
		OnChange: func(c plugins.Change) {
			switch {
			case c.Kind == plugins.Replaced && c.Hash == staleHash:
				select {
				case replacedByStale <- struct{}{}:
				default:
				}
			case c.Kind == plugins.CanaryPromoted:
				once.Do(func() {
					if err := os.WriteFile(file, stale, 0o644); err != nil {
						decided <- err
						return
					}
					select {
					case <-superseded:
						decided <- nil
					case <-replacedByStale:
						decided <- errors.New("the watcher's read replaced the promoted version while its promotion was told")
					case <-time.After(2 * time.Minute):
						decided <- errors.New("the watcher never decided on the file")
					}
				})
			}
		}})
	t.Cleanup(func() { reg.Close(context.Background()) })
	if _, err := reg.Watch(ctx, "acme", dir, plugins.WatchOptions{Debounce: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// B serves, loaded by a person (its file not written here); C is its
	// canary, promoted.
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "B")}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.StartCanary(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "C")}, plugins.CanaryOptions{Share: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.PromoteCanary(ctx, "acme", "v"); err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	if got := versionIn(t, reg, "any"); got != "C" {
		t.Errorf("after the promotion, version %s serves, want C", got)
	}
}
