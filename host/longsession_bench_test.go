//go:build unix

package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// longHistory appends hosttest.History(n) to session id, in batches of a
// thousand events.
func longHistory(b *testing.B, store storage.Storage, id string, n int) {
	b.Helper()
	events := hosttest.History(n)
	for i := 0; i < len(events); i += 1000 {
		if err := store.Append(context.Background(), id, events[i:min(i+1000, len(events))]...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResumeLongSession measures what a long session costs the host
// to answer a message (Session.Send of one message, answered by an
// in-process model at once: one run of one pass) and to resume a run left
// interrupted in it (Host.Resume after an input and a run-start were
// appended, as a dead host leaves them), at about 1,000 and 100,000 events
// of history (hosttest.History: compacted every 250 turns), on the file
// store and on Redis. The target is the 100,000 figure within 2× the 1,000
// one; every iteration adds its own few events to the session. A first
// answer before the timer reads the whole ledger and keeps the session's
// snapshot (a history of two compactions or more has one), as the first
// answer after an upgrade to a build with snapshots does: the figures are
// those of the answers and resumes after it.
func BenchmarkResumeLongSession(b *testing.B) {
	stores := map[string]func(b *testing.B) storage.Storage{
		"file": func(b *testing.B) storage.Storage {
			s, err := file.Open(b.TempDir(), file.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(b *testing.B) storage.Storage {
			srv := redistest.Start(b, redistest.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := redis.Open(ctx, srv.URL(), redis.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, name := range []string{"file", "redis"} {
		for _, n := range []int{1_000, 100_000} {
			for _, op := range []string{"answer", "resume"} {
				b.Run(fmt.Sprintf("%s/events=%d/%s", name, n, op), func(b *testing.B) {
					store := stores[name](b)
					longHistory(b, store, "long", n)
					model := hosttest.NewModel()
					hs := hosttest.New(b, host.Options{Storage: store, Model: model})
					sess := hs.Host.Session("long")
					ctx := context.Background()
					// The first answer reads the whole ledger and keeps a
					// snapshot of it (a session written before snapshots,
					// or whose snapshot was lost): once, so not measured.
					if _, err := sess.Send(ctx, "the first question since the boot", host.SendOptions{}); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						if op == "answer" {
							res, err := sess.Send(ctx, fmt.Sprintf("one more question, %d", i), host.SendOptions{})
							if err != nil || res.Status != ledger.RunCompleted {
								b.Fatalf("send: %+v, %v", res, err)
							}
							continue
						}
						b.StopTimer()
						run, msg := fmt.Sprintf("run_dead_%d", i), fmt.Sprintf("msg_dead_%d", i)
						now := time.Now().UTC()
						if err := store.Append(ctx, "long",
							ledger.Event{ID: "evt_in_" + run, Kind: ledger.KindInput, Time: now, RunID: run,
								Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("interrupted")}}},
							ledger.Event{ID: "evt_start_" + run, Kind: ledger.KindRunStart, Time: now, RunID: run,
								RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: "resp_" + run, Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}},
						); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						res, err := hs.Host.Resume(ctx, "long")
						if err != nil || res.Status != ledger.RunCompleted {
							b.Fatalf("resume: %+v, %v", res, err)
						}
					}
				})
			}
		}
	}
}
