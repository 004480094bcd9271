//go:build unix

package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/webhook"
)

// hookReceiver is a webhook endpoint that counts the deliveries of each
// event id whose signature holds.
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]int
	bad []string
}

const hookSecret = "whsec-serve-0123456789"

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{got: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := webhook.Verify([]byte(hookSecret), req.Header.Get(webhook.SignatureHeader), body, 0, time.Now()); err != nil {
			r.bad = append(r.bad, err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.got[req.Header.Get("X-Agentic-Delivery")]++
	}))
	t.Cleanup(r.Close)
	return r
}

// ids returns the ids received, sorted, and how many came more than once.
func (r *hookReceiver) ids() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	dups := 0
	for id, n := range r.got {
		ids = append(ids, id)
		dups += n - 1
	}
	sort.Strings(ids)
	return ids, dups
}

// hookConfig is acme's webhooks to the receiver, its sandbox allowing it.
func hookConfig(url string) string {
	return fmt.Sprintf(`    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
    webhooks:
      secret: %s
      endpoints:
        - url: %s/hook
`, strings.TrimPrefix(url, "http://"), hookSecret, url)
}

// TestServeWebhooksSurviveSIGKILL: serve with webhooks, SIGKILLed while a
// run streams; the run is resumed (on files, by the next process at boot;
// on Redis, by the other host once the lease lapsed), and the endpoint is
// told every event the ledgers hold — each run's end, the killed one's
// included — and nothing else.
func TestServeWebhooksSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	for _, topo := range []string{"file", "redis"} {
		t.Run(topo, func(t *testing.T) {
			t.Parallel()
			model := slowModel(t)
			rcv := newHookReceiver(t)
			var url string
			var store storage.Storage
			if topo == "file" {
				dir := t.TempDir()
				url, store = "file:"+dir, fileLedger(t, dir)
			} else {
				rds := redistest.Start(t, redistest.Options{})
				url, store = rds.URL(), tenantLedger(t, rds.URL())
			}
			config := writeServeConfig(t, url, model.URL(), hookConfig(rcv.URL)+"lease_ttl: 2s\n")
			a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
			var b *serveProc
			if topo == "redis" {
				b = startServe(t, "B", bin, config, "--set", "host_id=host-b")
			}
			a.post("short", "hello")
			long := words("w", 150)
			a.post("long", long)
			onA := a.viewer("long")
			onA.read(20*time.Second, "the long reply streaming", func(sseEvent) bool { return onA.startsWith("You said: w0 w1") })
			a.signal(syscall.SIGKILL)
			a.wait(10 * time.Second)
			if b == nil {
				b = startServe(t, "A2", bin, config, "--set", "host_id=host-a2")
			}
			b.post("after", "and then")
			sessions := []string{"short", "long", "after"}
			var want []string
			deadline := time.Now().Add(60 * time.Second)
			for {
				want = want[:0]
				settled := true
				for _, s := range sessions {
					evs := hosttest.Load(t, store, s)
					settled = settled && len(evs) > 0 && hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0
					for _, ev := range evs {
						want = append(want, webhook.EventIDs(s, ev)...)
					}
				}
				sort.Strings(want)
				if ids, _ := rcv.ids(); settled && slices.Equal(ids, want) {
					break
				}
				if time.Now().After(deadline) {
					ids, _ := rcv.ids()
					t.Fatalf("received %v, want %v (settled %v)", ids, want, settled)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if len(want) != 3 {
				t.Errorf("%d events told, want a run's end per session: %v", len(want), want)
			}
			if _, dups := rcv.ids(); dups > 1 {
				t.Errorf("%d deliveries twice", dups)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.bad) > 0 {
				t.Errorf("refused: %v", rcv.bad)
			}
		})
	}
}
