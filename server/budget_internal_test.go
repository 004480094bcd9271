package server

import (
	"testing"

	"github.com/agentichost/agentic/storage/memory"
)

// TestBudgetReservesTheDearestCall: a call reserves all that is left
// before any call was seen, and the dearest call seen after — by another
// host too, which reads it from the storage.
func TestBudgetReservesTheDearestCall(t *testing.T) {
	ctx := t.Context()
	store := memory.New()
	a := newBudget(store, store, "acme", 10, "host-a")
	first, over, err := a.reserve(ctx)
	if err != nil || over != nil || first.amount != 10_000_000 {
		t.Fatalf("the first call reserves %d (%v %v), want all that is left, 10_000_000", first.amount, over, err)
	}
	a.settle(ctx, first, 0.5)
	b := newBudget(store, store, "acme", 10, "host-b")
	next, over, err := b.reserve(ctx)
	if err != nil || over != nil || next.amount != 500_000 {
		t.Fatalf("another host's first call reserves %d (%v %v), want the dearest call seen, 500_000", next.amount, over, err)
	}
	b.settle(ctx, next, 0.8)
	if got := a.dearest(ctx); got != 800_000 {
		t.Errorf("host a's estimate %d, want the dearest call host b saw, 800_000", got)
	}
	if stored, _, _ := store.AddWithin(ctx, a.estimateNamespace(), estimateKey, 0, 0); stored != 800_000 {
		t.Errorf("the stored dearest call %d, want 800_000", stored)
	}
	if spent, err := a.spent(ctx); err != nil || spent != 1.3 {
		t.Errorf("spent %v %v, want 1.3", spent, err)
	}
}
