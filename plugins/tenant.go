package plugins

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// tenantBudget is what the modules of one tenant share while they run: a
// bound on their calls at once, and on their live instances and the
// linear memory those may grow to. Each module's own Limits bound it
// alone; this bounds the tenant's modules together, so that loading more
// modules does not multiply what a tenant may hold. The caps come from the
// Limits of the tenant's module loaded last.
type tenantBudget struct {
	rt   *Runtime
	name string

	mu        sync.Mutex
	caps      Limits
	calls     int
	instances int
	memory    int64
	modules   map[*Module]struct{}
	// freed is closed (and replaced) when a call ends or an instance
	// closes while someone waits (waiting > 0): they look again.
	freed   chan struct{}
	waiting int
	// needRoom counts, per module, the calls waiting for room for a new
	// instance; roomWanted is their total, read without the lock on
	// every call's end.
	needRoom   map[*Module]int
	roomWanted atomic.Int32
}

// tenant returns the budget of a tenant, made on first use, and adds m
// to it.
func (r *Runtime) tenant(name string, m *Module) *tenantBudget {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.tenants[name]
	if b == nil {
		b = &tenantBudget{rt: r, name: name, modules: map[*Module]struct{}{}, needRoom: map[*Module]int{}, freed: make(chan struct{})}
		r.tenants[name] = b
	}
	b.mu.Lock()
	b.caps = m.limits
	b.modules[m] = struct{}{}
	b.mu.Unlock()
	return b
}

// leave removes a module that shut down; the budget goes with the last.
func (b *tenantBudget) leave(m *Module) {
	b.rt.mu.Lock()
	defer b.rt.mu.Unlock()
	b.mu.Lock()
	delete(b.modules, m)
	empty := len(b.modules) == 0
	b.mu.Unlock()
	if empty && b.rt.tenants[b.name] == b {
		delete(b.rt.tenants, b.name)
	}
}

// wake tells waiters that something was freed. Call with b.mu held.
func (b *tenantBudget) wake() {
	if b.waiting > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
}

// wait waits, with b.mu held on entry and not on return, until something
// is freed or ctx is done; false when ctx is done.
func (b *tenantBudget) wait(ctx context.Context) bool {
	b.waiting++
	freed := b.freed
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}()
	select {
	case <-freed:
		return true
	case <-ctx.Done():
		return false
	}
}

// startCall takes one of the tenant's call slots, waiting for one until
// ctx is done; then it returns a *busyError.
func (b *tenantBudget) startCall(ctx context.Context) error {
	for {
		b.mu.Lock()
		if b.calls < b.caps.TenantConcurrentCalls {
			b.calls++
			b.mu.Unlock()
			return nil
		}
		n := b.caps.TenantConcurrentCalls
		if !b.wait(ctx) {
			return &busyError{what: fmt.Sprintf("the tenant's %d concurrent calls (Limits.TenantConcurrentCalls)", n), cause: ctx.Err()}
		}
	}
}

func (b *tenantBudget) endCall() {
	b.mu.Lock()
	b.calls--
	b.wake()
	b.mu.Unlock()
}

// instanceMemory is what an instance of m counts against the tenant: the
// linear memory it may grow to.
func instanceMemory(m *Module) int64 { return int64(m.limits.MemoryPages) << 16 }

// reserveInstance makes room for a new instance of m: within the tenant's
// instance and memory caps, closing idle instances of the tenant's other
// modules when that is what it takes, and otherwise waiting until ctx is
// done; then it returns a *busyError (the call did not run).
func (b *tenantBudget) reserveInstance(ctx context.Context, m *Module) error {
	mem := instanceMemory(m)
	for {
		b.mu.Lock()
		caps := b.caps
		if mem > caps.TenantMemoryBytes {
			b.mu.Unlock()
			return fmt.Errorf("%w: an instance may grow to %d MiB, more than the tenant's %d MiB (Limits.TenantMemoryBytes)",
				ErrInvalidLimits, mem>>20, caps.TenantMemoryBytes>>20)
		}
		if b.instances < caps.TenantInstances && b.memory+mem <= caps.TenantMemoryBytes {
			b.instances++
			b.memory += mem
			b.mu.Unlock()
			return nil
		}
		others := make([]*Module, 0, len(b.modules))
		for o := range b.modules {
			if o != m {
				others = append(others, o)
			}
		}
		b.mu.Unlock()
		if evictIdle(others) {
			continue
		}
		b.mu.Lock()
		if b.instances < caps.TenantInstances && b.memory+mem <= caps.TenantMemoryBytes {
			b.mu.Unlock()
			continue // freed meanwhile
		}
		// Wait, and let the other modules know: they hand over their
		// instances as their calls end (see handOver).
		b.needRoom[m]++
		b.roomWanted.Add(1)
		ok := b.wait(ctx)
		b.mu.Lock()
		if b.needRoom[m]--; b.needRoom[m] == 0 {
			delete(b.needRoom, m)
		}
		b.roomWanted.Add(-1)
		b.mu.Unlock()
		if !ok {
			return &busyError{what: fmt.Sprintf("the tenant's %d instances and %d MiB (Limits.TenantInstances, Limits.TenantMemoryBytes)",
				caps.TenantInstances, caps.TenantMemoryBytes>>20), cause: ctx.Err()}
		}
	}
}

// handOver reports whether an instance of m whose call ended should be
// closed rather than kept idle, because a call of another of the tenant's
// modules waits for room: without it, m's callers could keep the room
// forever, taking the idle instance back before the waiter wakes.
func (b *tenantBudget) handOver(m *Module) bool {
	if b.roomWanted.Load() == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for o, n := range b.needRoom {
		if o != m && n > 0 {
			return true
		}
	}
	return false
}

// releaseInstance returns a closed instance's share.
func (b *tenantBudget) releaseInstance(m *Module) {
	b.mu.Lock()
	b.instances--
	b.memory -= instanceMemory(m)
	b.wake()
	b.mu.Unlock()
}

// evictIdle closes one idle instance of one of modules; false when none
// is idle.
func evictIdle(modules []*Module) bool {
	for _, o := range modules {
		select {
		case in := <-o.pool.idle:
			o.evicted.Add(1)
			o.pool.discard(in)
			return true
		default:
		}
	}
	return false
}
