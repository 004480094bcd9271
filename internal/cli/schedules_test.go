//go:build unix

package cli_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// fires returns the request ids of the session's scheduled messages, in
// ledger order, and whether the session has a run open.
func fires(t *testing.T, store storage.Storage, session string) (ids []string, open bool) {
	t.Helper()
	evs := hosttest.Load(t, store, session)
	for _, ev := range evs {
		if ev.Input != nil && strings.HasPrefix(ev.Input.RequestID, "schedule:") {
			ids = append(ids, ev.Input.RequestID)
		}
	}
	return ids, len(ledger.OpenRuns(evs)) > 0
}

// waitFires waits until the session holds at least n scheduled messages
// and, when streaming, a run is open.
func waitFires(t *testing.T, store storage.Storage, session string, n int, streaming bool, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ids, open := fires(t, store, session)
		if len(ids) >= n && (open || !streaming) {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scheduled messages (a run open: %v) after %v, want %d: %v", len(ids), open, d, n, ids)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeSchedulesSurviveSIGKILL: a schedule made through the API fires
// every 2s into a session whose runs stream for a while; serve is
// SIGKILLed just after an occurrence reached the ledger, as its run
// streams. On files the next process, on Redis the other host (which ran
// beside the first for two occurrences, firing none of them while the
// first led the schedules' lease) goes on firing
// the schedule, kept in the storage. Each occurrence is then in the
// ledger once — a message sent again after the crash carries the same
// request id and is not appended again, and two hosts never both fire —
// in order, and every message is answered.
func TestServeSchedulesSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	for _, topo := range []string{"file", "redis"} {
		t.Run(topo, func(t *testing.T) {
			t.Parallel()
			model := slowModel(t)
			var url string
			var store storage.Storage
			if topo == "file" {
				dir := t.TempDir()
				url, store = "file:"+dir, fileLedger(t, dir)
			} else {
				rds := redistest.Start(t, redistest.Options{})
				url, store = rds.URL(), tenantLedger(t, rds.URL())
			}
			config := writeServeConfig(t, url, model.URL(), "lease_ttl: 2s\n")
			a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
			a.must("POST", "/v1/schedules", `{"id":"tick","session":"ticks","cron":"@every 2s","text":"`+words("t", 60)+`"}`, 201, nil)
			waitFires(t, store, "ticks", 1, false, 20*time.Second)
			var b *serveProc
			if topo == "redis" {
				// A leads the schedules (it fired); B waits for the lease.
				b = startServe(t, "B", bin, config, "--set", "host_id=host-b")
			}
			// Two occurrences while both run (on Redis).
			before := waitFires(t, store, "ticks", 3, true, 20*time.Second)
			a.signal(syscall.SIGKILL)
			a.wait(10 * time.Second)
			if b == nil {
				b = startServe(t, "A2", bin, config, "--set", "host_id=host-a2")
			}
			waitFires(t, store, "ticks", len(before)+2, false, 30*time.Second)
			var list struct {
				Schedules []struct {
					ID   string
					Last *struct {
						Outcome   string
						MessageID string `json:"message_id"`
					}
				}
			}
			b.must("GET", "/v1/schedules", "", 200, &list)
			if len(list.Schedules) != 1 || list.Schedules[0].Last == nil || list.Schedules[0].Last.MessageID == "" {
				t.Errorf("after the crash: %+v", list)
			}
			b.must("DELETE", "/v1/schedules/tick", "", 200, nil)
			evs := hosttest.WaitLedger(t, store, "ticks", 60*time.Second, "every message answered", func(evs []ledger.Event) bool {
				return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0
			})
			ids, _ := fires(t, store, "ticks")
			for i, id := range ids {
				if i > 0 && id <= ids[i-1] {
					t.Errorf("occurrence %s after %s: twice, or out of order: %v", id, ids[i-1], ids)
				}
			}
			if len(ids) < len(before)+2 {
				t.Errorf("%d occurrences, want at least %d: %v", len(ids), len(before)+2, ids)
			}
			for _, ev := range evs {
				if ev.RunEnd != nil && ev.RunEnd.Status != ledger.RunCompleted {
					t.Errorf("a run ended %s: %s", ev.RunEnd.Status, ev.RunEnd.Reason)
				}
			}
		})
	}
}
