//go:build unix

package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// forkStores opens each storage a fork is tested on: files, Redis, and a
// Redis Cluster.
func forkStores(t *testing.T) map[string]func(t *testing.T) storage.Storage {
	return map[string]func(t *testing.T) storage.Storage{
		"file": func(t *testing.T) storage.Storage {
			s, err := file.Open(filepath.Join(t.TempDir(), "ledger"), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) storage.Storage {
			return mhOpen(t, redistest.Start(t, redistest.Options{}).URL())
		},
		"cluster": func(t *testing.T) storage.Storage {
			c := redistest.StartCluster(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := redis.Open(ctx, "redis+cluster://"+strings.Join(c.Addrs(), ","), redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// TestFork: a fork at a step goes on after the step's recorded tool
// results without running the tool again, with another model; a fork at a
// user message answers it anew with replacement text; the source is
// untouched, and the forks show their lineage. On files, Redis and a Redis
// Cluster.
func TestFork(t *testing.T) {
	for name, open := range forkStores(t) {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			store := open(t)
			hs := newHarness(t, fakemodel.Options{}, host.Agent{Tools: []host.Tool{counterTool("lookup", &calls)}},
				func(o *host.Options) { o.Storage = store })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			src := hs.host.Session("src")
			res, err := src.Send(ctx, "please lookup q: alpha", host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted || calls.Load() != 1 {
				t.Fatalf("source: %+v, %v, %d calls", res, err, calls.Load())
			}
			before, err := src.Events(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := src.Transcript(ctx)
			if err != nil || len(tr.Items) != 3 || len(tr.Items[1].ToolCalls) != 1 {
				t.Fatalf("source transcript: %+v, %v", tr, err)
			}
			stepID := tr.Items[1].ID

			// At the step, with another model: the tool is not run again.
			other := host.Agent{Name: "reviewer", Model: "fake/other", Tools: []host.Tool{counterTool("lookup", &calls)}}
			r, err := hs.host.Fork(ctx, host.ForkOptions{Source: "src", At: stepID, SessionID: "f1", Agent: &other})
			if err != nil {
				t.Fatal(err)
			}
			fres, err := r.Wait(ctx)
			if err != nil || fres.Status != ledger.RunCompleted || !strings.Contains(fres.Text, "The lookup tool returned") {
				t.Fatalf("fork at the step: %+v, %v", fres, err)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("the fork ran the tool again: %d calls", n)
			}
			if r.SessionID() != "f1" {
				t.Fatalf("SessionID = %q", r.SessionID())
			}
			ftr, err := hs.host.Session("f1").Transcript(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if f := ftr.ForkedFrom; f == nil || f.Source != "src" || f.Item != stepID || f.Model != "fake/other" || f.Agent != "reviewer" {
				t.Fatalf("lineage: %+v", ftr.ForkedFrom)
			}
			if len(ftr.Items) != 3 || ftr.Items[0].ID != tr.Items[0].ID || ftr.Items[1].ID != stepID ||
				ftr.Items[1].ToolCalls[0].Output != tr.Items[1].ToolCalls[0].Output || ftr.Items[2].Model != "fake/other" {
				t.Fatalf("fork transcript: %+v", ftr.Items)
			}
			u, err := hs.host.Session("f1").Usage(ctx)
			if err != nil || len(u.Runs) != 1 || u.Runs[0].Steps != 1 {
				t.Fatalf("the fork's usage counts the copies: %+v, %v", u, err)
			}

			// At the user message, with other text.
			r, err = hs.host.Fork(ctx, host.ForkOptions{Source: "src", At: tr.Items[0].ID, Text: "just say hi"})
			if err != nil {
				t.Fatal(err)
			}
			fres, err = r.Wait(ctx)
			if err != nil || fres.Status != ledger.RunCompleted || fres.Text != "You said: just say hi" {
				t.Fatalf("fork at the message: %+v, %v", fres, err)
			}
			if !strings.HasPrefix(r.SessionID(), "fork_") || calls.Load() != 1 {
				t.Fatalf("session %q, %d calls", r.SessionID(), calls.Load())
			}
			mtr, err := hs.host.Session(r.SessionID()).Transcript(ctx)
			if err != nil || len(mtr.Items) != 2 || mtr.Items[0].Text != "just say hi" || mtr.ForkedFrom == nil || mtr.ForkedFrom.Copied != 0 {
				t.Fatalf("fork at the message: %+v, %v", mtr, err)
			}

			if forks, err := src.Forks(ctx); err != nil || len(forks) != 2 || !slices.Contains(forks, "f1") || !slices.Contains(forks, r.SessionID()) {
				t.Fatalf("the source lists its forks as %v (%v)", forks, err)
			}
			after, err := src.Events(ctx)
			if err != nil || len(after) != len(before) {
				t.Fatalf("the source changed: %d events, then %d (%v)", len(before), len(after), err)
			}

			for _, c := range []struct {
				name string
				opts host.ForkOptions
				want error
			}{
				{"no source", host.ForkOptions{Source: "nope", At: stepID}, host.ErrSessionNotFound},
				{"no point", host.ForkOptions{Source: "src", At: "resp_nope"}, ledger.ErrForkPointNotFound},
				{"not a point", host.ForkOptions{Source: "src", At: before[len(before)-1].ID}, ledger.ErrForkPointUnfinished},
				{"exists", host.ForkOptions{Source: "src", At: stepID, SessionID: "f1"}, host.ErrSessionExists},
				{"text at a step", host.ForkOptions{Source: "src", At: stepID, Text: "x"}, host.ErrInvalidInput},
				{"no at", host.ForkOptions{Source: "src"}, host.ErrInvalidInput},
			} {
				if _, err := hs.host.Fork(ctx, c.opts); !errors.Is(err, c.want) {
					t.Errorf("%s: got %v, want %v", c.name, err, c.want)
				}
			}
			if evs, _ := hs.host.Session("f1").Events(ctx); hosttest.CountKind(evs, ledger.KindFork) != 1 {
				t.Fatalf("a refused fork wrote to an existing session: %d fork records", hosttest.CountKind(evs, ledger.KindFork))
			}
		})
	}
}

// TestForkTaskStepRefused: a fork at a response of a task's run is
// refused (a fork copies no task: its run would have no deliverable to
// submit), naming the user message to fork at instead; a fork at that
// message works.
func TestForkTaskStepRefused(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{submit(`{"title":"Fixed","count":2}`)}}, host.Agent{})
	ctx := context.Background()
	out := hs.host.Task(ctx, host.TaskSpec{Prompt: "Write a title.", SessionID: "task", Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeSubmitted {
		t.Fatalf("the task: %+v", out)
	}
	var msg, resp string
	for _, e := range hs.events("task") {
		switch {
		case e.Input != nil && msg == "":
			msg = e.Input.MessageID
		case e.Step != nil && resp == "":
			resp = e.Step.ResponseID
		}
	}
	if _, err := hs.host.Fork(ctx, host.ForkOptions{Source: "task", At: resp}); !errors.Is(err, ledger.ErrForkPointUnfinished) || !strings.Contains(err.Error(), "belongs to a task's run; fork at its user message instead") {
		t.Errorf("a fork at the task's response: %v", err)
	}
	if _, err := hs.host.Fork(ctx, host.ForkOptions{Source: "task", At: msg, SessionID: "forked"}); err != nil {
		t.Errorf("a fork at the task's message: %v", err)
	}
}
