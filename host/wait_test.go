package host_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
)

// TestPostEventBounded: the events kept for calls that do not wait for
// them yet are bounded: the one past MaxKeptEvents is refused, nothing
// kept; a key posted again still replaces its event; a deleted session
// frees the places of its events.
func TestPostEventBounded(t *testing.T) {
	h := hosttest.New(t, host.Options{}).Host
	ctx := context.Background()
	s := h.Session("flood")
	if _, err := s.Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range host.MaxKeptEvents {
		if _, err := s.PostEvent(ctx, fmt.Sprint("k", i), []byte("x")); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if _, err := s.PostEvent(ctx, "one-more", []byte("x")); !errors.Is(err, host.ErrTooManyEvents) {
		t.Fatalf("event %d: %v, want ErrTooManyEvents", host.MaxKeptEvents+1, err)
	}
	if _, err := s.PostEvent(ctx, "k7", []byte("again")); err != nil {
		t.Fatalf("a key posted again past the bound: %v, want it replaced", err)
	}
	if _, err := s.Delete(ctx, host.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Session("other").PostEvent(ctx, "k", []byte("x")); err != nil {
		t.Fatalf("after the session's deletion: %v, want room again", err)
	}
}
