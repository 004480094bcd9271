package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

var prefixes atomic.Int64

// stores returns the stores the tests run on: a file store, a Redis one
// and (unless -short) a Redis Cluster one.
func stores(t *testing.T) map[string]func(t *testing.T) storage.Storage {
	srv := redistest.Start(t, redistest.Options{})
	out := map[string]func(t *testing.T) storage.Storage{
		"file": func(t *testing.T) storage.Storage {
			s, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) storage.Storage {
			s, err := redis.Open(t.Context(), srv.URL(), redis.Options{Prefix: fmt.Sprintf("ret%d", prefixes.Add(1))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	if !testing.Short() {
		c := redistest.StartCluster(t, 3)
		url := "redis+cluster://" + strings.Join(c.Addrs(), ",")
		out["cluster"] = func(t *testing.T) storage.Storage {
			s, err := redis.Open(t.Context(), url, redis.Options{Prefix: fmt.Sprintf("ret%d", prefixes.Add(1))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	return out
}

var secret = []byte("0123456789abcdef0123456789abcdef")

// publish is a tool with an external effect: a call waits for approval.
var publish = host.NewTool(host.ToolSpec{Name: "publish", Effect: host.EffectExternal,
	InputSchema: json.RawMessage(`{"type":"object"}`)},
	func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "done"}, nil
	})

// setup makes n finished sessions s0…s(n-1), oldest first, on a host over
// store.
func setup(t *testing.T, store storage.Storage, n int) *hosttest.Harness {
	t.Helper()
	hs := hosttest.New(t, host.Options{Storage: store, ApprovalSecret: secret, Agent: host.Agent{Tools: []host.Tool{publish}}})
	for i := range n {
		if _, err := hs.Host.Session(fmt.Sprintf("s%d", i)).Send(t.Context(), "hello", host.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return hs
}

func sweep(t *testing.T, hs *hosttest.Harness, store storage.Storage, p retention.Policy, now func() time.Time) retention.Report {
	t.Helper()
	rep, err := retention.Sweep(t.Context(), retention.Options{Host: hs.Host, Storage: store, Policy: p, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Errorf("sweep errors: %q", rep.Errors)
	}
	return rep
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// TestSweepKeepLast: the sessions past the last N are archived (one
// readable, importable archive each) and deleted; a second sweep does
// nothing; overrides keep theirs.
func TestSweepKeepLast(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			hs := setup(t, store, 5)
			kv := store.(storage.KV)
			if err := retention.SetOverride(t.Context(), kv, "s0", retention.Override{Keep: true}); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			p := retention.Policy{KeepLast: 2, ArchiveDir: dir}
			rep := sweep(t, hs, store, p, nil)
			// s4 and s3 are the last two; s0 is kept by its override.
			if got := sorted(rep.Archived); !slices.Equal(got, []string{"s1", "s2"}) || rep.Kept != 3 || len(rep.Deleted) != 0 {
				t.Fatalf("report %+v, want s1 and s2 archived, 3 kept", rep)
			}
			for _, id := range []string{"s1", "s2"} {
				if n := len(hs.Events(id)); n != 0 {
					t.Errorf("%s has %d events after its sweep", id, n)
				}
				f, err := os.Open(filepath.Join(dir, id+".tar.gz"))
				if err != nil {
					t.Fatal(err)
				}
				a, err := archive.Read(f, archive.ReadOptions{})
				f.Close()
				if err != nil || len(a.Sessions) != 1 || a.Sessions[0].ID != id || len(a.Sessions[0].Events) == 0 {
					t.Fatalf("the archive of %s: %+v, %v", id, a, err)
				}
				back := memory.New()
				if _, err := archive.Import(t.Context(), back, a, archive.ImportOptions{}); err != nil {
					t.Errorf("importing the archive of %s: %v", id, err)
				}
			}
			if again := sweep(t, hs, store, p, nil); len(again.Archived)+len(again.Deleted)+len(again.Skipped) != 0 {
				t.Errorf("a second sweep: %+v, want nothing to do", again)
			}
		})
	}
}

// TestSweepOverrideKeepDays: a session kept by its own keep_days does not
// count among the policy's last N: the last N of the others are kept
// beside it. The zero override removes it: the session then counts again.
func TestSweepOverrideKeepDays(t *testing.T) {
	store := memory.New()
	hs := setup(t, store, 5) // s4 is the most recent
	var kv storage.KV = store
	if err := retention.SetOverride(t.Context(), kv, "s4", retention.Override{KeepDays: 100}); err != nil {
		t.Fatal(err)
	}
	p := retention.Policy{KeepLast: 2, Action: retention.ActionDelete}
	rep := sweep(t, hs, store, p, nil)
	if got := sorted(rep.Deleted); !slices.Equal(got, []string{"s0", "s1"}) || rep.Kept != 3 {
		t.Fatalf("report %+v, want s0 and s1 deleted, s2 and s3 kept as the last two beside s4", rep)
	}
	if err := retention.SetOverride(t.Context(), kv, "s4", retention.Override{}); err != nil {
		t.Fatal(err)
	}
	if o, err := retention.GetOverride(t.Context(), kv, "s4"); err != nil || o != (retention.Override{}) {
		t.Fatalf("the override after the zero one: %+v, %v; want none", o, err)
	}
	rep = sweep(t, hs, store, p, nil)
	if !slices.Equal(rep.Deleted, []string{"s2"}) || rep.Kept != 2 {
		t.Fatalf("report %+v after the override was removed, want s2 deleted (s4 counts among the last two again)", rep)
	}
}

// TestSweepSkips: a session parked for approval, one whose lease another
// host holds (Redis), one with a run in progress here and one kept by its
// own keep_days are left; the others past keep_days are deleted.
func TestSweepSkips(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			hs := setup(t, store, 3)
			ctx := t.Context()
			hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish", Arguments: `{}`}}})
			res, err := hs.Host.Session("parked").Send(ctx, "publish it", host.SendOptions{})
			if err != nil || res.Status != ledger.RunApprovalRequired {
				t.Fatalf("parked: %+v, %v", res, err)
			}
			if err := retention.SetOverride(ctx, store.(storage.KV), "s2", retention.Override{KeepDays: 100}); err != nil {
				t.Fatal(err)
			}
			want := []string{"s1"}
			if l, ok := store.(storage.Leaser); ok {
				lease, err := l.AcquireLease(ctx, "s0", "other-host", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				defer lease.Release(ctx)
			} else {
				want = []string{"s0", "s1"}
			}
			later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
			rep := sweep(t, hs, store, retention.Policy{KeepDays: 30, Action: retention.ActionDelete}, later)
			if got := sorted(rep.Deleted); !slices.Equal(got, want) || len(rep.Archived) != 0 {
				t.Errorf("deleted %q, want %q (report %+v)", got, want, rep)
			}
			reasons := map[string]string{}
			for _, s := range rep.Skipped {
				reasons[s.Session] = s.Reason
			}
			if reasons["parked"] != "its run waits for approvals" {
				t.Errorf("the parked session: %q, want it skipped for its approvals (report %+v)", reasons["parked"], rep)
			}
			if _, ok := store.(storage.Leaser); ok && reasons["s0"] != "its lease is held by other-host" {
				t.Errorf("the leased session: %q, want it skipped for its lease", reasons["s0"])
			}
			if len(hs.Events("s2")) == 0 || len(hs.Events("parked")) == 0 {
				t.Error("a kept session was deleted")
			}
		})
	}
}

// TestSweepConcurrent: two sweeps at once, on two hosts over one storage,
// archive each session once between them, and leave nothing to a third.
func TestSweepConcurrent(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			hs := setup(t, store, 12)
			other := hosttest.New(t, host.Options{Storage: store, ApprovalSecret: secret})
			dir := t.TempDir()
			p := retention.Policy{KeepLast: 2, ArchiveDir: dir}
			var wg sync.WaitGroup
			reps := make([]retention.Report, 2)
			for i, h := range []*hosttest.Harness{hs, other} {
				wg.Go(func() { reps[i] = sweep(t, h, store, p, nil) })
			}
			wg.Wait()
			all := append(append([]string{}, reps[0].Archived...), reps[1].Archived...)
			var want []string
			for i := range 10 {
				want = append(want, fmt.Sprintf("s%d", i))
			}
			// Skipped sessions were acted on by the other sweep: a third
			// sweep finds nothing either way.
			if third := sweep(t, hs, store, p, nil); len(third.Archived)+len(third.Skipped) != 0 {
				t.Errorf("a third sweep: %+v", third)
			}
			if got := sorted(all); !slices.Equal(got, sorted(want)) {
				t.Errorf("archived %q between the two sweeps, want each of %q once (reports %+v, %+v)", got, want, reps[0], reps[1])
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.tar.gz"))
			if len(files) != 10 {
				t.Errorf("%d archives, want 10", len(files))
			}
		})
	}
}

// TestPolicyCheck: a bad policy says what is wrong.
func TestPolicyCheck(t *testing.T) {
	for _, p := range []retention.Policy{{KeepDays: -1, Action: retention.ActionDelete}, {KeepDays: 1}, {KeepDays: 1, Action: "shred"}} {
		if err := p.Check(); err == nil {
			t.Errorf("Check(%+v): no error", p)
		}
	}
	if err := (retention.Policy{KeepLast: 3, Action: retention.ActionDelete}).Check(); err != nil {
		t.Errorf("a good policy: %v", err)
	}
}

// TestSweepBlobs: a swept session's blobs go with it, but those a kept
// session refers to; its archive carries them; an orphan blob (put by a
// host that stopped before appending its event) goes once past the
// grace, a recent one stays.
func TestSweepBlobs(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			blobs := store.(storage.Blobs)
			hs := hosttest.New(t, host.Options{Storage: store, ApprovalSecret: secret, BlobThreshold: 16})
			shared, own := []byte(strings.Repeat("shared image ", 100)), []byte(strings.Repeat("own image ", 100))
			image := func(b []byte) ledger.Part { return ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: b} }
			if _, err := hs.Host.Session("old").Send(t.Context(), "look", host.SendOptions{Parts: []ledger.Part{image(shared), image(own)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := hs.Host.Session("new").Send(t.Context(), "look", host.SendOptions{Parts: []ledger.Part{image(shared)}}); err != nil {
				t.Fatal(err)
			}
			orphan, err := blobs.PutBlob(t.Context(), []byte("an orphan of a crash"))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			rep := sweep(t, hs, store, retention.Policy{KeepLast: 1, ArchiveDir: dir}, nil)
			if !slices.Equal(rep.Archived, []string{"old"}) || rep.Blobs != 1 || rep.BlobBytes != int64(len(own)) {
				t.Fatalf("report %+v, want old archived with its own blob", rep)
			}
			has := func(b []byte) bool {
				_, ok, err := blobs.GetBlob(t.Context(), storage.BlobDigest(b))
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			if has(own) || !has(shared) || !has([]byte("an orphan of a crash")) {
				t.Errorf("after the sweep: own %v (want gone), shared %v, the recent orphan %v (want both kept)", has(own), has(shared), has([]byte("an orphan of a crash")))
			}
			f, err := os.Open(filepath.Join(dir, "old.tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			a, err := archive.Read(f, archive.ReadOptions{})
			f.Close()
			if err != nil || len(a.Blobs) != 2 {
				t.Fatalf("the archive: %d blobs, %v; want the session's 2", len(a.Blobs), err)
			}
			// Past the grace, the orphan goes, and nothing else.
			again, err := retention.Sweep(t.Context(), retention.Options{Host: hs.Host, Storage: store, Policy: retention.Policy{KeepLast: 1, ArchiveDir: dir}, BlobGrace: -1})
			if err != nil || again.Blobs != 1 || len(again.Archived) != 0 {
				t.Errorf("a sweep with no grace: %+v, %v; want the orphan alone deleted", again, err)
			}
			if _, ok, _ := blobs.GetBlob(t.Context(), orphan); ok || !has(shared) {
				t.Errorf("after a sweep with no grace: the orphan there %v, the shared blob there %v", ok, has(shared))
			}
		})
	}
}

// TestSweepSkipsInUse: a sweep never deletes a session in use, however
// old its last event: one whose run is in progress here, one whose
// messages wait for a run, one whose run was interrupted (to be resumed);
// each is skipped, saying why, and kept whole.
func TestSweepSkipsInUse(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			hs := setup(t, store, 1)
			ctx := t.Context()
			// In progress: a reply that takes a minute (cancelled at the end).
			hs.Model.Enqueue(hosttest.Reply{Text: "slow", Wait: time.Minute})
			if _, err := hs.Host.Session("running").Start(ctx, "take your time", host.StartOptions{}); err != nil {
				t.Fatal(err)
			}
			defer hs.Host.Cancel("running", "the test is over")
			waitRunning(t, hs.Host, "running")
			// A message no run picked up, and a run without its end.
			now := time.Now()
			text := []ledger.Part{ledger.TextPart("hello")}
			if err := store.Append(ctx, "waiting", ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now,
				Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: text}}); err != nil {
				t.Fatal(err)
			}
			msg, run := ledger.NewID("msg"), ledger.NewID("run")
			if err := store.Append(ctx, "interrupted",
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: run, Input: &ledger.Input{MessageID: msg, Parts: text}},
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: run, RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: ledger.NewID("resp")}}); err != nil {
				t.Fatal(err)
			}
			before := map[string]int{}
			for _, id := range []string{"running", "waiting", "interrupted"} {
				before[id] = len(hs.Events(id))
			}
			later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
			rep := sweep(t, hs, store, retention.Policy{KeepDays: 30, Action: retention.ActionDelete}, later)
			if !slices.Equal(sorted(rep.Deleted), []string{"s0"}) {
				t.Errorf("deleted %q, want s0 alone", rep.Deleted)
			}
			reasons := map[string]string{}
			for _, s := range rep.Skipped {
				reasons[s.Session] = s.Reason
			}
			for id, want := range map[string]string{"running": "a run is in progress", "waiting": "messages wait in it", "interrupted": "its run is interrupted"} {
				if reasons[id] != want {
					t.Errorf("%s: skipped for %q, want %q", id, reasons[id], want)
				}
				if n := len(hs.Events(id)); n < before[id] {
					t.Errorf("%s: %d events after the sweep, %d before", id, n, before[id])
				}
			}
		})
	}
}

// waitRunning waits until a run of the session is in flight in h.
func waitRunning(t *testing.T, h *host.Host, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !h.IsRunning(id) {
		if time.Now().After(deadline) {
			t.Fatalf("no run of %s in flight", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
