package storage_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

func mustPrefix(t *testing.T, s storage.Storage, prefix string) storage.Storage {
	t.Helper()
	p, err := storage.Prefix(s, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrefixConformance: a prefixed view is a store like any other.
func TestPrefixConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		return mustPrefix(t, memory.New(), "tenant-a:")
	})
}

// TestPrefixIsolation: two prefixes over one store never see each other's
// sessions or values, and a plain view sees both under their prefixes.
func TestPrefixIsolation(t *testing.T) {
	ctx := context.Background()
	base := memory.New()
	a, b := mustPrefix(t, base, "a:"), mustPrefix(t, base, "b:")
	ev := storagetest.EveryKind("run_1")[:1]
	if err := a.Append(ctx, "s1", ev...); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(ctx, "s1"); err != nil || len(got) != 0 {
		t.Errorf("b sees a's session: %d events, %v", len(got), err)
	}
	if got, err := a.Load(ctx, "s1"); err != nil || len(got) != 1 {
		t.Errorf("a's own session: %d events, %v", len(got), err)
	}
	la, _ := a.(storage.Lister).ListSessions(ctx)
	lb, _ := b.(storage.Lister).ListSessions(ctx)
	all, _ := base.ListSessions(ctx)
	if !slices.Equal(la, []string{"s1"}) || len(lb) != 0 || !slices.Equal(all, []string{"a:s1"}) {
		t.Errorf("lists: a %q, b %q, base %q", la, lb, all)
	}
	kva, kvb := a.(storage.KV), b.(storage.KV)
	if err := kva.Set(ctx, "ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := kvb.Get(ctx, "ns", "k"); ok || err != nil {
		t.Errorf("b reads a's value: %v %v", ok, err)
	}
	if keys, _ := kvb.Keys(ctx, "ns"); len(keys) != 0 {
		t.Errorf("b lists a's keys: %q", keys)
	}
	if _, ok := a.(storage.Leaser); ok {
		t.Error("a view of a store without leases has leases")
	}
}

// TestPrefixRefuses: a bad prefix and a store that cannot list or keep
// values are refused; an id too long to prefix is still a session, listed
// under its own name.
func TestPrefixRefuses(t *testing.T) {
	for _, p := range []string{"", "a", "a b:", ".a:", strings.Repeat("p", 48) + ":"} {
		if _, err := storage.Prefix(memory.New(), p); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if _, err := storage.Prefix(appendOnly{}, "a:"); err == nil {
		t.Error("a store without Lister and KV accepted")
	}
	ctx := context.Background()
	p := mustPrefix(t, memory.New(), "tenant:")
	long := strings.Repeat("x", 127)
	if err := p.Append(ctx, long, storagetest.EveryKind("r")[:1]...); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Load(ctx, long); err != nil || len(got) != 1 {
		t.Errorf("Load of a long id: %d events, %v", len(got), err)
	}
	if ids, err := p.(storage.Lister).ListSessions(ctx); err != nil || !slices.Equal(ids, []string{long}) {
		t.Errorf("ListSessions = %q, %v", ids, err)
	}
	if err := p.Append(ctx, ".hidden", storagetest.EveryKind("r")[:1]...); !errors.Is(err, storage.ErrInvalidSessionID) {
		t.Errorf("an invalid id: %v", err)
	}
}

type appendOnly struct{}

func (appendOnly) Append(context.Context, string, ...ledger.Event) error { return nil }
func (appendOnly) Load(context.Context, string) ([]ledger.Event, error)  { return nil, nil }
