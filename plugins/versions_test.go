package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// TestRollback: the registry keeps the versions a module replaced, newest
// first and up to KeepVersions; Rollback loads one again in the place of
// the version serving — the newest by default, or the one named — while a
// call in flight finishes on the version it started on; the version that
// served joins the history. A rollback is never held, even where it
// widens; a version not kept is an error that changes nothing; a version
// remembered from elsewhere rolls back too.
func TestRollback(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true, KeepVersions: 2,
		Limits: func(string) plugins.Limits { return plugins.Limits{Fuel: 1 << 40, CallTimeout: time.Minute} }})
	t.Cleanup(func() { reg.Close(ctx) })
	hashes := map[string]string{}
	for _, v := range []string{"A", "B", "C"} {
		m, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, v)})
		if err != nil {
			t.Fatal(err)
		}
		hashes[v] = m.Hash()
	}
	history := func() string {
		var out []string
		for _, v := range reg.Versions("acme", "v") {
			for name, h := range hashes {
				if h == v.Hash {
					out = append(out, name)
				}
			}
		}
		return strings.Join(out, ",")
	}
	answer := func(tool, input string) string {
		t.Helper()
		tl, _ := reg.Tool("acme", tool)
		res, err := tl.Call(ctx, hostCall(tool, input))
		if err != nil {
			t.Fatal(err)
		}
		return res.Output
	}
	if got := history(); got != "B,A" {
		t.Fatalf("history %s, want B,A", got)
	}

	// A slow call on C is in flight during the rollback to B.
	slow := make(chan string)
	go func() {
		tl, _ := reg.Tool("acme", "slow")
		res, err := tl.Call(ctx, hostCall("slow", `{"n":300}`))
		if err != nil {
			res.Output = err.Error()
		}
		slow <- res.Output
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := reg.Rollback(ctx, "acme", "v", ""); err != nil {
		t.Fatal(err)
	}
	if got := answer("version", `{}`); got != `{"version":"B"}` {
		t.Errorf("after the rollback: %s", got)
	}
	if got := <-slow; got != `{"version":"C"}` {
		t.Errorf("the call in flight: %s, want C's answer", got)
	}
	if got := history(); got != "C,A" {
		t.Errorf("history %s, want C,A", got)
	}
	if _, err := reg.Rollback(ctx, "acme", "v", hashes["A"]); err != nil || answer("version", `{}`) != `{"version":"A"}` || history() != "B,C" {
		t.Fatalf("rollback to A: %v, history %s", err, history())
	}
	_, err := reg.Rollback(ctx, "acme", "v", "sha256:nope")
	if !errors.Is(err, plugins.ErrNotFound) || answer("version", `{}`) != `{"version":"A"}` {
		t.Errorf("a version not kept: %v", err)
	}
	if _, err := reg.Rollback(ctx, "acme", "other", ""); !errors.Is(err, plugins.ErrNotFound) {
		t.Errorf("a module without history: %v", err)
	}

	// A narrowing upgrade loads; rolling back widens, and is not held.
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: widenWasm(t)}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: widenWasm(t, "NO_SECOND")}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Rollback(ctx, "acme", "w", ""); err != nil || len(reg.Held("acme")) != 0 {
		t.Fatalf("a rollback that widens: %v, held %+v", err, reg.Held("acme"))
	}
	if _, ok := reg.Tool("acme", "second"); !ok {
		t.Error("the version rolled back to does not serve")
	}

	// Remembered (a host's versions on disk): listed last, rolled back to.
	reg.Remember("acme", "r", plugins.Source{Wasm: versionWasm(t, "old")}, time.Now())
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "r", Wasm: versionWasm(t, "new")}); err != nil {
		t.Fatal(err)
	}
	if v := reg.Versions("acme", "r"); len(v) != 1 || v[0].Fingerprint != "" {
		t.Fatalf("remembered: %+v", v)
	}
	if _, err := reg.Rollback(ctx, "acme", "r", ""); err != nil {
		t.Fatal(err)
	}
	if m, _ := reg.Module("acme", "r"); m == nil || len(reg.Versions("acme", "r")) != 1 {
		t.Errorf("after rolling back to a remembered version: history %+v", reg.Versions("acme", "r"))
	}
}

// TestWatcherNeverUndoesANewerLoad: a version the watcher read from a
// file before another version loaded (an upload, a rollback), or before
// that version's file was written (Registry.FileWritten), does not take
// that one's place when it is ready; the file's next read does.
func TestWatcherNeverUndoesANewerLoad(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return plugins.Limits{Fuel: 1 << 40} }})
	t.Cleanup(func() { reg.Close(ctx) })
	dir := t.TempDir()
	path := filepath.Join(dir, "v.wasm")
	if err := os.WriteFile(path, versionWasm(t, "A"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The debounce keeps the watcher's own events out of the test.
	w, err := reg.Watch(ctx, "acme", dir, plugins.WatchOptions{Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	answer := func() string {
		tl, _ := reg.Tool("acme", "version")
		res, err := tl.Call(ctx, hostCall("version", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		return res.Output
	}
	if got := answer(); got != `{"version":"A"}` {
		t.Fatalf("from the directory: %s", got)
	}
	if err := os.WriteFile(path, versionWasm(t, "B"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit := w.PrepareForTest(ctx, "v") // reads B
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "v", Wasm: versionWasm(t, "C")}); err != nil {
		t.Fatal(err)
	}
	commit()
	if got := answer(); got != `{"version":"C"}` {
		t.Errorf("after the stale read committed: %s, want C's answer", got)
	}
	w.PrepareForTest(ctx, "v")() // read again: the file decides
	if got := answer(); got != `{"version":"B"}` {
		t.Errorf("after the file's next read: %s, want B's answer", got)
	}

	// An upload as serve keeps one: the version loaded, then its file
	// written. The watcher's first read of that file, between the two,
	// finds the version before; once the write is told, that read does
	// not undo the load.
	xpath := filepath.Join(dir, "x.wasm")
	if err := os.WriteFile(xpath, versionWasm(t, "old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "x", Wasm: versionWasm(t, "D")}); err != nil {
		t.Fatal(err)
	}
	commit = w.PrepareForTest(ctx, "x") // reads the version before
	if err := os.WriteFile(xpath, versionWasm(t, "D"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.FileWritten("acme", "x")
	commit()
	sum := sha256.Sum256(versionWasm(t, "D"))
	if m, _ := reg.Module("acme", "x"); m == nil || m.Hash() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("a read from before the file was written put the version before in place")
	}

	// The same with the read committed before the write is told: only a
	// caller that said it would write (FileWriting) keeps that read out.
	ypath := filepath.Join(dir, "y.wasm")
	if err := os.WriteFile(ypath, versionWasm(t, "old"), 0o644); err != nil {
		t.Fatal(err)
	}
	written := reg.FileWriting("acme", "y")
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "y", Wasm: versionWasm(t, "E")}); err != nil {
		t.Fatal(err)
	}
	w.PrepareForTest(ctx, "y")() // reads and commits the version before, before the write
	if err := os.WriteFile(ypath, versionWasm(t, "E"), 0o644); err != nil {
		t.Fatal(err)
	}
	written()
	sum = sha256.Sum256(versionWasm(t, "E"))
	if m, _ := reg.Module("acme", "y"); m == nil || m.Hash() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("a read committed while the file was being written put the version before in place")
	}
	w.PrepareForTest(ctx, "y")() // the file's next read decides: E again
	if m, _ := reg.Module("acme", "y"); m == nil || m.Hash() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("after the write, the file's read: %v", m)
	}
}
