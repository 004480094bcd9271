package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// runQueue is the process's queue for a place under max_runs
// (Config.QueueRuns): the admissions waiting, by tenant, first come first
// served within a tenant, and the tenants served in turn, so that one
// tenant's burst cannot hold the others' runs back: each place that frees
// goes to the first waiting admission of the next tenant in turn, and one
// tenant holds at most half of the queue's places.
type runQueue struct {
	mu      sync.Mutex
	max     int                        // the admissions that may wait
	share   int                        // the admissions of one tenant that may wait: half of max, at least 1
	ring    []string                   // the tenants with admissions waiting, in their turn's order
	turn    int                        // the index in ring of the tenant whose turn it is
	waiting map[string][]chan struct{} // each tenant's waiting admissions, first first
	n       int                        // the admissions waiting, every tenant's
}

func newRunQueue(places int) *runQueue {
	return &runQueue{max: places, share: max(1, places/2), waiting: map[string][]chan struct{}{}}
}

// busy reports whether admissions wait: a newcomer does not overtake them.
func (q *runQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0
}

// queued returns how many admissions of each tenant wait.
func (q *runQueue) queued() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]int, len(q.waiting))
	for t, w := range q.waiting {
		out[t] = len(w)
	}
	return out
}

// wake tells the admission whose turn it is to look again: a run ended,
// or an admission gave its place back.
func (q *runQueue) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wakeLocked()
}

func (q *runQueue) wakeLocked() {
	if head := q.headLocked(); head != nil {
		select {
		case head <- struct{}{}:
		default:
		}
	}
}

// headLocked is the admission whose turn it is, nil when none waits.
func (q *runQueue) headLocked() chan struct{} {
	if len(q.ring) == 0 {
		return nil
	}
	return q.waiting[q.ring[q.turn]][0]
}

// errQueueShare is why an admission may not wait: its tenant holds its
// share of the queue already.
var errQueueShare = errors.New("the tenant's share of the queue is taken")

// wait waits, in tenant's line, for its turn and a place that take (which
// holds the place when it returns true) gets, up to timeout or ctx's end.
func (q *runQueue) wait(ctx context.Context, tenant string, take func() bool, timeout time.Duration) error {
	q.mu.Lock()
	if q.n >= q.max {
		q.mu.Unlock()
		return errQueueFull
	}
	if len(q.waiting[tenant]) >= q.share {
		// One tenant's burst may not fill the queue against the others.
		q.mu.Unlock()
		return errQueueShare
	}
	me := make(chan struct{}, 1)
	if len(q.waiting[tenant]) == 0 {
		q.ring = append(q.ring, tenant)
	}
	q.waiting[tenant] = append(q.waiting[tenant], me)
	q.n++
	q.wakeLocked() // the head looks at once: a place may have freed meanwhile
	q.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-me:
		case <-timer.C:
			q.leave(tenant, me)
			return errQueueTimeout
		case <-ctx.Done():
			q.leave(tenant, me)
			return ctx.Err()
		}
		q.mu.Lock()
		if q.headLocked() != me {
			q.mu.Unlock()
			continue // not its turn: the head was told
		}
		ok := take()
		if ok {
			// The next tenant's turn; the next may fit too.
			q.removeLocked(tenant, me, true)
			q.wakeLocked()
		}
		q.mu.Unlock()
		if ok {
			return nil
		}
	}
}

// leave takes an admission that gave up out of the queue.
func (q *runQueue) leave(tenant string, me chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(tenant, me, false)
	q.wakeLocked()
}

// removeLocked takes me out of tenant's line; served, the turn passes to
// the next tenant, else it stays where it is (a tenant leaving the ring
// before the turn moves it one back, so that the same tenant keeps it).
func (q *runQueue) removeLocked(tenant string, me chan struct{}, served bool) {
	line := q.waiting[tenant]
	i := slices.Index(line, me)
	if i < 0 {
		return
	}
	q.n--
	at := slices.Index(q.ring, tenant)
	if len(line) > 1 {
		q.waiting[tenant] = slices.Delete(line, i, i+1)
		if served {
			q.turn = (at + 1) % len(q.ring)
		}
		return
	}
	delete(q.waiting, tenant)
	q.ring = slices.Delete(q.ring, at, at+1)
	switch {
	case len(q.ring) == 0:
		q.turn = 0
	case at < q.turn:
		q.turn--
	case q.turn >= len(q.ring):
		q.turn = 0
	}
}
