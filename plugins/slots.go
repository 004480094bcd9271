package plugins

import (
	"context"
	"sync"
)

// slots are the runtime's plugin calls at once (Options.MaxConcurrentCalls),
// shared fairly among tenants: a tenant holds at most half of them (so one
// tenant's calls, however long, never take every slot from the others),
// and a freed slot goes to the waiting tenant with the fewest calls running
// (the oldest of its waiters first), not to whoever asked first: a tenant
// that floods the runtime with calls waits behind one that has none
// running.
type slots struct {
	mu        sync.Mutex
	size      int
	perTenant int
	free      int
	running   map[string]int
	waiters   []*slotWaiter
}

type slotWaiter struct {
	tenant  string
	granted chan struct{}
}

func newSlots(n int) *slots {
	return &slots{size: n, perTenant: max(1, (n+1)/2), free: n, running: map[string]int{}}
}

// acquire takes a slot for a call of tenant, waiting until ctx is done at
// most.
func (s *slots) acquire(ctx context.Context, tenant string) error {
	s.mu.Lock()
	if s.free > 0 && s.running[tenant] < s.perTenant && !s.waitingBefore(tenant) {
		s.take(tenant)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{tenant: tenant, granted: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.granted: // granted meanwhile: give it to the next
			s.giveBack(tenant)
		default:
			for i, o := range s.waiters {
				if o == w {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// spare takes a slot for background work of tenant (a warm instance
// made, Limits.WarmInstances) only if one is free and no call waits for
// it: such work runs plugin code too, under the same bound as calls, but
// never ahead of one. It reports whether it took one; release gives it
// back.
func (s *slots) spare(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free == 0 || len(s.waiters) > 0 || s.running[tenant] >= s.perTenant {
		return false
	}
	s.take(tenant)
	return true
}

// waitingBefore reports whether a waiter of a tenant with no more calls
// running than tenant's could take the free slot: then tenant queues too.
func (s *slots) waitingBefore(tenant string) bool {
	for _, w := range s.waiters {
		if s.running[w.tenant] < s.perTenant && s.running[w.tenant] <= s.running[tenant] {
			return true
		}
	}
	return false
}

func (s *slots) take(tenant string) {
	s.free--
	s.running[tenant]++
}

// release gives back a slot of tenant's.
func (s *slots) release(tenant string) {
	s.mu.Lock()
	s.giveBack(tenant)
	s.mu.Unlock()
}

// giveBack frees tenant's slot and grants the free slots to the waiters
// whose tenants have the fewest calls running; s.mu is held.
func (s *slots) giveBack(tenant string) {
	if s.running[tenant]--; s.running[tenant] <= 0 {
		delete(s.running, tenant)
	}
	s.free++
	for s.free > 0 {
		best := -1
		for i, w := range s.waiters {
			if s.running[w.tenant] >= s.perTenant {
				continue
			}
			if best < 0 || s.running[w.tenant] < s.running[s.waiters[best].tenant] {
				best = i
			}
		}
		if best < 0 {
			return
		}
		w := s.waiters[best]
		s.waiters = append(s.waiters[:best], s.waiters[best+1:]...)
		s.take(w.tenant)
		close(w.granted)
	}
}
