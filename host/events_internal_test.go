package host

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEventBus: the hook gets the events in order on a goroutine of its
// own; while it is stuck, sends never block — what the queue cannot hold
// is dropped, counted and warned about; a panicking hook is logged and
// gets the next event; close waits for the queue to drain, and sends after
// it are ignored.
func TestEventBus(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	var warnings atomic.Int64
	b := newEventBus(func(e Event) {
		if e.Step == 0 {
			<-release
		}
		if e.Step == 3 {
			panic("a broken hook")
		}
		mu.Lock()
		got = append(got, e.Step)
		mu.Unlock()
	}, 4, func(string, ...any) { warnings.Add(1) })
	b.send(Event{Step: 0}) // taken by the hook, which blocks
	deadline := time.Now().Add(10 * time.Second)
	for len(b.ch) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= 10; i++ {
		b.send(Event{Step: i}) // never blocks: 4 queued, 6 dropped
	}
	if n := b.dropped.Load(); n != 6 {
		t.Errorf("dropped %d, want 6", n)
	}
	if warnings.Load() == 0 {
		t.Error("no warning about the drops")
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.close(ctx)
	b.send(Event{Step: 99}) // after close: ignored, no panic
	mu.Lock()
	defer mu.Unlock()
	if want := []int{0, 1, 2, 4}; !equalInts(got, want) {
		t.Errorf("the hook saw %v, want %v (3 panicked)", got, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
