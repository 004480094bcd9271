package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"unicode"

	"golang.org/x/time/rate"
)

// End users: an application that serves many people with one of the
// tenant's keys names the person a request is for in X-Agentic-User, and
// rate_limit.per_user bounds each person's runs in flight and requests
// beside the tenant's own bounds, so that one person cannot take the
// tenant's whole share.

// userHeader names the end user a request is for.
const userHeader = "X-Agentic-User"

// maxUserBytes bounds an end user's name.
const maxUserBytes = 128

// maxUsersTracked bounds the end users whose limiters and places a tenant
// keeps; past it, those with nothing in flight and a full bucket are
// forgotten.
const maxUsersTracked = 10000

// PerUserConfig bounds each end user of a tenant (X-Agentic-User).
type PerUserConfig struct {
	// ConcurrentRuns bounds one end user's runs in flight in this host
	// (429 past it). Default: 0, no bound.
	ConcurrentRuns int `yaml:"concurrent_runs"`
	// RequestsPerSecond bounds one end user's API requests (token
	// bucket, 429 past it). Default: 0, no bound.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is the bucket's size. Default: 0, which means twice
	// RequestsPerSecond (at least 1).
	Burst int `yaml:"burst"`
	// Streams bounds one end user's open event streams in this host (429
	// past it). A stream whose request names an end user counts against
	// that user, not against its key's streams_per_key: a backend that
	// serves all its users with one key is bounded per user. Default: 0,
	// which means rate_limit.streams_per_key.
	Streams int `yaml:"streams"`
}

// validUser reports whether u may name an end user: 1 to 128 bytes of
// printable characters, no space.
func validUser(u string) bool {
	if u == "" || len(u) > maxUserBytes {
		return false
	}
	for _, r := range u {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// userKey carries a request's end user in its context, for admission.
type userKey struct{}

// userOf returns the end user a request's context names, "" for none.
func userOf(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// users is a tenant's end users' limiters and places.
type users struct {
	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	slots    map[string]*runSlots
}

// limiter returns the end user's request bucket under cfg.
func (us *users) limiter(user string, cfg PerUserConfig) *rate.Limiter {
	us.mu.Lock()
	defer us.mu.Unlock()
	if us.limiters == nil {
		us.limiters = map[string]*rate.Limiter{}
	}
	l := us.limiters[user]
	if l == nil {
		us.forgetIdleLocked()
		burst := cfg.Burst
		if burst == 0 {
			burst = max(int(2*cfg.RequestsPerSecond), 1)
		}
		l = rate.NewLimiter(rate.Limit(cfg.RequestsPerSecond), burst)
		us.limiters[user] = l
	}
	return l
}

// slotsOf returns the end user's places for runs.
func (us *users) slotsOf(user string) *runSlots {
	us.mu.Lock()
	defer us.mu.Unlock()
	if us.slots == nil {
		us.slots = map[string]*runSlots{}
	}
	rs := us.slots[user]
	if rs == nil {
		us.forgetIdleLocked()
		rs = &runSlots{}
		us.slots[user] = rs
	}
	return rs
}

// forgetIdleLocked bounds the end users tracked: once maxUsersTracked are,
// it forgets down to half of them — first the buckets that refilled, then
// any bucket (a forgotten user starts again with a full one: flooding
// names costs the flooder the tenant's rate, and resets no one's bound on
// runs) — and the places of users with no admission in progress (their
// runs in flight are counted afresh, from the host, on their next run).
// Halving keeps the sweeps' cost constant per user added.
func (us *users) forgetIdleLocked() {
	if len(us.limiters)+len(us.slots) < maxUsersTracked {
		return
	}
	for u, rs := range us.slots {
		rs.mu.Lock()
		idle := len(rs.queue) == 0
		for _, admitting := range rs.sessions {
			idle = idle && admitting == 0
		}
		rs.mu.Unlock()
		if idle {
			delete(us.slots, u)
		}
	}
	keep := maxUsersTracked/2 - len(us.slots)
	for u, l := range us.limiters {
		if l.Tokens() >= float64(l.Burst()) {
			delete(us.limiters, u)
		}
	}
	for u := range us.limiters {
		if len(us.limiters) <= keep {
			break
		}
		delete(us.limiters, u)
	}
}

// userRequest checks a request's end user against the tenant's
// rate_limit.per_user: it answers a refusal and returns false, or returns
// the request with the user in its context. The user is the one its key is
// bound to (keyUser), else the one X-Agentic-User names; a header naming
// another user than the key's is refused (403), so that a person holding
// a key of their own cannot spend another's allowance.
func (t *tenant) userRequest(w http.ResponseWriter, r *http.Request, keyUser string) (*http.Request, bool) {
	u := r.Header.Get(userHeader)
	if u != "" && !validUser(u) {
		writeError(w, http.StatusBadRequest, codeInvalid, "header %s: want 1 to %d bytes of printable characters without spaces", userHeader, maxUserBytes)
		return nil, false
	}
	if keyUser != "" {
		if u != "" && u != keyUser {
			writeError(w, http.StatusForbidden, codeForbidden, "the API key is bound to user %s; header %s names %s", keyUser, userHeader, u)
			return nil, false
		}
		u = keyUser
	}
	if u == "" {
		return r, true
	}
	if pu := t.cfg.RateLimit.PerUser; pu != nil && pu.RequestsPerSecond > 0 && !t.users.limiter(u, *pu).Allow() {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeRateLimited, "user %s of tenant %s is past its rate limit of %g requests a second (rate_limit.per_user.requests_per_second)", u, t.name, pu.RequestsPerSecond)
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, u)), true
}

// admitUser holds a place for a run of session id under the end user's
// bound (rate_limit.per_user.concurrent_runs), when the request names one.
func (t *tenant) admitUser(ctx context.Context, id string) (release func(), no *admitRefusal) {
	u := userOf(ctx)
	pu := t.cfg.RateLimit.PerUser
	if u == "" || pu == nil || pu.ConcurrentRuns <= 0 {
		return func() {}, nil
	}
	release, ok := t.users.slotsOf(u).reserve(t.host, id, pu.ConcurrentRuns)
	if !ok {
		return nil, &admitRefusal{status: http.StatusTooManyRequests, code: codeRateLimited, retry: true,
			message: fmt.Sprintf("user %s of tenant %s has %d runs in flight, its limit (rate_limit.per_user.concurrent_runs)", u, t.name, pu.ConcurrentRuns)}
	}
	return release, nil
}
