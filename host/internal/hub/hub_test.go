package hub

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// drain reads s until it ends, returning the values and the error that
// ended it.
func drain(t *testing.T, s *Sub[int]) ([]int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []int
	for {
		v, off, err := s.Next(ctx)
		if err != nil {
			return got, err
		}
		if off != v {
			t.Fatalf("value %d at offset %d", v, off)
		}
		got = append(got, v)
	}
}

func TestSnapshotThenLive(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int
		want  []int
	}{
		{"from the start", 0, []int{1, 2, 3, 4, 5}},
		{"after an offset", 2, []int{3, 4, 5}},
		{"at the end", 3, []int{4, 5}},
		{"beyond the end", 4, []int{5}},
		{"negative", -7, []int{1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New[int](Options{})
			for i := 1; i <= 3; i++ {
				if off := h.Publish(i); off != i {
					t.Fatalf("Publish(%d) = offset %d", i, off)
				}
			}
			s := h.Subscribe(tc.after)
			h.Publish(4)
			h.Publish(5)
			h.Close()
			got, err := drain(t, s)
			if !errors.Is(err, io.EOF) || !equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v, EOF", got, err, tc.want)
			}
			if h.Publish(6) != 0 || h.Len() != 5 {
				t.Errorf("a closed hub took a value: len %d", h.Len())
			}
		})
	}
}

func TestNextWaitsAndHonoursContext(t *testing.T) {
	h := New[int](Options{})
	s := h.Subscribe(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a done context = %v", err)
	}
	got := make(chan int, 1)
	go func() {
		v, _, err := s.Next(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	h.Publish(1)
	select {
	case v := <-got:
		if v != 1 {
			t.Errorf("got %d", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not wake on Publish")
	}
}

// TestTryNextAndNextOr: TryNext reads what is there without waiting and
// says when nothing is; NextOr stops waiting when its stop channel closes.
func TestTryNextAndNextOr(t *testing.T) {
	h := New[int](Options{})
	s := h.Subscribe(0)
	if _, _, ok := s.TryNext(); ok {
		t.Fatal("TryNext on an empty hub read a value")
	}
	h.Publish(1)
	h.Publish(2)
	for want := 1; want <= 2; want++ {
		v, off, ok := s.TryNext()
		if !ok || v != want || off != want {
			t.Fatalf("TryNext = %d, %d, %v; want %d at offset %d", v, off, ok, want, want)
		}
	}
	if _, _, ok := s.TryNext(); ok {
		t.Fatal("TryNext read past the last value")
	}
	stop := make(chan struct{})
	errStop := errors.New("stopped")
	got := make(chan error, 1)
	go func() {
		_, _, err := s.NextOr(context.Background(), stop, errStop)
		got <- err
	}()
	close(stop)
	select {
	case err := <-got:
		if err != errStop {
			t.Fatalf("NextOr after stop = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NextOr did not stop")
	}
	// A value there is read even when stop is closed.
	h.Publish(3)
	if v, _, err := s.NextOr(context.Background(), stop, errStop); err != nil || v != 3 {
		t.Fatalf("NextOr = %d, %v; want 3", v, err)
	}
	s.Close()
	if _, _, ok := s.TryNext(); ok {
		t.Fatal("TryNext read after Close")
	}
}

// TestSlowSubscriberIsDropped: the publisher never waits; a subscriber more
// than MaxLag live values behind is dropped, and catches up by subscribing
// again after the last offset it read. The snapshot it subscribed to never
// counts as lag.
func TestSlowSubscriberIsDropped(t *testing.T) {
	h := New[int](Options{MaxLag: 4})
	for i := 1; i <= 10; i++ {
		h.Publish(i)
	}
	late := h.Subscribe(0) // ten values of snapshot: not a lag
	slow := h.Subscribe(10)
	for i := 11; i <= 14; i++ {
		h.Publish(i)
	}
	// Both are 4 live values behind: still subscribed.
	v, _, err := late.Next(context.Background())
	if err != nil || v != 1 {
		t.Fatalf("late: %d %v", v, err)
	}
	h.Publish(15) // 5 behind: dropped
	if _, _, err := slow.Next(context.Background()); !errors.Is(err, ErrDropped) {
		t.Fatalf("slow subscriber: %v, want ErrDropped", err)
	}
	if _, _, err := late.Next(context.Background()); !errors.Is(err, ErrDropped) {
		t.Fatalf("late subscriber: %v, want ErrDropped", err)
	}
	again := h.Subscribe(slow.Offset())
	h.Close()
	got, err := drain(t, again)
	if !errors.Is(err, io.EOF) || !equal(got, []int{11, 12, 13, 14, 15}) {
		t.Fatalf("after resubscribing: %v %v", got, err)
	}
}

func TestUnsubscribe(t *testing.T) {
	h := New[int](Options{})
	s := h.Subscribe(0)
	s.Close()
	s.Close()
	h.Publish(1)
	if _, _, err := s.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after Close = %v", err)
	}
}

// TestHammer: publishers and subscribers at once, subscribers joining at
// every offset and some reading slowly. Every subscriber either reads every
// value after its offset, in order, exactly once, up to the end, or is
// dropped and then reads the rest after subscribing again; the publishers
// are never held up.
func TestHammer(t *testing.T) {
	const publishers, perPublisher, subscribers = 4, 2000, 16
	h := New[int](Options{MaxLag: 64})
	var pubs sync.WaitGroup
	var mu sync.Mutex
	next := 0 // the value each Publish carries: its expected offset
	for range publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for range perPublisher {
				mu.Lock()
				next++
				v := next
				off := h.Publish(v)
				mu.Unlock()
				if off != v {
					t.Errorf("published %d at offset %d", v, off)
					return
				}
			}
		}()
	}
	var subs sync.WaitGroup
	drops := make(chan int, subscribers*100)
	for i := range subscribers {
		subs.Add(1)
		go func() {
			defer subs.Done()
			after := h.Len() * i / subscribers
			want := after + 1
			s := h.Subscribe(after)
			for {
				v, off, err := s.Next(context.Background())
				if errors.Is(err, io.EOF) {
					break
				}
				if errors.Is(err, ErrDropped) {
					drops <- i
					s = h.Subscribe(s.Offset())
					continue
				}
				if err != nil || v != want || off != want {
					t.Errorf("subscriber %d: got %d at %d (%v), want %d", i, v, off, err, want)
					return
				}
				want++
				if i%4 == 0 && want%100 == 0 {
					time.Sleep(time.Millisecond) // a slow reader
				}
			}
			if want != publishers*perPublisher+1 {
				t.Errorf("subscriber %d stopped at %d", i, want-1)
			}
		}()
	}
	pubs.Wait()
	h.Close()
	subs.Wait()
	close(drops)
	n := 0
	for range drops {
		n++
	}
	t.Logf("%d drops (and resubscriptions)", n)
}

func equal(a, b []int) bool {
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
