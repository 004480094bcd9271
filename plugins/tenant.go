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
//
// Both are served first come, first served: a call that waits is not
// overtaken by calls that arrive after it, however busy the tenant.
type tenantBudget struct {
	rt   *Runtime
	name string

	mu      sync.Mutex
	caps    Limits
	modules map[*Module]struct{}
	calls   quota // [calls]
	room    quota // [instances, bytes of linear memory]
	// roomWanted counts the calls waiting for room, read without the
	// lock when any call ends (see handOver).
	roomWanted atomic.Int32
}

// tenant returns the budget of a tenant, made on first use, and adds m
// to it.
func (r *Runtime) tenant(name string, m *Module) *tenantBudget {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.tenants[name]
	if b == nil {
		b = &tenantBudget{rt: r, name: name, modules: map[*Module]struct{}{}}
		r.tenants[name] = b
	}
	b.mu.Lock()
	b.caps = m.limits
	b.calls.grant(b.callCaps())
	b.room.grant(b.roomCaps())
	b.modules[m] = struct{}{}
	b.mu.Unlock()
	return b
}

func (b *tenantBudget) callCaps() [2]int64 {
	return [2]int64{int64(b.caps.TenantConcurrentCalls), 0}
}

func (b *tenantBudget) roomCaps() [2]int64 {
	return [2]int64{int64(b.caps.TenantInstances), b.caps.TenantMemoryBytes}
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

// startCall takes one of the tenant's call slots, waiting for one until
// ctx is done; then it returns a *busyError.
func (b *tenantBudget) startCall(ctx context.Context) error {
	b.mu.Lock()
	n := b.caps.TenantConcurrentCalls
	w, ok := b.calls.take([2]int64{1, 0}, b.callCaps())
	b.mu.Unlock()
	if ok {
		return nil
	}
	if !b.await(ctx, &b.calls, w) {
		return &busyError{what: fmt.Sprintf("the tenant's %d concurrent calls (Limits.TenantConcurrentCalls)", n), cause: ctx.Err()}
	}
	return nil
}

func (b *tenantBudget) endCall() {
	b.mu.Lock()
	b.calls.give([2]int64{1, 0}, b.callCaps())
	b.mu.Unlock()
}

// instanceMemory is what an instance of m counts against the tenant: the
// memory it may grow to, its linear memory and Extism's kernel's (each
// bounded by MemoryPages) and its tables.
func instanceMemory(m *Module) int64 {
	return 2*int64(m.limits.MemoryPages)<<16 + int64(m.limits.MaxTableElements)*tableElementBytes
}

// reserveInstance makes room for a new instance of m within the tenant's
// instance and memory caps: at once if there is room and nobody waits;
// otherwise it closes idle instances of the tenant's other modules, and
// waits its turn until ctx is done; then it returns a *busyError (the
// call did not run).
func (b *tenantBudget) reserveInstance(ctx context.Context, m *Module) error {
	need := [2]int64{1, instanceMemory(m)}
	b.mu.Lock()
	caps := b.caps
	if need[1] > caps.TenantMemoryBytes {
		b.mu.Unlock()
		return fmt.Errorf("%w: an instance may grow to %d MiB, more than the tenant's %d MiB (Limits.TenantMemoryBytes)",
			ErrInvalidLimits, need[1]>>20, caps.TenantMemoryBytes>>20)
	}
	w, ok := b.room.take(need, b.roomCaps())
	if ok {
		b.mu.Unlock()
		return nil
	}
	w.owner = m
	b.roomWanted.Add(1)
	defer b.roomWanted.Add(-1)
	mods := make([]*Module, 0, len(b.modules))
	for o := range b.modules {
		mods = append(mods, o)
	}
	b.mu.Unlock()
	// Idle instances hold room nobody uses: close them (each close gives
	// room to the first waiter). m's own count too: one may have become
	// idle after this call looked in m's pool.
	for evictIdle(mods) {
		select {
		case <-w.granted:
			return nil
		default:
		}
	}
	if !b.await(ctx, &b.room, w) {
		return &busyError{what: fmt.Sprintf("the tenant's %d instances and %d MiB (Limits.TenantInstances, Limits.TenantMemoryBytes)",
			caps.TenantInstances, caps.TenantMemoryBytes>>20), cause: ctx.Err()}
	}
	return nil
}

// spareInstance takes room for a new instance of m if there is room and
// nobody waits for it, and reports whether it did; it never waits, nor
// closes another module's idle instance: a warm instance (keepWarm) is
// made only with room nobody wants.
func (b *tenantBudget) spareInstance(m *Module) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.room.spare([2]int64{1, instanceMemory(m)}, b.roomCaps())
}

// spareCall takes one of the tenant's concurrent calls for background
// work (a warm instance made) if one is free and no call waits for it,
// and reports whether it did; endCall gives it back.
func (b *tenantBudget) spareCall() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls.spare([2]int64{1, 0}, b.callCaps())
}

// releaseInstance returns a closed instance's room, to the first waiter
// if any.
func (b *tenantBudget) releaseInstance(m *Module) {
	b.mu.Lock()
	b.room.give([2]int64{1, instanceMemory(m)}, b.roomCaps())
	b.mu.Unlock()
}

// handOver reports whether a call waits for room for a new instance:
// then an instance whose call ended is closed rather than kept idle, or
// the callers of its module could keep the room for good. (A waiting call
// of the same module does not see the idle instance: it waits for room,
// not in the pool, and gets a new instance.)
func (b *tenantBudget) handOver() bool { return b.roomWanted.Load() > 0 }

// await waits until w is granted (true) or ctx is done (false: w leaves
// the queue, and what it was granted meanwhile, if anything, is given
// back).
func (b *tenantBudget) await(ctx context.Context, q *quota, w *waiter) bool {
	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.leave(w) {
		q.grant(q.lastCaps) // w may have kept smaller requests behind it waiting
	} else { // granted meanwhile
		q.give(w.need, q.lastCaps)
	}
	return false
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

// quota counts what is in use of up to two resources and queues who waits
// for them, first come, first served. A cap of 0 is no cap. Its owner's
// lock guards it.
type quota struct {
	used     [2]int64
	queue    []*waiter
	lastCaps [2]int64
}

// waiter is a request queued for a quota; granted is closed when it got
// what it needs.
type waiter struct {
	need    [2]int64
	owner   *Module
	granted chan struct{}
}

func (q *quota) fits(need, caps [2]int64) bool {
	for i := range need {
		if caps[i] > 0 && q.used[i]+need[i] > caps[i] {
			return false
		}
	}
	return true
}

// take takes need at once when nobody waits and it fits; otherwise it
// queues a waiter and returns it.
func (q *quota) take(need, caps [2]int64) (*waiter, bool) {
	if q.spare(need, caps) {
		return nil, true
	}
	w := &waiter{need: need, granted: make(chan struct{})}
	q.queue = append(q.queue, w)
	return w, false
}

// spare takes need only when nobody waits and it fits, and reports
// whether it did: it never queues.
func (q *quota) spare(need, caps [2]int64) bool {
	q.lastCaps = caps
	if len(q.queue) > 0 || !q.fits(need, caps) {
		return false
	}
	q.used[0] += need[0]
	q.used[1] += need[1]
	return true
}

// give returns what was taken and grants the waiters it makes room for.
func (q *quota) give(amount, caps [2]int64) {
	q.used[0] -= amount[0]
	q.used[1] -= amount[1]
	q.grant(caps)
}

// grant gives room to waiters in order while the first fits.
func (q *quota) grant(caps [2]int64) {
	q.lastCaps = caps
	for len(q.queue) > 0 && q.fits(q.queue[0].need, caps) {
		w := q.queue[0]
		q.queue = q.queue[1:]
		q.used[0] += w.need[0]
		q.used[1] += w.need[1]
		close(w.granted)
	}
}

// leave takes w out of the queue; false when it was no longer there
// (granted).
func (q *quota) leave(w *waiter) bool {
	for i, x := range q.queue {
		if x == w {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return true
		}
	}
	return false
}
