package host_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// exclusiveStore is a memory store that counts the appends in flight per
// session, and holds each a moment, so that two at once cannot pass
// unseen: a store that cannot take concurrent appends to one session.
type exclusiveStore struct {
	*memory.Store
	mu       sync.Mutex
	inFlight map[string]int
	overlaps atomic.Int64
	appends  atomic.Int64
	// barrier, when set, holds each append in flight until as many are.
	barrier *sync.WaitGroup
}

func (s *exclusiveStore) Append(ctx context.Context, id string, events ...ledger.Event) error {
	s.mu.Lock()
	s.inFlight[id]++
	if s.inFlight[id] > 1 {
		s.overlaps.Add(1)
	}
	s.mu.Unlock()
	if s.barrier != nil {
		s.barrier.Done()
		s.barrier.Wait()
	}
	time.Sleep(200 * time.Microsecond)
	err := s.Store.Append(ctx, id, events...)
	s.mu.Lock()
	s.inFlight[id]--
	s.mu.Unlock()
	s.appends.Add(1)
	return err
}

// TestAppendsSerialisedPerSession: one host never has two appends to one
// session in flight at once — whatever its callers do at the same time:
// messages sent from many goroutines to two sessions (folded into the run
// in flight, or starting the next) and cancellations — so a custom store need not serialise a session's appends itself
// (across processes, see storage.Leaser).
func TestAppendsSerialisedPerSession(t *testing.T) {
	store := &exclusiveStore{Store: memory.New(), inFlight: map[string]int{}}
	m := hosttest.NewModel()
	hs := hosttest.New(t, host.Options{Storage: store, Model: m, Agent: host.Agent{Model: hosttest.DefaultModel}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				sess := hs.Host.Session(fmt.Sprintf("s%d", i%2))
				if _, err := sess.Send(ctx, fmt.Sprintf("message %d of %d, with a few words to stream", i, g), host.SendOptions{}); err != nil {
					t.Errorf("send: %v", err)
				}
				if i%4 == 3 {
					hs.Host.Cancel(sess.ID(), "a test cancels")
				}
			}
		})
	}
	wg.Wait()
	if n := store.overlaps.Load(); n != 0 {
		t.Fatalf("%d appends to one session overlapped another (of %d)", n, store.appends.Load())
	}
	if store.appends.Load() < 80 {
		t.Fatalf("only %d appends for 80 messages", store.appends.Load())
	}
	// The count sees overlaps: two appends in flight at once are seen.
	var probe sync.WaitGroup
	probed := &exclusiveStore{Store: memory.New(), inFlight: map[string]int{}, barrier: &sync.WaitGroup{}}
	probed.barrier.Add(2)
	for i := range 2 {
		probe.Go(func() {
			probed.Append(ctx, "probe", ledger.Event{ID: fmt.Sprintf("evt_probe%d", i), Kind: ledger.KindInput, Time: time.Now().UTC(),
				Input: &ledger.Input{MessageID: fmt.Sprintf("msg_probe%d", i), Parts: []ledger.Part{ledger.TextPart("probe")}}})
		})
	}
	probe.Wait()
	if probed.overlaps.Load() == 0 {
		t.Fatal("two appends made at once were not seen to overlap")
	}
}
