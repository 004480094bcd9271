package host

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The chunk timeouts of a model attempt (AgentTimeouts.FirstChunk and
// Chunk): a watchdog cuts an attempt whose stream stays silent, and the cut
// is a transient failure, retried like any other.

// chunkWatch bounds the silences of one model attempt's stream. Its kick is
// called for every delta, from whatever goroutine the model streams on, and
// costs one atomic store: the timer is not reset per delta, but when it
// fires it re-arms itself for what is left of the bound since the last
// delta.
type chunkWatch struct {
	first, chunk time.Duration
	start        time.Time
	last         atomic.Int64 // nanoseconds from start to the latest delta; 0 before the first
	cancel       context.CancelCauseFunc
	fired        atomic.Pointer[TimeoutError]

	mu    sync.Mutex // guards timer and done: the timer's function and stop take it
	timer *time.Timer
	done  bool
}

// watchChunks returns ctx bounded by the agent's chunk timeouts, and the
// watch (nil when neither is set). Stop it when the attempt ends.
func watchChunks(ctx context.Context, t AgentTimeouts) (context.Context, *chunkWatch) {
	if t.FirstChunk <= 0 && t.Chunk <= 0 {
		return ctx, nil
	}
	w := &chunkWatch{first: t.FirstChunk, chunk: t.Chunk, start: time.Now()}
	ctx, w.cancel = context.WithCancelCause(ctx)
	d := w.first
	if d <= 0 {
		d = w.chunk // until the first delta, the timer only looks
	}
	w.mu.Lock()
	w.timer = time.AfterFunc(d, w.check)
	w.mu.Unlock()
	return ctx, w
}

// kick records that a delta arrived.
func (w *chunkWatch) kick() {
	if w != nil {
		w.last.Store(max(int64(time.Since(w.start)), 1))
	}
}

// check runs when the timer fires: it cuts the attempt if the stream has
// been silent for its bound, else waits for the rest of it.
func (w *chunkWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	last := w.last.Load()
	bound, kind := w.chunk, TimeoutChunk
	switch {
	case last == 0 && w.first <= 0:
		// No bound before the first delta: look again later.
		w.timer.Reset(w.chunk)
		return
	case last == 0:
		bound, kind = w.first, TimeoutFirstChunk
	case w.chunk <= 0:
		return // a first-chunk bound only, and the first chunk came
	}
	if left := time.Duration(last) + bound - time.Since(w.start); left > 0 {
		w.timer.Reset(left)
		return
	}
	te := &TimeoutError{Kind: kind, After: bound}
	w.fired.Store(te)
	w.cancel(te)
}

// stop ends the watch; err is what the attempt returned. When the watch cut
// the attempt, the error is the *TimeoutError saying which bound, which is
// retryable; otherwise err.
func (w *chunkWatch) stop(err error) error {
	if w == nil {
		return err
	}
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel(nil)
	if te := w.fired.Load(); te != nil && err != nil {
		return &TimeoutError{Kind: te.Kind, After: te.After, Err: err}
	}
	return err
}
