package plugins

import (
	"context"
	"testing"
	"time"
)

// TestSlotsShareFairly: a tenant takes at most half of the slots, even
// when the rest are free; another tenant then finds one at once; a freed
// slot goes to the waiting tenant with the fewest calls running, whoever
// asked first; a waiter that gives up leaves the queue.
func TestSlotsShareFairly(t *testing.T) {
	s := newSlots(4)
	ctx := context.Background()
	for range 2 {
		if err := s.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.acquire(short, "a"); err == nil {
		t.Fatal("a took a third slot of four")
	}
	if len(s.waiters) != 0 {
		t.Fatalf("a waiter that gave up is still queued: %d", len(s.waiters))
	}
	if err := s.acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// Full: a waits (first), c waits (second); a b slot frees: c has none
	// running, a has two: c gets it.
	granted := make(chan string, 2)
	go func() { s.acquire(ctx, "a"); granted <- "a" }()
	for {
		s.mu.Lock()
		n := len(s.waiters)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	go func() { s.acquire(ctx, "c"); granted <- "c" }()
	for {
		s.mu.Lock()
		n := len(s.waiters)
		s.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.release("b")
	if got := <-granted; got != "c" {
		t.Fatalf("the freed slot went to %s, want c (none running)", got)
	}
	// a holds its half: a freed b slot stays free for others; one of a's
	// own freed lets its waiter in.
	s.release("b")
	s.mu.Lock()
	waiting, free := len(s.waiters), s.free
	s.mu.Unlock()
	if waiting != 1 || free != 1 {
		t.Fatalf("after b's slot freed: %d waiting, %d free; want a waiting past its half, the slot free", waiting, free)
	}
	s.release("a")
	if got := <-granted; got != "a" {
		t.Fatalf("the next went to %s, want a", got)
	}
}
