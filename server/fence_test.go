package server_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/gatestore"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// Race tests for the rule of docs/architecture.md, "Removing data", through
// the server: an operation that removes or replaces data while messages
// are answered 202 must leave each of them in its ledger, or refuse
// because the session changed.

var fencePrefixes atomic.Int64

// gatedPair opens two stores on one backend: a, whose operations stop at
// gates, and b, another server's (on the file store, the same Store).
type gatedPair func(t *testing.T) (a, b storage.Storage, g *gatestore.Gates)

// gatedPairs returns the file, Redis and (unless -short) Cluster backends.
func gatedPairs(t *testing.T) map[string]gatedPair {
	srv := redistest.Start(t, redistest.Options{})
	openPair := func(url string) gatedPair {
		return func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
			prefix := fmt.Sprintf("srvfence%d", fencePrefixes.Add(1))
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
	out := map[string]gatedPair{
		"file": func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
			s, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			g := &gatestore.Gates{}
			return &gatestore.File{Store: s, G: g}, s, g
		},
		"redis": openPair(srv.URL()),
	}
	if !testing.Short() {
		c := redistest.StartCluster(t, 3)
		out["cluster"] = openPair("redis+cluster://" + strings.Join(c.Addrs(), ","))
	}
	return out
}

// postMessages posts n messages to the session at once and returns the
// ids of those answered 202.
func (ts *testServer) postMessages(t *testing.T, key, id string, n int) []string {
	t.Helper()
	var (
		mu       sync.Mutex
		accepted []string
		wg       sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			code, body := ts.do(t, key, "POST", "/v1/sessions/"+id+"/messages", fmt.Sprintf(`{"text":"message %d"}`, i))
			if code != 202 {
				t.Errorf("message %d: %d %s", i, code, body)
				return
			}
			m := decodeJSON[struct {
				MessageID string `json:"message_id"`
			}](t, body)
			mu.Lock()
			accepted = append(accepted, m.MessageID)
			mu.Unlock()
		})
	}
	wg.Wait()
	return accepted
}

// missing counts the accepted messages that are not in the session's
// ledger (of store, as the server's tenant prefix names it) exactly once.
func missing(t *testing.T, store storage.Storage, id string, accepted []string) int {
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

// TestTenantDeleteRaceKeepsAccepted: a tenant's deletion is stopped just
// before it deletes a session it loaded; meanwhile a server that still
// serves the tenant answers 6 messages to it 202. The deletion must keep
// the session (and say so, ErrSessionChanged) with every message in it;
// before the fence, it deleted them.
func TestTenantDeleteRaceKeepsAccepted(t *testing.T) {
	for name, open := range gatedPairs(t) {
		t.Run(name, func(t *testing.T) {
			a, b, g := open(t)
			ts := startServer(t, serverSetup{Store: b})
			if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hello"}`); code != 200 {
				t.Fatalf("first message: %d %s", code, body)
			}
			gate := g.Set(gatestore.Remove, "acme:s")
			done := make(chan error, 1)
			go func() {
				_, err := server.DeleteTenant(t.Context(), a, "", "acme")
				done <- err
			}()
			<-gate.Reached()
			accepted := ts.postMessages(t, ts.acme, "s", 6)
			gate.Open()
			err := <-done
			if !errors.Is(err, storage.ErrSessionChanged) {
				t.Errorf("DeleteTenant while 6 messages were accepted = %v, want storage.ErrSessionChanged", err)
			}
			if n := missing(t, b, "acme:s", accepted); n > 0 {
				t.Errorf("%d of %d messages answered 202 during the tenant's deletion are not in the ledger once", n, len(accepted))
			}
		})
	}
}

// exportOf returns the archive GET /v1/sessions/{id}/export answers.
func (ts *testServer) exportOf(t *testing.T, key, id string) []byte {
	t.Helper()
	code, body := ts.do(t, key, "GET", "/v1/sessions/"+id+"/export", "")
	if code != 200 {
		t.Fatalf("export of %s: %d %.200s", id, code, body)
	}
	return []byte(body)
}

// TestImportReplaceRaceKeepsAccepted: an import with replace=true checked
// the session it replaces and is stopped just before it replaces it;
// meanwhile another server answers 6 messages to the session 202. The
// import must refuse (409, the session changed) with every message in the
// ledger; before the fence, the import deleted them (the server checked,
// the host deleted, then the import deleted again at the store's level).
func TestImportReplaceRaceKeepsAccepted(t *testing.T) {
	for name, open := range gatedPairs(t) {
		t.Run(name, func(t *testing.T) {
			a, b, g := open(t)
			ta := startServer(t, serverSetup{Store: a})
			tb := startServer(t, serverSetup{Store: b})
			if code, body := ta.do(t, ta.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"the first ledger"}`); code != 200 {
				t.Fatalf("first message: %d %s", code, body)
			}
			data := ta.exportOf(t, ta.acme, "s")
			gate := g.Set(gatestore.Remove, "acme:s")
			type answer struct {
				code int
				body string
			}
			done := make(chan answer, 1)
			go func() {
				code, body := ta.doBytes(t, ta.acme, "POST", "/v1/sessions/import?replace=true", data)
				done <- answer{code, body}
			}()
			<-gate.Reached()
			accepted := tb.postMessages(t, tb.acme, "s", 6)
			gate.Open()
			got := <-done
			if got.code != 409 || !strings.Contains(got.body, "changed") {
				t.Errorf("import with replace=true while 6 messages were accepted: %d %s, want 409 (the session changed)", got.code, got.body)
			}
			if n := missing(t, b, "acme:s", accepted); n > 0 {
				t.Errorf("%d of %d messages answered 202 during the import are not in the ledger once", n, len(accepted))
			}
		})
	}
}

// TestImportReplaceSameHost is the second round of
// TestImportReplaceRaceKeepsAccepted, with inputs it lacks: the message
// comes to the server that imports (not another host), while the import
// is stopped between its check and its write; and, on the same backend,
// two imports of one new session reach it at once from two servers. The
// message waits for the import, then lands in the imported ledger (and is
// answered there); of the two imports, one imports and the other answers
// 409, neither losing the other's events.
func TestImportReplaceSameHost(t *testing.T) {
	for name, open := range gatedPairs(t) {
		t.Run(name, func(t *testing.T) {
			a, b, g := open(t)
			ta := startServer(t, serverSetup{Store: a})
			tb := startServer(t, serverSetup{Store: b})
			if code, body := ta.do(t, ta.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"the first ledger"}`); code != 200 {
				t.Fatalf("first message: %d %s", code, body)
			}
			data := ta.exportOf(t, ta.acme, "s")
			imported, _ := ta.store.Load(t.Context(), "acme:s")

			gate := g.Set(gatestore.Remove, "acme:s")
			done := make(chan int, 1)
			go func() {
				code, _ := ta.doBytes(t, ta.acme, "POST", "/v1/sessions/import?replace=true", data)
				done <- code
			}()
			<-gate.Reached()
			// The message carries an image, which it holds before it
			// enters the session: the gate on that hold proves it is on
			// its way while the import is stopped.
			img := pattern(5, 70_000)
			hold := g.Set(gatestore.Hold, storage.BlobDigest(img))
			sent := make(chan []string, 1)
			go func() {
				code, body := ta.do(t, ta.acme, "POST", "/v1/sessions/s/messages",
					`{"text":"see","parts":[{"type":"image","mime":"image/png","data":"`+base64.StdEncoding.EncodeToString(img)+`"}]}`)
				if code != 202 {
					t.Errorf("the message: %d %s", code, body)
					sent <- nil
					return
				}
				sent <- []string{decodeJSON[struct {
					MessageID string `json:"message_id"`
				}](t, body).MessageID}
			}()
			select {
			case <-hold.Reached():
			case m := <-sent:
				gate.Open()
				<-done
				t.Fatalf("the message %v was answered without holding its blob, while the import was stopped", m)
			}
			hold.Open()
			gate.Open()
			if code := <-done; code != 200 {
				t.Errorf("the import: %d, want 200 (the message waited for it)", code)
			}
			accepted := <-sent
			if n := missing(t, b, "acme:s", accepted); n > 0 {
				t.Error("the message sent to the importing server during the import is not in the ledger once")
			}
			ta.waitState(t, ta.acme, "s", "completed")
			events := hosttest.Load(t, b, "acme:s")
			if len(events) <= len(imported) || events[0].ID != imported[0].ID {
				t.Errorf("the ledger after the import and the message: %d events, want the %d imported first", len(events), len(imported))
			}

			// Two imports of one new session, from two servers, the
			// first stopped just before it writes.
			gate = g.Set(gatestore.Remove, "beta:s")
			first := make(chan int, 1)
			go func() {
				code, _ := ta.doBytes(t, ta.beta, "POST", "/v1/sessions/import", data)
				first <- code
			}()
			<-gate.Reached()
			code2, body2 := tb.doBytes(t, tb.beta, "POST", "/v1/sessions/import", data)
			gate.Open()
			code1 := <-first
			if !((code1 == 200 && code2 == 409) || (code1 == 409 && code2 == 200)) {
				t.Errorf("two imports of one new session at once: %d and %d %s, want one 200 and one 409", code1, code2, body2)
			}
			if got := hosttest.Load(t, b, "beta:s"); len(got) != len(imported) {
				t.Errorf("the session two imports raced for holds %d events, want the %d of one import", len(got), len(imported))
			}
		})
	}
}
