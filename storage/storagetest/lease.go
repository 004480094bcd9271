package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Lease timings. shortTTL is short enough to wait out in a test and long
// enough that a loaded machine acquires, appends and checks well within it;
// longTTL never expires during a test.
const (
	shortTTL = 400 * time.Millisecond
	longTTL  = time.Minute
	// patience bounds every wait for something a store should do soon.
	patience = 10 * time.Second
)

// runLeaser runs the lease checks with owner A on store a and owner B on
// store b: the same store, or two handles on one backend.
func runLeaser(t *testing.T, a, b storage.Storage) {
	la, okA := a.(storage.Leaser)
	lb, okB := b.(storage.Leaser)
	switch {
	case !okA && !okB:
		t.Skip("the store does not implement storage.Leaser")
	case okA != okB:
		t.Fatal("only one of the two handles implements storage.Leaser")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b storage.Storage, la, lb storage.Leaser)
	}{
		{"Exclusive", testLeaseExclusive},
		{"Renew", testLeaseRenew},
		{"Expiry", testLeaseExpiry},
		{"Release", testLeaseRelease},
		{"FencedAppend", testLeaseFencedAppend},
		{"Invalid", testLeaseInvalid},
		{"Holder", testLeaseHolder},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, a, b, la, lb) })
	}
}

// acquire takes a lease and fails the test when it cannot.
func acquire(t *testing.T, l storage.Leaser, id, owner string, ttl time.Duration) storage.Lease {
	t.Helper()
	lease, err := l.AcquireLease(t.Context(), id, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q, %v): %v", id, owner, ttl, err)
	}
	if lease == nil {
		t.Fatalf("AcquireLease(%q, %q, %v) returned a nil Lease and no error", id, owner, ttl)
	}
	return lease
}

// wantHeld checks that owner cannot acquire the lease of session id.
func wantHeld(t *testing.T, l storage.Leaser, id, owner, why string) {
	t.Helper()
	lease, err := l.AcquireLease(t.Context(), id, owner, longTTL)
	if !errors.Is(err, storage.ErrLeaseHeld) {
		t.Errorf("AcquireLease(%q) by %s %s = %v, %v; want an error matching storage.ErrLeaseHeld", id, owner, why, lease, err)
		if err == nil && lease != nil {
			_ = lease.Release(t.Context())
		}
	}
}

// acquireEventually retries until owner acquires the lease of session id,
// and fails the test after patience. It returns the lease and when it was
// acquired.
func acquireEventually(t *testing.T, l storage.Leaser, id, owner string, ttl time.Duration) (storage.Lease, time.Time) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		lease, err := l.AcquireLease(t.Context(), id, owner, ttl)
		if err == nil {
			return lease, time.Now()
		}
		if !errors.Is(err, storage.ErrLeaseHeld) {
			t.Fatalf("AcquireLease(%q) by %s while another lease runs out: %v, want nil or storage.ErrLeaseHeld", id, owner, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("AcquireLease(%q) by %s: still held %v after the other owner's lease (ttl %v) should have expired", id, owner, patience, shortTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaseAppendOK appends through a lease and reports an error.
func leaseAppendOK(t *testing.T, l storage.Lease, ctx context.Context, what string, events ...ledger.Event) bool {
	t.Helper()
	if err := l.Append(ctx, events...); err != nil {
		t.Errorf("Lease.Append by %s (%d events): %v", what, len(events), err)
		return false
	}
	return true
}

// wantLost checks that a fenced append fails with ErrLeaseLost.
func wantLost(t *testing.T, l storage.Lease, why string, events ...ledger.Event) {
	t.Helper()
	if err := l.Append(t.Context(), events...); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("Lease.Append %s = %v, want an error matching storage.ErrLeaseLost", why, err)
	}
}

func testLeaseExclusive(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	const id = "lease-excl"
	leaseA := acquire(t, la, id, "owner-a", longTTL)
	wantHeld(t, lb, id, "owner-b", "while owner-a holds it")
	// Re-entrant for its owner: a retried acquisition must not lock the
	// owner out of its own lease.
	again, err := la.AcquireLease(ctx, id, "owner-a", longTTL)
	if err != nil {
		t.Errorf("AcquireLease by the owner that holds the lease: %v, want it again", err)
	} else if again == nil {
		t.Errorf("AcquireLease by the owner that holds the lease returned a nil Lease")
	}
	wantHeld(t, lb, id, "owner-b", "after owner-a acquired it again")

	want := seqEvents(id, 0, 3)
	leaseAppendOK(t, leaseA, ctx, "owner-a", want[0])
	leaseAppendOK(t, leaseA, ctx, "owner-a", want[1:]...)
	got, err := b.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events appended through a lease", got, want)

	// Leases of other sessions are independent.
	other := acquire(t, lb, "lease-excl-other", "owner-b", longTTL)
	leaseAppendOK(t, other, ctx, "owner-b on another session", seqEvent("lease-excl-other", 0))
	_ = other.Release(ctx)
	_ = leaseA.Release(ctx)
}

func testLeaseRenew(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	const id = "lease-renew"
	leaseA := acquire(t, la, id, "owner-a", shortTTL)
	// Renew well within the ttl for three ttls: the lease must hold.
	end := time.Now().Add(3 * shortTTL)
	for i := 0; time.Now().Before(end); i++ {
		if err := leaseA.Renew(ctx); err != nil {
			t.Fatalf("Renew %d of a lease renewed every ttl/4: %v", i, err)
		}
		wantHeld(t, lb, id, "owner-b", "while owner-a renews it")
		time.Sleep(shortTTL / 4)
	}
	leaseAppendOK(t, leaseA, ctx, "owner-a after renewals", seqEvent(id, 0))

	// Stop renewing: owner B gets it, and A learns it lost it.
	leaseB, _ := acquireEventually(t, lb, id, "owner-b", longTTL)
	if err := leaseA.Renew(ctx); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("Renew after the lease expired and owner-b took it = %v, want an error matching storage.ErrLeaseLost", err)
	}
	wantHeld(t, la, id, "owner-a", "after its renewal failed (Renew must not take the lease back)")
	_ = leaseB.Release(ctx)
}

func testLeaseExpiry(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	const id = "lease-expiry"
	start := time.Now()
	leaseA := acquire(t, la, id, "owner-a", shortTTL)
	before := seqEvents(id, 0, 2)
	leaseAppendOK(t, leaseA, ctx, "owner-a before expiry", before...)

	leaseB, at := acquireEventually(t, lb, id, "owner-b", longTTL)
	if early := at.Sub(start); early < shortTTL {
		t.Errorf("owner-b acquired the lease %v after owner-a took it for %v: it expired early", early, shortTTL)
	}
	// A did not renew: its fenced appends must fail and append nothing,
	// a batch as a single event.
	wantLost(t, leaseA, "by owner-a after its lease expired and owner-b took it", seqEvent(id, 100))
	wantLost(t, leaseA, "of a batch by owner-a after its lease expired", seqEvents(id, 101, 3)...)
	after := seqEvents(id, 200, 2)
	leaseAppendOK(t, leaseB, ctx, "owner-b", after...)
	if err := leaseA.Renew(ctx); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("Renew by owner-a after owner-b took the lease = %v, want an error matching storage.ErrLeaseLost", err)
	}
	got, err := a.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events after an expired owner's fenced appends (they must append nothing)", got, append(before, after...))
	_ = leaseB.Release(ctx)

	// A lease that expires with nobody else taking it is lost all the
	// same: the store, not the holder, decides.
	const id2 = "lease-expiry-alone"
	leaseA2 := acquire(t, la, id2, "owner-a", shortTTL)
	time.Sleep(shortTTL + shortTTL/2)
	wantLost(t, leaseA2, "by owner-a after its lease expired (nobody took it)", seqEvent(id2, 0))
	if got, err := a.Load(ctx, id2); err != nil || len(got) != 0 {
		t.Errorf("Load after an expired lease's append = %d events, %v; want 0 events, no error", len(got), err)
	}
}

func testLeaseRelease(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	const id = "lease-release"
	leaseA := acquire(t, la, id, "owner-a", longTTL)
	leaseAppendOK(t, leaseA, ctx, "owner-a", seqEvent(id, 0))
	if err := leaseA.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// No waiting: a released lease is free at once.
	leaseB := acquire(t, lb, id, "owner-b", longTTL)
	if err := leaseA.Release(ctx); err != nil {
		t.Errorf("Release of a lease already released (and taken by another owner) = %v, want nil", err)
	}
	wantHeld(t, la, id, "owner-a", "after owner-a's second Release (it must not free owner-b's lease)")
	wantLost(t, leaseA, "by owner-a after it released the lease", seqEvent(id, 1))
	if err := leaseA.Renew(ctx); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("Renew of a released lease = %v, want an error matching storage.ErrLeaseLost", err)
	}
	leaseAppendOK(t, leaseB, ctx, "owner-b", seqEvent(id, 2))
	got, err := b.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events after a release", got, []ledger.Event{seqEvent(id, 0), seqEvent(id, 2)})
	if err := leaseB.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func testLeaseFencedAppend(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	const id = "lease-fenced"
	lease := acquire(t, la, id, "owner-a", longTTL)
	defer lease.Release(ctx)
	want := EveryKind("run-fenced")
	leaseAppendOK(t, lease, ctx, "owner-a", want...)

	// Atomic: a batch with an event the codec refuses appends nothing.
	invalid := seqEvent(id, 99)
	invalid.ID = ""
	if err := lease.Append(ctx, seqEvent(id, 1), invalid); err == nil {
		t.Errorf("Lease.Append of a batch with an invalid event: no error")
	}
	// A done ctx: ctx.Err(), no effect.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := lease.Append(canceled, seqEvent(id, 2)); !errors.Is(err, context.Canceled) {
		t.Errorf("Lease.Append with a canceled ctx = %v, want context.Canceled", err)
	}
	if err := lease.Renew(canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("Lease.Renew with a canceled ctx = %v, want context.Canceled", err)
	}
	if _, err := la.AcquireLease(canceled, "lease-fenced-new", "owner-a", longTTL); !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireLease with a canceled ctx = %v, want context.Canceled", err)
	}
	// An append of no events has no effect.
	_ = lease.Append(ctx)
	got, err := b.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	diffEvents(t, "events appended through a lease (every kind, then failed appends)", got, want)
	if l, ok := b.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		} else {
			found := false
			for _, s := range ids {
				found = found || s == id
			}
			if !found {
				t.Errorf("ListSessions does not list %q, whose events were appended through a lease", id)
			}
		}
	}
}

func testLeaseInvalid(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ctx := t.Context()
	for _, id := range []string{"", "a/b", "..", fmt.Sprintf("%0129d", 0)} {
		if _, err := la.AcquireLease(ctx, id, "owner-a", longTTL); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("AcquireLease(%q) = %v, want an error matching storage.ErrInvalidSessionID", id, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		if lease, err := la.AcquireLease(ctx, "lease-invalid", "owner-a", ttl); err == nil {
			t.Errorf("AcquireLease with ttl %v: no error, want one", ttl)
			_ = lease.Release(ctx)
		}
	}
}

// testLeaseHolder checks a LeaseInspector: nobody holds a new session's
// lease; an owner that acquired it holds it, on both handles, for at most
// its ttl; nobody once it released it.
func testLeaseHolder(t *testing.T, a, b storage.Storage, la, lb storage.Leaser) {
	ia, okA := a.(storage.LeaseInspector)
	ib, okB := b.(storage.LeaseInspector)
	switch {
	case !okA && !okB:
		t.Skip("the store does not implement storage.LeaseInspector")
	case okA != okB:
		t.Fatal("only one of the two handles implements storage.LeaseInspector")
	}
	ctx := t.Context()
	const id = "lease-holder"
	if holder, left, err := ia.LeaseHolder(ctx, id); err != nil || holder != "" || left != 0 {
		t.Errorf("LeaseHolder of a session nobody leased = %q, %v, %v; want \"\", 0, nil", holder, left, err)
	}
	lease := acquire(t, la, id, "owner-a", longTTL)
	for name, in := range map[string]storage.LeaseInspector{"a": ia, "b": ib} {
		if holder, left, err := in.LeaseHolder(ctx, id); err != nil || holder != "owner-a" || left <= 0 || left > longTTL {
			t.Errorf("LeaseHolder on handle %s while owner-a holds the lease = %q, %v, %v; want owner-a, at most %v left", name, holder, left, err, longTTL)
		}
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if holder, _, err := ib.LeaseHolder(ctx, id); err != nil || holder != "" {
		t.Errorf("LeaseHolder after the release = %q, %v; want nobody", holder, err)
	}
}
