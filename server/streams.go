package server

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"
)

// Open event streams (GET /v1/sessions/{id}/events, GET /v1/feed, the UI
// message streams of POST /v1/ui/chat and GET /v1/ui/chat/{id}/stream)
// each hold a connection, and so a file descriptor, for as long as they
// last. streamSlots bounds them per API key and per tenant
// (RateLimitConfig.StreamsPerKey, Streams) and over the whole process
// (Config.MaxStreams, below the process's descriptor limit): a stream past
// a bound is refused with 429 before anything else is done. A session's or
// the feed's stream also closes after Config.StreamMaxAge; its client
// reconnects with Last-Event-ID and loses nothing.
type streamSlots struct {
	mu        sync.Mutex
	total     int
	perTenant map[string]int
	perKey    map[[32]byte]int // by the key's SHA-256 (no key kept), or the end user's
	// held are the streams whose relays took their connections over
	// (streamLease.hold), for sweepStreams; sweeping is held by the sweep
	// in progress.
	held     map[*streamLease]struct{}
	sweeping sync.Mutex
}

// acquire takes a slot for a stream of tenant t opened with key for the
// end user user (X-Agentic-User; "" for none), or says which bound it is
// past. A stream for an end user counts against that user
// (rate_limit.per_user.streams), one for none against its key
// (rate_limit.streams_per_key).
func (s *Server) acquireStream(t *tenant, key, user string) (release func(), refused string) {
	release, refused, _ = s.acquireSlot(t, key, user)
	return release, refused
}

// acquireSlot is acquireStream, which also gives the slot's key (k, by
// which held streams are found again: sweepStreams).
func (s *Server) acquireSlot(t *tenant, key, user string) (release func(), refused string, k [32]byte) {
	ss := &s.streams
	k = sha256.Sum256([]byte(key))
	limit, past := t.cfg.RateLimit.StreamsPerKey, "this API key holds its most event streams (rate_limit.streams_per_key)"
	if user != "" {
		// Users of two tenants are apart, and apart from every key.
		k = sha256.Sum256([]byte("user\x00" + t.name + "\x00" + user))
		past = "end user " + user + " holds its most event streams (rate_limit.per_user.streams)"
		if pu := t.cfg.RateLimit.PerUser; pu != nil && pu.Streams > 0 {
			limit = pu.Streams
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.total >= s.cfg.MaxStreams:
		return nil, "the server holds its most event streams (max_streams)", k
	case ss.perTenant[t.name] >= t.cfg.RateLimit.Streams:
		return nil, "tenant " + t.name + " holds its most event streams (rate_limit.streams)", k
	case ss.perKey[k] >= limit:
		return nil, past, k
	}
	if ss.perTenant == nil {
		ss.perTenant, ss.perKey = map[string]int{}, map[[32]byte]int{}
	}
	ss.total++
	ss.perTenant[t.name]++
	ss.perKey[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			ss.total--
			if ss.perTenant[t.name]--; ss.perTenant[t.name] == 0 {
				delete(ss.perTenant, t.name)
			}
			if ss.perKey[k]--; ss.perKey[k] == 0 {
				delete(ss.perKey, k)
			}
		})
	}, "", k
}

// sweepStreams looks, for a stream refused a slot, whether streams of the
// same bound (of the tenant, or of the key k) are held by viewers that
// left, and ends those: a stream whose relay took its connection over
// from net/http (newEventStream) reads nothing of it, so that a client's
// leaving is seen only at its next write or heartbeat, or here. It tells
// whether it freed a slot. One sweep runs at a time: a refusal during
// another's is not swept.
func (s *Server) sweepStreams(tenant string, k [32]byte) (freed bool) {
	ss := &s.streams
	if !ss.sweeping.TryLock() {
		return false
	}
	defer ss.sweeping.Unlock()
	ss.mu.Lock()
	var held []*streamLease
	for l := range ss.held {
		if l.tenant == tenant || l.key == k {
			held = append(held, l)
		}
	}
	ss.mu.Unlock()
	for _, l := range held {
		if !l.alive() {
			l.close()
			freed = true
		}
	}
	return freed
}

// streaming wraps the handler of a stream's route: it takes a slot first
// (429 when past a bound), and, with maxAge, bounds the stream's life.
func (s *Server) streaming(h tenantHandler, maxAge bool) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, t *tenant) {
		key, user := apiKey(r), userOf(r.Context())
		release, refused, k := s.acquireSlot(t, key, user)
		if refused != "" && s.sweepStreams(t.name, k) {
			release, refused, k = s.acquireSlot(t, key, user)
		}
		if refused != "" {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, codeRateLimited, "%s; close one, or try again later", refused)
			return
		}
		l := &streamLease{release: release, cancel: func() {}, slots: &s.streams, tenant: t.name, key: k}
		defer l.end()
		if maxAge {
			var ctx context.Context
			ctx, l.cancel = context.WithTimeout(r.Context(), time.Duration(s.cfg.StreamMaxAge))
			r = r.WithContext(ctx)
		}
		h(w, r.WithContext(context.WithValue(r.Context(), streamLeaseKey{}, l)), t)
	}
}

// streamLease is what a stream holds while it lasts: its slot and the
// bound of its life. A handler that hands its stream to a goroutine of
// its own (detach) ends the lease there; otherwise the handler's return
// does.
type streamLease struct {
	release, cancel func()
	detached        bool
	slots           *streamSlots
	tenant          string   // the stream's tenant
	key             [32]byte // the slot's key (acquireSlot)
	// alive, for a held lease (hold), tells whether the stream's client
	// is still there, without waiting.
	alive func() bool
}

// streamLeaseKey carries a stream's lease in its request's context.
type streamLeaseKey struct{}

// detach takes the lease of the stream of ctx over from its handler: the
// caller ends it (close). nil when ctx has none (a route that takes no
// slot).
func detach(ctx context.Context) *streamLease {
	l, _ := ctx.Value(streamLeaseKey{}).(*streamLease)
	if l != nil {
		l.detached = true
	}
	return l
}

// hold makes a detached lease one that sweepStreams may end, when alive
// says its client left: its cancel must then end the stream.
func (l *streamLease) hold(alive func() bool) {
	if l == nil {
		return
	}
	l.alive = alive
	l.slots.mu.Lock()
	defer l.slots.mu.Unlock()
	if l.slots.held == nil {
		l.slots.held = map[*streamLease]struct{}{}
	}
	l.slots.held[l] = struct{}{}
}

// end gives the slot back and ends the life bound, once the stream is
// over — unless the lease was detached, and this is its handler's return.
func (l *streamLease) end() {
	if l == nil || l.detached {
		return
	}
	l.release()
	l.cancel()
}

// close ends a detached lease (more than once is harmless).
func (l *streamLease) close() {
	if l == nil {
		return
	}
	if l.alive != nil {
		l.slots.mu.Lock()
		delete(l.slots.held, l)
		l.slots.mu.Unlock()
	}
	l.release()
	l.cancel()
}
