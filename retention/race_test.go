package retention_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/gatestore"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// pairs returns, per backend, a function that opens two stores on one
// backend: a, whose operations stop at gates, and b, another host's (on
// the file store, the same Store, used by a second host of the process).
func pairs(t *testing.T) map[string]func(t *testing.T) (a, b storage.Storage, g *gatestore.Gates) {
	srv := redistest.Start(t, redistest.Options{})
	openRedis := func(url string) func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
		return func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
			prefix := fmt.Sprintf("retrace%d", prefixes.Add(1))
			open := func() *redis.Store {
				s, err := redis.Open(t.Context(), url, redis.Options{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			g := &gatestore.Gates{}
			return &gatestore.Redis{Store: open(), G: g}, open(), g
		}
	}
	out := map[string]func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates){
		"file": func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
			s, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			g := &gatestore.Gates{}
			return &gatestore.File{Store: s, G: g}, s, g
		},
		"redis": openRedis(srv.URL()),
	}
	if !testing.Short() {
		c := redistest.StartCluster(t, 3)
		out["cluster"] = openRedis("redis+cluster://" + strings.Join(c.Addrs(), ","))
	}
	return out
}

// sendAll sends n messages to session id through h at once, each waiting
// for its run, and returns the ids of those accepted.
func sendAll(t *testing.T, h *host.Host, id string, n int, wait bool) []string {
	t.Helper()
	var (
		mu       sync.Mutex
		accepted []string
		wg       sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			text := fmt.Sprintf("message %d", i)
			var msg string
			var err error
			if wait {
				var res host.RunResult
				res, err = h.Session(id).Send(t.Context(), text, host.SendOptions{})
				msg = res.MessageID
			} else {
				var r *host.Run
				r, err = h.Session(id).Start(t.Context(), text, host.StartOptions{})
				if r != nil {
					msg = r.MessageID()
				}
			}
			if err != nil {
				t.Errorf("message %d: %v", i, err)
				return
			}
			mu.Lock()
			accepted = append(accepted, msg)
			mu.Unlock()
		})
	}
	wg.Wait()
	return accepted
}

// notInLedger counts the accepted messages that are not in the session's
// ledger exactly once.
func notInLedger(t *testing.T, store storage.Storage, id string, accepted []string) int {
	t.Helper()
	count := map[string]int{}
	for _, e := range hosttest.Load(t, store, id) {
		if e.Input != nil {
			count[e.Input.MessageID]++
		}
	}
	n := 0
	for _, m := range accepted {
		if count[m] != 1 {
			n++
		}
	}
	return n
}

// TestSweepRaceKeepsAccepted: messages sent to a session a sweep has
// decided to remove (it is past keep_days), with either action, must keep
// it — the sweep skips it, "it changed while it was swept" — and be in its
// ledger afterwards:
//
//   - "decided": 6 messages are answered after the sweep read the ledgers
//     and decided, before it acts (a clock that waits); before the fence
//     the sweep archived and deleted the session anyway, so that the
//     messages were only in the archive (or, deleting, nowhere);
//   - "acting": 6 messages are accepted by another host while the sweep
//     holds the session, stopped just before its deletion; before the
//     fence the deletion removed them (they were in no archive either).
func TestSweepRaceKeepsAccepted(t *testing.T) {
	for name, open := range pairs(t) {
		for _, action := range []retention.Action{retention.ActionArchive, retention.ActionDelete} {
			for _, when := range []string{"decided", "acting"} {
				t.Run(name+"/"+string(action)+"/"+when, func(t *testing.T) {
					ctx := t.Context()
					a, b, g := open(t)
					ha := hosttest.New(t, host.Options{Storage: a})
					hb := hosttest.New(t, host.Options{Storage: b})
					if _, err := ha.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
						t.Fatal(err)
					}
					dir := t.TempDir()
					var accepted []string
					now := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
					switch when {
					case "decided":
						inner := now
						now = func() time.Time {
							accepted = sendAll(t, ha.Host, "s", 6, true)
							return inner()
						}
					case "acting":
						gate := g.Set(gatestore.Remove, "s")
						go func() {
							<-gate.Reached()
							accepted = sendAll(t, hb.Host, "s", 6, false)
							gate.Open()
						}()
					}
					rep, err := retention.Sweep(ctx, retention.Options{Host: ha.Host, Storage: a, Now: now,
						Policy: retention.Policy{KeepDays: 30, Action: action, ArchiveDir: dir}})
					if err != nil {
						t.Fatal(err)
					}
					if len(accepted) != 6 {
						t.Fatalf("%d messages accepted, want 6", len(accepted))
					}
					if len(rep.Skipped) != 1 || rep.Skipped[0].Reason != "it changed while it was swept" || len(rep.Archived)+len(rep.Deleted) != 0 {
						t.Errorf("report %+v, want s skipped: it changed while it was swept", rep)
					}
					if n := notInLedger(t, b, "s", accepted); n > 0 {
						t.Errorf("%d of 6 messages accepted during the sweep are not in the ledger once", n)
					}
					if left, _ := os.ReadDir(dir); len(left) > 0 {
						names := []string{}
						for _, e := range left {
							names = append(names, e.Name())
						}
						t.Errorf("the archive directory holds %q after the sweep skipped the session", names)
					}
				})
			}
		}
	}
}
