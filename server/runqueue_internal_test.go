package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunQueueTurns: the places that free go to the tenants in turn,
// first come first served within one; an admission that gives up leaves
// the turn where it was, whether its tenant's line empties before the
// turn or at it.
func TestRunQueueTurns(t *testing.T) {
	q := newRunQueue(10)
	var free atomic.Int32
	take := func() bool {
		if free.Load() > 0 {
			free.Add(-1)
			return true
		}
		return false
	}
	got := make(chan string, 10)
	cancels := map[string]context.CancelFunc{}
	arrive := func(tenant, name string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancels[name] = cancel
		before := q.queued()[tenant]
		go func() {
			if err := q.wait(ctx, tenant, take, time.Minute); err != nil {
				got <- name + ": " + err.Error()
				return
			}
			got <- name
		}()
		deadline := time.Now().Add(10 * time.Second)
		for q.queued()[tenant] != before+1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	next := func(want string) {
		t.Helper()
		select {
		case name := <-got:
			if name != want {
				t.Fatalf("got %q, want %q", name, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing, want %q", want)
		}
	}
	serve := func(want string) {
		t.Helper()
		free.Add(1)
		q.wake()
		next(want)
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})

	arrive("w", "w1")
	arrive("x", "x1")
	arrive("x", "x2")
	arrive("y", "y1")
	serve("w1") // w's line empties: x's turn
	serve("x1") // y's turn
	arrive("w", "w2")
	// x leaves the ring before the turn (y's): y keeps it.
	cancels["x2"]()
	next("x2: context canceled")
	serve("y1")
	serve("w2")
	if q.busy() || len(q.ring) != 0 || q.n != 0 {
		t.Errorf("the queue after: ring %v, %d waiting", q.ring, q.n)
	}

	// A tenant's line that empties at the turn hands it to the next.
	arrive("a", "a1")
	arrive("b", "b1")
	arrive("c", "c1")
	cancels["a1"]()
	next("a1: context canceled")
	serve("b1")
	serve("c1")

	// Full: the admissions past max are refused.
	small := newRunQueue(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go small.wait(ctx, "a", func() bool { return false }, time.Minute)
	for !small.busy() {
		time.Sleep(time.Millisecond)
	}
	if err := small.wait(ctx, "b", take, time.Minute); err != errQueueFull {
		t.Errorf("past max: %v", err)
	}
}
