package host

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAppendCtx: the context of an append answers as the
// context.WithDeadline it stands for, whether or not that one was made:
// before and after its deadline, once stopped, and for a context derived
// from it.
func TestAppendCtx(t *testing.T) {
	t.Run("lazy", func(t *testing.T) {
		c, stop := newAppendCtx(time.Hour)
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v", err)
		}
		if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
			t.Fatalf("Deadline = %v, %v", d, ok)
		}
		stop()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err once stopped = %v", err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done of a stopped context is open")
		}
		if c.real.Load() == nil {
			t.Fatal("Done made no context")
		}
	})
	t.Run("expired", func(t *testing.T) {
		c, stop := newAppendCtx(time.Millisecond)
		defer stop()
		time.Sleep(2 * time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err past the deadline = %v", err)
		}
		if c.real.Load() != nil {
			t.Fatal("Err made a context")
		}
		<-c.Done()
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err once made = %v", err)
		}
	})
	t.Run("derived", func(t *testing.T) {
		c, stop := newAppendCtx(20 * time.Millisecond)
		defer stop()
		child, cancel := context.WithCancel(c)
		defer cancel()
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a derived context outlived the deadline")
		}
		if !errors.Is(child.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Fatalf("derived Err = %v, Cause = %v", child.Err(), context.Cause(c))
		}
	})
	t.Run("stopped-derived", func(t *testing.T) {
		c, stop := newAppendCtx(time.Hour)
		child, cancel := context.WithCancel(c)
		defer cancel()
		fired := make(chan struct{})
		context.AfterFunc(c, func() { close(fired) })
		stop()
		<-child.Done()
		<-fired
		if !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("derived Err = %v", child.Err())
		}
	})
}
