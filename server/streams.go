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
}

// acquire takes a slot for a stream of tenant t opened with key for the
// end user user (X-Agentic-User; "" for none), or says which bound it is
// past. A stream for an end user counts against that user
// (rate_limit.per_user.streams), one for none against its key
// (rate_limit.streams_per_key).
func (s *Server) acquireStream(t *tenant, key, user string) (release func(), refused string) {
	ss := &s.streams
	k := sha256.Sum256([]byte(key))
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
		return nil, "the server holds its most event streams (max_streams)"
	case ss.perTenant[t.name] >= t.cfg.RateLimit.Streams:
		return nil, "tenant " + t.name + " holds its most event streams (rate_limit.streams)"
	case ss.perKey[k] >= limit:
		return nil, past
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
	}, ""
}

// streaming wraps the handler of a stream's route: it takes a slot first
// (429 when past a bound), and, with maxAge, bounds the stream's life.
func (s *Server) streaming(h tenantHandler, maxAge bool) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, t *tenant) {
		release, refused := s.acquireStream(t, apiKey(r), userOf(r.Context()))
		if refused != "" {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, codeRateLimited, "%s; close one, or try again later", refused)
			return
		}
		defer release()
		if maxAge {
			ctx, cancel := context.WithTimeout(r.Context(), time.Duration(s.cfg.StreamMaxAge))
			defer cancel()
			r = r.WithContext(ctx)
		}
		h(w, r, t)
	}
}
