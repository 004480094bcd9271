//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// recoveryEnv runs TestRecoveryTime (make bench sets it).
const recoveryEnv = "AGENTIC_RECOVERY"

// TestRecoveryTime measures, for make bench, the time from the SIGKILL of
// a serve process in mid-stream to the first progress event of the
// resumed run that a client, reconnected to another process with its
// Last-Event-ID, receives: on files (the next process on the same
// directory, which resumes at boot) and on Redis (a second host, already
// up, which takes over once the dead host's lease lapses; lease_ttl 15 s
// and 3 s), for sessions of about 100, 10,000 and 100,000 events. Each case also
// checks the run: resumed once, completed, its answer whole. The model
// streams a chunk every 10 ms (its first after 10 ms): what is measured
// is the host's part. Set AGENTIC_RECOVERY=1 to run it.
func TestRecoveryTime(t *testing.T) {
	if os.Getenv(recoveryEnv) == "" {
		t.Skipf("a measurement: set %s=1 (make bench does)", recoveryEnv)
	}
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	for _, events := range []int{100, 10_000, 100_000} {
		history := longLedger(t, events)
		for _, c := range []struct{ storage, ttl string }{{"file", ""}, {"redis", "15s"}, {"redis", "3s"}} {
			name := fmt.Sprintf("%s%s/%d", c.storage, c.ttl, events)
			t.Run(name, func(t *testing.T) {
				var storageURL string
				var store storage.Storage
				if c.storage == "file" {
					dir := t.TempDir()
					storageURL, store = "file:"+dir, fileLedger(t, dir)
				} else {
					rds.Do("FLUSHALL")
					storageURL, store = rds.URL(), tenantLedger(t, rds.URL())
				}
				r := measureRecovery(t, bin, storageURL, store, c.ttl, history)
				fmt.Printf("recovery %-12s events %7d: first resumed progress %8.3f s after the kill (resume-attempt written at %.3f s; %s)\n",
					c.storage+" "+c.ttl, len(history)+2, r.first.Seconds(), r.attempt.Seconds(), r.more)
			})
		}
	}
}

// recovery is what measureRecovery measured, from the kill.
type recovery struct {
	first   time.Duration // the client's first progress event of the resumed run
	attempt time.Duration // the resume-attempt event's time (the host's clock)
	more    string
}

// measureRecovery appends history to session "r", starts host A, sends a
// message whose reply the model holds mid-stream, follows it on A, kills
// A, and follows the session on B (started after the kill on files, before
// it on Redis) from the last event id A sent.
func measureRecovery(t *testing.T, bin, storageURL string, store storage.Storage, ttl string, history []ledger.Event) recovery {
	const session = "r"
	ctx := context.Background()
	for i := 0; i < len(history); i += 1000 {
		if err := store.Append(ctx, session, history[i:min(i+1000, len(history))]...); err != nil {
			t.Fatal(err)
		}
	}
	// The first pass that answers the marker is held for good (A dies in
	// it); every other request is the echo, at once.
	// A long message: the resumed pass echoes it for 10 s, so that the
	// client, connected once B listens, sees it stream.
	marker := "the message A dies answering: " + words("m", 1000)
	held := make(chan struct{})
	var heldOnce atomic.Bool
	model, err := fakemodel.Start(fakemodel.Options{ChunkSize: 1, Latency: 10 * time.Millisecond, Respond: func(req fakemodel.Request) fakemodel.Reply {
		reply := fakemodel.DefaultReply(req)
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Text == marker && heldOnce.CompareAndSwap(false, true) {
			reply.Hold, reply.HoldAfter = held, 3
		}
		return reply
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(held); model.Close() })
	extra := "shutdown_grace: 1s\n"
	if ttl != "" {
		extra += "lease_ttl: " + ttl + "\n"
	}
	config := writeServeConfig(t, storageURL, model.URL(), extra)
	a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
	var b *serveProc
	if ttl != "" {
		b = startServe(t, "B", bin, config, "--set", "host_id=host-b")
	}
	_, runID := a.post(session, marker)
	var last string
	awaitEvent(t, a.eventsAfter(session, ""), "A's reply streaming", func(e sseEvent) bool {
		if e.id != "" {
			last = e.id
		}
		return showsText(e, runID)
	})
	a.signal(syscall.SIGKILL)
	killed := time.Now()
	a.wait(30 * time.Second)
	var booted time.Duration
	if b == nil {
		b = startServe(t, "B", bin, config, "--set", "host_id=host-b")
		booted = time.Since(killed)
	}
	awaitEvent(t, b.eventsAfter(session, last), "the resumed run's progress on B", func(e sseEvent) bool {
		return showsText(e, runID)
	})
	first := time.Since(killed)
	evs := hosttest.WaitLedger(t, store, session, 2*time.Minute, "the resumed run ended", hosttest.Settled)
	var r recovery
	r.first = first
	for _, e := range evs[len(history):] {
		if e.ResumeAttempt != nil {
			r.attempt = e.Time.Sub(killed)
		}
	}
	run, _ := ledger.ProjectRun(evs, runID)
	if hosttest.CountKind(evs[len(history):], ledger.KindResumeAttempt) != 1 || run.Status != ledger.RunCompleted || run.Text != "You said: "+marker {
		t.Fatalf("the resumed run: %+v; ledger after the history: %s", run, hosttest.Kinds(evs[len(history):]))
	}
	if booted > 0 {
		r.more = fmt.Sprintf("the next process listening at %.3f s", booted.Seconds())
	} else {
		r.more = "the other host up before the kill"
	}
	return r
}

// showsText reports whether e shows text of run runID streaming: a text
// progress event, or a snapshot (the first event of a stream, and of each
// run) whose transcript holds the run's answer in progress — a run that
// streamed before the client looked shows there.
func showsText(e sseEvent, runID string) bool {
	switch e.name {
	case "progress":
		p := e.progress()
		return p.RunID == runID && p.Type == "text"
	case "snapshot":
		var snap struct {
			Transcript wireTranscript `json:"transcript"`
		}
		json.Unmarshal(e.data, &snap)
		for _, it := range snap.Transcript.Items {
			if it.Kind == "response" && it.RunID == runID && it.Status == string(ledger.StatusStreaming) && it.Text != "" {
				return true
			}
		}
	}
	return false
}

// awaitEvent reads ch until ok accepts an event; it fails the test when
// the stream ends first, or after two minutes (a guard against a hang).
func awaitEvent(t *testing.T, ch <-chan sseEvent, what string, ok func(sseEvent) bool) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case e, open := <-ch:
			if !open {
				t.Fatalf("the stream ended before %s", what)
			}
			if ok(e) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within two minutes", what)
		}
	}
}

var (
	ledgersMu sync.Mutex
	ledgers   = map[int][]ledger.Event{}
)

// longLedger returns the ledger of a chat of at least n events (n/4
// turns of a message and its answer), as a host in memory records it,
// compactions included; past 10,000 events, hosttest.History's (a host
// would take hours to record it: each turn loads the whole ledger).
func longLedger(t *testing.T, n int) []ledger.Event {
	ledgersMu.Lock()
	defer ledgersMu.Unlock()
	if evs, ok := ledgers[n]; ok {
		return evs
	}
	if n > 10_000 {
		ledgers[n] = hosttest.History(n)
		return ledgers[n]
	}
	ctx := context.Background()
	store := memory.New()
	h, err := host.New(host.Options{Storage: store, Model: hosttest.NewModel(), Agent: host.Agent{Model: fakemodel.DefaultModel}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	s := h.Session("r")
	var evs []ledger.Event
	for i := 0; len(evs) < n; i++ {
		if res, err := s.Send(ctx, fmt.Sprintf("turn %d: what was said before?", i), host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("turn %d: %+v %v", i, res, err)
		}
		if i%100 == 99 || n < 1000 {
			if evs, err = store.Load(ctx, "r"); err != nil {
				t.Fatal(err)
			}
		}
	}
	ledgers[n] = evs
	return evs
}
