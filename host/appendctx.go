package host

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// appendCtx is the context of one of a run's ledger appends: it ends at
// its deadline (Timeouts.Append) or when the append is over (stop). A
// store that only asks Err (the memory and file stores) costs it no timer
// and no channel: Err compares the clock with the deadline. Done, Value
// and AfterFunc make, once, the context.WithDeadline it stands for, and
// answer from then on as that one does; contexts derived from it are so
// tied to that context as to any of the standard library's.
type appendCtx struct {
	deadline time.Time
	stopped  atomic.Bool

	mu     sync.Mutex
	real   atomic.Pointer[context.Context] // once made (see ctx)
	cancel context.CancelFunc
}

// newAppendCtx returns the context of an append bounded by d, and the stop
// to call once the append is over.
func newAppendCtx(d time.Duration) (*appendCtx, func()) {
	c := &appendCtx{deadline: time.Now().Add(d)}
	return c, c.stop
}

// ctx returns the standard context c stands for, making it on first use.
func (c *appendCtx) ctx() context.Context {
	if p := c.real.Load(); p != nil {
		return *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.real.Load(); p != nil {
		return *p
	}
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	if c.stopped.Load() {
		cancel()
	}
	c.cancel = cancel
	c.real.Store(&ctx)
	return ctx
}

// stop ends the context: the append is over.
func (c *appendCtx) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped.Store(true)
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *appendCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *appendCtx) Done() <-chan struct{} { return c.ctx().Done() }

func (c *appendCtx) Value(key any) any { return c.ctx().Value(key) }

// AfterFunc is context.AfterFunc on c (which the context package uses for
// the contexts derived from c).
func (c *appendCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.ctx(), f)
}

func (c *appendCtx) Err() error {
	if p := c.real.Load(); p != nil {
		return (*p).Err()
	}
	switch {
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	case c.stopped.Load():
		return context.Canceled
	}
	return nil
}

var _ context.Context = (*appendCtx)(nil)
