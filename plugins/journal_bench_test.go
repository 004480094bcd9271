package plugins_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// storeJournal is a host.Journal that appends its stretches to a store as
// a run does: one tool-journal event a write, through the session's lease
// where the store has leases (the fenced append of Redis).
type storeJournal struct {
	append  func(ctx context.Context, evs ...ledger.Event) error
	callID  string
	next    int
	runID   string
	written int
}

func (j *storeJournal) Recorded() (string, []ledger.JournalEntry) { return "", nil }

func (j *storeJournal) Event(context.Context, string) ([]byte, bool, error) { return nil, false, nil }

func (j *storeJournal) Record(ctx context.Context, source string, entries []ledger.JournalEntry) error {
	e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindToolJournal, Time: time.Now().UTC(), RunID: j.runID,
		ToolJournal: &ledger.ToolJournal{CallID: j.callID, Name: "http_steps", Source: source, At: j.next, Entries: entries}}
	if err := j.append(ctx, e); err != nil {
		return err
	}
	j.next += len(entries)
	j.written++
	return nil
}

// BenchmarkJournal measures what the journal adds to a plugin's HTTP
// requests: http_steps POSTs 4 steps to a server on loopback a call,
// unjournaled, then journaled on the file store and on Redis (its fenced
// append, under a lease). ns/request is a call's time over its requests:
// the difference between a store's and unjournaled's is the journal's cost
// of one request (two writes: the request's send before it leaves, its
// answer before the guest sees it).
func BenchmarkJournal(b *testing.B) {
	const steps = 4
	srv := newStepServer(b)
	m := loadHTTPStepsB(b, srv)
	tool := moduleToolB(b, m, "http_steps")
	run := func(b *testing.B, journal func(i int) host.Journal) {
		ctx := context.Background()
		call := stepsCall(srv.Server, "http_steps", steps, nil)
		if _, err := tool.Call(ctx, call); err != nil { // warm the pool
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			call.ID = fmt.Sprintf("call_%d", i)
			if journal != nil {
				call.Journal = journal(i)
			}
			if _, err := tool.Call(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/request")
		srv.seed(map[int][]string{})
	}
	b.Run("unjournaled", func(b *testing.B) { run(b, nil) })
	b.Run("file", func(b *testing.B) {
		store, err := file.Open(b.TempDir(), file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		run(b, func(i int) host.Journal {
			return &storeJournal{append: func(ctx context.Context, evs ...ledger.Event) error { return store.Append(ctx, "bench", evs...) },
				callID: fmt.Sprintf("call_%d", i), runID: "run_1"}
		})
	})
	b.Run("redis", func(b *testing.B) {
		rdb := redistest.Start(b, redistest.Options{})
		store, err := redis.Open(context.Background(), rdb.URL(), redis.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		lease, err := store.AcquireLease(context.Background(), "bench", "bench-host", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		defer lease.Release(context.Background())
		run(b, func(i int) host.Journal {
			return &storeJournal{append: lease.Append, callID: fmt.Sprintf("call_%d", i), runID: "run_1"}
		})
	})
}

// BenchmarkReplay measures a resumed call's way back to where it stopped:
// http_steps replayed from a journal of 10, 100 and 1,000 entries (5, 50
// and 500 requests), every host call answered from it, the guest's code
// run again, nothing sent. ns/op is the time until the guest would make
// its first live host call.
func BenchmarkReplay(b *testing.B) {
	srv := newStepServer(b)
	m := loadHTTPStepsB(b, srv)
	tool := moduleToolB(b, m, "http_steps")
	for _, entries := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			full := &memJournal{}
			if _, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", entries/2, full)); err != nil {
				b.Fatal(err)
			}
			if len(full.entries) != entries {
				b.Fatalf("%d entries, want %d", len(full.entries), entries)
			}
			b.ResetTimer()
			for b.Loop() {
				j := &memJournal{source: full.source, entries: slices.Clone(full.entries)}
				if _, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", entries/2, j)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*entries), "ns/entry")
		})
	}
}

// loadHTTPStepsB is loadHTTPSteps for a benchmark: up to 1,000 requests a
// call.
func loadHTTPStepsB(b *testing.B, srv *stepServer) *plugins.Module {
	b.Helper()
	return loadHTTPStepsLimits(b, srv, 1000)
}

func moduleToolB(b *testing.B, m *plugins.Module, name string) host.Tool {
	for _, tool := range m.Tools() {
		if tool.Spec().Name == name {
			return tool
		}
	}
	b.Fatalf("no tool %s", name)
	return nil
}
