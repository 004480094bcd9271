package storagetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

// backend is what several handles of the reference leasing store share:
// the events, the leases and the watches.
type backend struct {
	store *memory.Store

	mu      sync.Mutex
	leases  map[string]leaseState
	watches map[string]map[chan struct{}]bool
}

type leaseState struct {
	owner   string
	expires time.Time
}

func newBackend() *backend {
	return &backend{
		store:   memory.New(),
		leases:  map[string]leaseState{},
		watches: map[string]map[chan struct{}]bool{},
	}
}

// leasing is a reference storage.Leaser and storage.Watcher over a memory
// store, one handle of a backend, which a mode may break.
type leasing struct {
	*backend
	mode string
}

// held returns the session's live lease. b.mu is held.
func (b *backend) held(id string) (leaseState, bool) {
	l, ok := b.leases[id]
	if ok && !time.Now().Before(l.expires) {
		delete(b.leases, id)
		return leaseState{}, false
	}
	return l, ok
}

// notify signals the session's watches. b.mu is held.
func (s *leasing) notify(id string) {
	for ch := range s.watches[id] {
		if s.mode == "watch-blocking" {
			ch <- struct{}{}
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *leasing) Append(ctx context.Context, id string, events ...ledger.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.store.Append(ctx, id, events...); err != nil {
		return err
	}
	if len(events) > 0 && s.mode != "watch-silent" {
		s.notify(id)
	}
	return nil
}

func (s *leasing) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	return s.store.Load(ctx, id)
}

func (s *leasing) ListSessions(ctx context.Context) ([]string, error) {
	return s.store.ListSessions(ctx)
}

func (s *leasing) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (storage.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !storage.ValidSessionID(id) {
		return nil, storage.ErrInvalidSessionID
	}
	if ttl <= 0 {
		return nil, storage.ErrLeaseLost // any error will do
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.held(id); ok && l.owner != owner && s.mode != "not-exclusive" {
		return nil, storage.ErrLeaseHeld
	}
	expires := time.Now().Add(ttl)
	if s.mode == "no-expiry" {
		expires = time.Now().Add(time.Hour)
	}
	s.leases[id] = leaseState{owner: owner, expires: expires}
	return &refLease{s: s, id: id, owner: owner, ttl: ttl}, nil
}

func (s *leasing) Watch(ctx context.Context, id string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !storage.ValidSessionID(id) {
		return nil, storage.ErrInvalidSessionID
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watches[id] == nil {
		s.watches[id] = map[chan struct{}]bool{}
	}
	s.watches[id][ch] = true
	s.mu.Unlock()
	if s.mode != "watch-never-ends" {
		context.AfterFunc(ctx, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.watches[id], ch)
			close(ch)
		})
	}
	return ch, nil
}

type refLease struct {
	s     *leasing
	id    string
	owner string
	ttl   time.Duration
}

func (l *refLease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if h, ok := l.s.held(l.id); !ok || h.owner != l.owner {
		return storage.ErrLeaseLost
	}
	l.s.leases[l.id] = leaseState{owner: l.owner, expires: time.Now().Add(l.ttl)}
	return nil
}

func (l *refLease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if h, ok := l.s.held(l.id); ok && (h.owner == l.owner || l.s.mode == "release-other") {
		delete(l.s.leases, l.id)
	}
	return nil
}

func (l *refLease) Append(ctx context.Context, events ...ledger.Event) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if h, ok := l.s.held(l.id); (!ok || h.owner != l.owner) && l.s.mode != "no-fence" {
		return storage.ErrLeaseLost
	}
	if err := l.s.store.Append(ctx, l.id, events...); err != nil {
		return err
	}
	if len(events) > 0 && l.s.mode != "watch-silent" {
		l.s.notify(l.id)
	}
	return nil
}

var (
	_ storage.Leaser  = (*leasing)(nil)
	_ storage.Watcher = (*leasing)(nil)
	_ storage.Lister  = (*leasing)(nil)
)

// TestReferenceLeasing checks that a correct leasing store passes the
// suite, with one handle and with two.
func TestReferenceLeasing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for leases to expire")
	}
	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		storagetest.Run(t, func(t *testing.T) storage.Storage {
			return &leasing{backend: newBackend(), mode: os.Getenv("STORAGETEST_BROKEN_LEASE")}
		})
	})
	t.Run("RunShared", func(t *testing.T) {
		t.Parallel()
		storagetest.RunShared(t, func(t *testing.T) (storage.Storage, storage.Storage) {
			b := newBackend()
			mode := os.Getenv("STORAGETEST_BROKEN_LEASE")
			return &leasing{backend: b, mode: mode}, &leasing{backend: b, mode: mode}
		})
	})
}

// TestSuiteCatchesBrokenLeases checks that the lease and watch checks
// report each broken rule in the subtest about it.
func TestSuiteCatchesBrokenLeases(t *testing.T) {
	if os.Getenv("STORAGETEST_BROKEN_LEASE") != "" {
		t.Skip("in the subprocess")
	}
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	for _, tc := range []struct {
		mode, subtest, want string
	}{
		{"no-fence", "Leaser/Expiry", "want an error matching storage.ErrLeaseLost"},
		{"no-expiry", "Leaser/Expiry", "should have expired"},
		{"not-exclusive", "Leaser/Exclusive", "want an error matching storage.ErrLeaseHeld"},
		{"release-other", "Leaser/Release", "must not free owner-b's lease"},
		{"watch-silent", "Watcher/Fires", "the watch did not fire"},
		{"watch-blocking", "Watcher/Coalesces", "the store blocks on it"},
		{"watch-never-ends", "Watcher/Ends", "was not closed"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			path := strings.ReplaceAll("^TestReferenceLeasing$/^RunShared$/^"+tc.subtest+"$", "/", "$/^")
			cmd := exec.Command(os.Args[0], "-test.run="+path, "-test.count=1", "-test.timeout=60s")
			cmd.Env = append(os.Environ(), "STORAGETEST_BROKEN_LEASE="+tc.mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store broken by %s:\n%s", tc.mode, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestReferenceLeasing/RunShared/"+tc.subtest) {
				t.Errorf("subtest %s did not fail:\n%s", tc.subtest, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}
