// Package hub fans a stream of values out to subscribers that each read at
// their own pace, without the publisher ever waiting for one of them.
//
// A [Hub] keeps every value it was given, numbered from 1 in the order they
// were published (a value's offset). A subscriber starts after any offset
// it names: it first reads what was published before it came (the
// snapshot, at its own pace), then each value as it is published. The
// publisher only appends and signals. A subscriber that falls more than
// [Options.MaxLag] live values behind is dropped ([ErrDropped]) rather than
// waited for: it learns that it cannot keep up (a server closes that
// client's stream, say) instead of drifting ever further behind, and may
// subscribe again after the last offset it read, losing nothing, since the
// hub keeps its values.
//
// Hubs are safe for concurrent use by one or more publishers and any number
// of subscribers.
package hub

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"
)

// ErrDropped is returned by [Sub.Next] to a subscriber that fell more than
// Options.MaxLag values behind: it was dropped rather than waited for.
// Subscribing again after the last offset it read resumes where it left
// off.
var ErrDropped = errors.New("hub: subscriber fell behind and was dropped")

// Options configures a [Hub].
type Options struct {
	// MaxLag is how many values a subscriber may have left to read before
	// it is dropped. Default: 0, which means 1024.
	MaxLag int
	// Capacity is the number of values the hub makes room for at once.
	// Default: 0, which means room as values come.
	Capacity int
}

// DefaultMaxLag is Options.MaxLag when it is 0.
const DefaultMaxLag = 1024

// Hub is a fan-out of values of type T; the zero value is not usable (see
// [New] and [Hub.Init]).
type Hub[T any] struct {
	maxLag int

	mu     sync.Mutex
	log    []T
	subs   []*Sub[T]
	first  [1]*Sub[T] // room for the first subscriber, the common case
	closed bool
}

// New returns an empty, open Hub.
func New[T any](opts Options) *Hub[T] {
	h := new(Hub[T])
	h.Init(opts)
	return h
}

// Init makes h, a zero Hub (one kept inside another value, say), an empty,
// open Hub, as New does.
func (h *Hub[T]) Init(opts Options) {
	if opts.MaxLag <= 0 {
		opts.MaxLag = DefaultMaxLag
	}
	h.maxLag = opts.MaxLag
	h.log = make([]T, 0, max(opts.Capacity, 0))
	h.subs = h.first[:0]
}

// Publish appends v and returns its offset. It never blocks on a
// subscriber. Publishing to a closed hub does nothing and returns 0.
func (h *Hub[T]) Publish(v T) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0
	}
	h.log = append(h.log, v)
	n := len(h.log)
	for i := 0; i < len(h.subs); i++ {
		s := h.subs[i]
		if n-max(s.next, s.base) > h.maxLag {
			s.dropLocked()
			i--
			continue
		}
		s.signal()
	}
	return n
}

// Len returns the offset of the last value published, 0 when none.
func (h *Hub[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.log)
}

// Close ends the stream: subscribers read what is left, then get io.EOF.
// Closing twice does nothing.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, s := range h.subs {
		s.signal()
	}
}

// Subscribe returns a subscriber that reads the values after offset after
// (0: from the first), then the values published later. An offset beyond
// the last value published waits for that value.
func (h *Hub[T]) Subscribe(after int) *Sub[T] {
	s := &Sub[T]{h: h, next: max(after, 0), ready: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.base = len(h.log)
	h.subs = append(h.subs, s)
	return s
}

// Sub reads a hub's values in order. It is meant for one goroutine.
type Sub[T any] struct {
	h     *Hub[T]
	next  int           // offset of the last value read; guarded by h.mu
	base  int           // the hub's length when it subscribed: the snapshot never counts as lag
	err   error         // ErrDropped once dropped; guarded by h.mu
	ready chan struct{} // signalled when there may be more to read
}

// signal wakes the subscriber without waiting. h.mu is held.
func (s *Sub[T]) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// dropLocked drops the subscriber. h.mu is held.
func (s *Sub[T]) dropLocked() {
	s.err = ErrDropped
	s.removeLocked()
	s.signal()
}

// removeLocked takes the subscriber off the hub's list. h.mu is held.
func (s *Sub[T]) removeLocked() {
	for i, o := range s.h.subs {
		if o == s {
			s.h.subs = slices.Delete(s.h.subs, i, i+1)
			return
		}
	}
}

// Next returns the next value and its offset. It waits for one to be
// published; it returns io.EOF once the hub is closed and every value was
// read, ErrDropped when the subscriber fell behind, and ctx.Err() when ctx
// ends first.
func (s *Sub[T]) Next(ctx context.Context) (T, int, error) {
	return s.NextOr(ctx, nil, nil)
}

// NextOr is Next that also stops waiting when stop is closed, and then
// returns stopErr: a subscriber that must also stop at another signal (its
// host closing, say) need not make a context for each wait.
func (s *Sub[T]) NextOr(ctx context.Context, stop <-chan struct{}, stopErr error) (T, int, error) {
	v, off, _, err := s.NextOrWake(ctx, stop, stopErr, nil)
	return v, off, err
}

// NextOrWake is NextOr that also returns, with woke true and nothing read,
// when wake fires while it waits: a reader that has other work at set
// times (a heartbeat, say) waits for values and for its timer at once, on
// one goroutine.
func (s *Sub[T]) NextOrWake(ctx context.Context, stop <-chan struct{}, stopErr error, wake <-chan time.Time) (v T, off int, woke bool, err error) {
	var zero T
	for {
		s.h.mu.Lock()
		switch {
		case s.err != nil:
			s.h.mu.Unlock()
			return zero, 0, false, s.err
		case s.next < len(s.h.log):
			v := s.h.log[s.next]
			s.next++
			off := s.next
			s.h.mu.Unlock()
			return v, off, false, nil
		case s.h.closed:
			s.h.mu.Unlock()
			return zero, 0, false, io.EOF
		}
		s.h.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return zero, 0, false, ctx.Err()
		case <-stop:
			return zero, 0, false, stopErr
		case <-wake:
			return zero, 0, true, nil
		}
	}
}

// TryNext returns the next value and its offset when one was published and
// not yet read, without waiting; ok is false otherwise (nothing new, the
// hub closed, the subscriber dropped or closed: Next tells which).
func (s *Sub[T]) TryNext() (v T, off int, ok bool) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.err != nil || s.next >= len(s.h.log) {
		return v, 0, false
	}
	v = s.h.log[s.next]
	s.next++
	return v, s.next, true
}

// Offset returns the offset of the last value read.
func (s *Sub[T]) Offset() int {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.next
}

// Close unsubscribes: Next returns io.EOF from then on (ErrDropped if the
// subscriber had been dropped). Closing twice does nothing.
func (s *Sub[T]) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.removeLocked()
	if s.err == nil {
		s.err = io.EOF
	}
}
