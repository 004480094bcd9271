package host_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/gatestore"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// Race tests for the rule of docs/architecture.md, "Removing data": an
// operation that removes or replaces data, run while messages are sent,
// never loses a message accepted (Start returned): each is in the ledger
// afterwards, once, or the operation refused because the session changed.

var fencePrefixes atomic.Int64

// fenceBackend opens two stores on one backend: a, whose operations the
// test stops at gates, and b, a second writer (another host's handle; on
// the file store, the same Store, written by a second host in the
// process).
type fenceBackend func(t *testing.T) (a, b storage.Storage, g *gatestore.Gates)

// fenceBackends returns the file, Redis and (unless -short) Redis Cluster
// backends.
func fenceBackends(t *testing.T) map[string]fenceBackend {
	srv := redistest.Start(t, redistest.Options{})
	openRedis := func(url string) fenceBackend {
		return func(t *testing.T) (storage.Storage, storage.Storage, *gatestore.Gates) {
			prefix := fmt.Sprintf("fence%d", fencePrefixes.Add(1))
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
	out := map[string]fenceBackend{
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

// sendWhileHeld sends n messages to session id through h at once, and returns
// the ids of those accepted.
func sendWhileHeld(t *testing.T, h *host.Host, id string, n int, parts ...ledger.Part) []string {
	t.Helper()
	var (
		mu       sync.Mutex
		accepted []string
		wg       sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			r, err := h.Session(id).Start(t.Context(), fmt.Sprintf("message %d", i), host.StartOptions{Parts: parts})
			if err != nil {
				t.Errorf("message %d: %v", i, err)
				return
			}
			mu.Lock()
			accepted = append(accepted, r.MessageID())
			mu.Unlock()
		})
	}
	wg.Wait()
	return accepted
}

// checkAccepted checks that each accepted message is in the session's
// ledger exactly once.
func checkAccepted(t *testing.T, store storage.Storage, id string, accepted []string, why string) {
	t.Helper()
	count := map[string]int{}
	for _, e := range hosttest.Load(t, store, id) {
		if e.Input != nil {
			count[e.Input.MessageID]++
		}
	}
	lost := 0
	for _, m := range accepted {
		if count[m] != 1 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%s: %d of %d accepted messages are not in the ledger once", why, lost, len(accepted))
	}
}

// TestDeleteRaceKeepsAccepted: a deletion that checked a session (no run,
// nothing pending) is stopped before it deletes; meanwhile another host
// accepts 8 messages to the session. The deletion must refuse
// (ErrSessionChanged), every message being in the ledger; before the
// fence, it deleted them all.
func TestDeleteRaceKeepsAccepted(t *testing.T) {
	for name, open := range fenceBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			a, b, g := open(t)
			ha := hosttest.New(t, host.Options{Storage: a})
			hb := hosttest.New(t, host.Options{Storage: b})
			if _, err := ha.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
				t.Fatal(err)
			}
			gate := g.Set(gatestore.Remove, "s")
			done := make(chan error, 1)
			go func() {
				_, err := ha.Host.Session("s").Delete(ctx, host.DeleteOptions{})
				done <- err
			}()
			<-gate.Reached()
			accepted := sendWhileHeld(t, hb.Host, "s", 8)
			gate.Open()
			err := <-done
			if !errors.Is(err, host.ErrSessionChanged) {
				t.Errorf("Delete while 8 messages were accepted = %v, want ErrSessionChanged", err)
			}
			checkAccepted(t, b, "s", accepted, "after a deletion raced by messages")
		})
	}
}

// TestBlobSweepRaceKeepsAccepted: a message whose part is the bytes of a
// blob another session refers to puts its blob, and is stopped before it
// appends; meanwhile that other session is deleted, and the blobs only it
// referred to with it. The message's blob must survive (the message holds
// it: storage.BlobFence); before the fence, the deletion's sweep deleted
// it (it was stored before the sweep began, and no ledger referred to it
// yet), and the accepted message named a blob that was gone.
func TestBlobSweepRaceKeepsAccepted(t *testing.T) {
	for name, open := range fenceBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			a, _, g := open(t)
			hs := hosttest.New(t, host.Options{Storage: a, BlobThreshold: 1000})
			img := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: noise(7, 5000)}
			if _, err := hs.Host.Session("a").Send(ctx, "see", host.SendOptions{Parts: []ledger.Part{img}}); err != nil {
				t.Fatal(err)
			}
			refs := ledger.BlobRefs(hs.Events("a"))
			if len(refs) != 1 {
				t.Fatalf("session a refers to %d blobs, want 1", len(refs))
			}
			// The message's blob is put (held), then it stops before its
			// session is loaded and appended to.
			gate := g.Set(gatestore.Load, "b")
			sent := make(chan []string, 1)
			go func() { sent <- sendWhileHeld(t, hs.Host, "b", 1, img) }()
			<-gate.Reached()
			rep, err := hs.Host.Session("a").Delete(ctx, host.DeleteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gate.Open()
			accepted := <-sent
			checkAccepted(t, a, "b", accepted, "a message sent while its blob's other session was deleted")
			if _, ok, err := a.(storage.Blobs).GetBlob(ctx, refs[0]); err != nil || !ok {
				t.Errorf("the blob of an accepted message was deleted by a concurrent deletion (report %+v): found %v, %v", rep, ok, err)
			}
			events, err := hs.Host.Session("b").ResolvedEvents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ledger.BlobRefs(events)) != 0 {
				t.Error("the message's part does not resolve: its blob is gone")
			}
		})
	}
}

// TestBlobSweepRaceNamedBlob is the second round of
// TestBlobSweepRaceKeepsAccepted, with an input it lacks: the message
// names the blob by its digest (a part with Blob set, as a client that
// uploaded it once does) rather than carrying its bytes, and a second
// deletion comes after the first. The blob must survive both while the
// message is on its way, and the message must resolve.
func TestBlobSweepRaceNamedBlob(t *testing.T) {
	for name, open := range fenceBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			a, _, g := open(t)
			hs := hosttest.New(t, host.Options{Storage: a, BlobThreshold: 1000})
			img := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: noise(9, 5000)}
			for _, id := range []string{"a1", "a2"} {
				if _, err := hs.Host.Session(id).Send(ctx, "see", host.SendOptions{Parts: []ledger.Part{img}}); err != nil {
					t.Fatal(err)
				}
			}
			digest := ledger.BlobRefs(hs.Events("a1"))[0]
			named := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Blob: digest}
			gate := g.Set(gatestore.Load, "b")
			sent := make(chan []string, 1)
			go func() { sent <- sendWhileHeld(t, hs.Host, "b", 1, named) }()
			<-gate.Reached()
			for _, id := range []string{"a1", "a2"} {
				if _, err := hs.Host.Session(id).Delete(ctx, host.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := host.SweepBlobs(ctx, a, host.BlobSweepOptions{Grace: -1}); err != nil {
				t.Fatal(err)
			}
			gate.Open()
			checkAccepted(t, a, "b", <-sent, "a message naming a blob whose sessions were deleted")
			if _, ok, _ := a.(storage.Blobs).GetBlob(ctx, digest); !ok {
				t.Error("the blob a message names was deleted while the message was on its way")
			}
			events, err := hs.Host.Session("b").ResolvedEvents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ledger.BlobRefs(events)) != 0 {
				t.Error("the message's part does not resolve")
			}
			// Once the message is in, a sweep keeps the blob (referred
			// to) and the sessions' deletion left no mark behind.
			if rep, err := host.SweepBlobs(ctx, a, host.BlobSweepOptions{Grace: -1}); err != nil || rep.Deleted != 0 || rep.Referenced != 1 {
				t.Errorf("a sweep after the message: %+v, %v; want the blob kept, referred to", rep, err)
			}
		})
	}
}
