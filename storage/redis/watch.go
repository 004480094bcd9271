package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/storage"
)

// Bounds of the backoff between a watch's failed XREAD and its next try.
const (
	minWatchBackoff = 50 * time.Millisecond
	maxWatchBackoff = 5 * time.Second
)

// Watch reports appends to the session, from this or any other Store on
// the same Redis, prefix and tenant, made after Watch returned: the
// channel receives a value (coalesced in a buffer of one, never blocking
// an append) after each, and is closed when ctx ends or the Store is
// closed. It resolves the stream's last entry before it returns, then a
// goroutine waits for newer entries with XREAD BLOCK, reconnecting with a
// backoff after errors; see the package documentation.
func (s *Store) Watch(ctx context.Context, sessionID string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, storage.ErrClosed
	}
	key := s.eventsKey(sessionID)
	last, err := lastIDScript.Run(ctx, s.client, []string{key}).Text()
	if err != nil {
		return nil, s.fail(ctx, fmt.Sprintf("watch session %q", sessionID), err)
	}

	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, storage.ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	// The watch ends with ctx or with the Store.
	wctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.done, cancel)
	w := &watch{ch: make(chan struct{}, 1)}
	// Close the channel as soon as the watch ends, even while the
	// goroutine still waits for its XREAD to return.
	context.AfterFunc(wctx, w.close)
	go func() {
		defer s.wg.Done()
		defer stopOnClose()
		defer cancel()
		s.watch(wctx, key, last, w)
	}()
	return w.ch, nil
}

// watch is the sending side of a Watch's channel.
type watch struct {
	mu     sync.Mutex
	closed bool
	ch     chan struct{}
}

// notify sends a value unless one is pending or the channel is closed.
func (w *watch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (w *watch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

// watchIdleTime is how long a connection of a watch pool stays idle
// before it is closed.
const watchIdleTime = time.Minute

// watch waits for entries after last until ctx ends, notifying w after
// each wake-up that found some.
func (s *Store) watch(ctx context.Context, key, last string, w *watch) {
	backoff := minWatchBackoff
	var conn *waitConn
	defer func() { conn.release() }()
	for ctx.Err() == nil {
		var reader goredis.Cmdable = s.watchClient
		if conn == nil {
			c, err := s.waitConn(ctx, key)
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err == nil && c != nil:
				conn = c
			}
		}
		if conn != nil {
			reader = conn.conn
		}
		// COUNT 1: the entry only wakes us; the newest id comes next.
		res, err := reader.XRead(ctx, &goredis.XReadArgs{
			Streams: []string{key, last},
			Count:   1,
			Block:   s.block,
		}).Result()
		if err == nil && (len(res) == 0 || len(res[0].Messages) == 0) {
			err = goredis.Nil // nothing new: wait again
		}
		if err == nil {
			last = res[0].Messages[0].ID
			// Skip to the newest entry, so that a batch wakes us once.
			if id, err := lastIDScript.Run(ctx, s.client, []string{key}).Text(); err == nil {
				last = maxID(last, id)
			}
			backoff = minWatchBackoff
			w.notify()
			continue
		}
		if errors.Is(err, goredis.Nil) {
			backoff = minWatchBackoff
			continue
		}
		// The connection, or its node's claim to the key, may be gone:
		// the next try takes another.
		conn.release()
		conn = nil
		if ctx.Err() != nil {
			return
		}
		// The server is down or unreachable: try again later, from the
		// last id seen, so that nothing appended meanwhile is missed.
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// waitConn is a connection a watch holds while it lasts, whose blocking
// XREAD a CLIENT UNBLOCK ends as soon as the watch's ctx does: without
// it, a watch that ended would keep its connection until its XREAD timed
// out (up to Options.WatchBlock), and a host whose viewers come and go
// would hold a connection for each of the last WatchBlock's viewers.
type waitConn struct {
	conn     *goredis.Conn
	stop     func() bool   // stops the unblocking
	released chan struct{} // closed by release
}

// waitConn returns a connection for key's watch from the watch client's
// pool (on a cluster, the pool of the node that serves key), or nil when
// the client is of another kind: the watch then waits through the
// client's pool, and keeps its connection until its XREAD times out.
func (s *Store) waitConn(ctx context.Context, key string) (*waitConn, error) {
	// The CLIENT UNBLOCK goes through the command pool: the watch pool
	// may have no other connection.
	node, err := nodeFor(ctx, s.watchClient, key)
	if node == nil || err != nil {
		return nil, err
	}
	cmdNode, err := nodeFor(ctx, s.client, key)
	if cmdNode == nil || err != nil {
		return nil, err
	}
	conn := node.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		conn.Close()
		return nil, err
	}
	wc := &waitConn{conn: conn, released: make(chan struct{})}
	wc.stop = context.AfterFunc(ctx, func() {
		// An XREAD sent just after ctx ended is not blocked yet when
		// the first CLIENT UNBLOCK comes: unblock until the watch lets
		// the connection go (within a block, when all else fails).
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for range int(s.block/(50*time.Millisecond)) + 1 {
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n, err := cmdNode.ClientUnblock(uctx, id).Result()
			cancel()
			if n == 1 || err != nil {
				return
			}
			select {
			case <-wc.released:
				return
			case <-t.C:
			}
		}
	})
	return wc, nil
}

// nodeFor returns the client of the node that serves key: c itself, or
// on a cluster its primary for key's slot; nil when c is of another kind.
func nodeFor(ctx context.Context, c goredis.UniversalClient, key string) (*goredis.Client, error) {
	switch c := c.(type) {
	case *goredis.Client:
		return c, nil
	case *goredis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, nil
}

// release gives the connection back to its pool.
func (c *waitConn) release() {
	if c == nil {
		return
	}
	c.stop()
	close(c.released)
	c.conn.Close()
}

// maxID returns the greater of two stream entry ids ("ms-seq").
func maxID(a, b string) string {
	if compareID(a, b) >= 0 {
		return a
	}
	return b
}

// compareID compares two stream entry ids numerically.
func compareID(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am != bm:
		return cmpUint(am, bm)
	default:
		return cmpUint(as, bs)
	}
}

func splitID(id string) (ms, seq uint64) {
	var i int
	for i < len(id) && id[i] != '-' {
		ms = ms*10 + uint64(id[i]-'0')
		i++
	}
	for i++; i < len(id); i++ {
		seq = seq*10 + uint64(id[i]-'0')
	}
	return ms, seq
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
