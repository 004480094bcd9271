package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
)

// GET /v1/feed: what changes among a tenant's sessions, over SSE, so that
// a console refreshes its lists when something happens rather than on a
// timer. Each "change" event names a session and what happened to it
// (run-start, run-end, approval-requested, approval-decided,
// queued-message); it carries no content, only the hint to read the
// session again. The feed tells what this server's host sees: runs led by
// another host sharing the storage show up when a client reads the lists
// again (the console also does every few seconds). A client that falls
// behind gets a "resync" event instead of the changes it missed.

// feedChange is the data of a "change" event.
type feedChange struct {
	SessionID  string         `json:"session_id"`
	Type       host.EventType `json:"type"`
	RunID      string         `json:"run_id,omitempty"`
	ApprovalID string         `json:"approval_id,omitempty"`
}

// feedBuffer is how many changes a subscriber may fall behind by before it
// is told to resync.
const feedBuffer = 64

// feed fans a tenant's changes out to its subscribers, never waiting for
// one.
type feed struct {
	mu   sync.Mutex
	subs map[*feedSub]struct{}
}

// feedSub is one subscriber: its changes, and whether it missed some.
type feedSub struct {
	ch     chan feedChange
	missed chan struct{} // holds a value once changes were dropped
}

func (f *feed) subscribe() *feedSub {
	sub := &feedSub{ch: make(chan feedChange, feedBuffer), missed: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[*feedSub]struct{}{}
	}
	f.subs[sub] = struct{}{}
	return sub
}

func (f *feed) unsubscribe(sub *feedSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, sub)
}

// publish hands c to every subscriber that has room; one that has none is
// marked as having missed changes.
func (f *feed) publish(c feedChange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sub := range f.subs {
		select {
		case sub.ch <- c:
		default:
			select {
			case sub.missed <- struct{}{}:
			default:
			}
		}
	}
}

// feedWorthy are the live events a feed tells.
func feedWorthy(t host.EventType) bool {
	switch t {
	case host.EventRunStart, host.EventRunEnd, host.EventApprovalRequested, host.EventApprovalDecided, host.EventQueuedMessage:
		return true
	}
	return false
}

func (s *Server) getFeed(w http.ResponseWriter, r *http.Request, t *tenant) {
	sub := t.feed.subscribe()
	defer t.feed.unsubscribe(sub)
	s.metrics.streams.Add(context.Background(), 1)
	defer s.metrics.streams.Add(context.Background(), -1)
	out := newSSE(w)
	out.timeout = time.Duration(s.cfg.StreamWriteTimeout)
	key := apiKey(r)
	beat := time.NewTicker(time.Duration(s.cfg.Heartbeat))
	defer beat.Stop()
	for {
		select {
		case c := <-sub.ch:
			if err := out.event("change", "", c); err != nil {
				return
			}
		case <-sub.missed:
			if err := out.event("resync", "", struct{}{}); err != nil {
				return
			}
		case <-beat.C:
			if why := s.revoked(r.Context(), key, t); why != "" {
				out.event("error", "", map[string]string{"code": codeUnauthorized, "message": why})
				return
			}
			if err := out.comment("ping"); err != nil {
				return
			}
		case <-s.done:
			return
		case <-r.Context().Done():
			return
		}
	}
}
