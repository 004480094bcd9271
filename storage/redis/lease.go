package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// acquireScript takes the lease (SET NX PX), or extends it when the owner
// already holds it, so that a retried acquisition whose first reply was
// lost succeeds. KEYS: the lease. ARGV: the owner, the ttl in ms. It
// returns {1} when the owner holds the lease, else {0, the holder's
// remaining ms, the holder}.
var acquireScript = goredis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0, redis.call('PTTL', KEYS[1]), holder}
`)

// renewScript extends the lease only while the owner holds it: 1 if so,
// else 0. KEYS: the lease. ARGV: the owner, the ttl in ms.
var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the lease only while the owner holds it. KEYS: the
// lease. ARGV: the owner.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// holderScript reads a lease. KEYS: the lease. It returns {holder, its
// remaining ms}, or {} when nobody holds it.
var holderScript = goredis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if not holder then
  return {}
end
return {holder, redis.call('PTTL', KEYS[1])}
`)

// LeaseHolder returns the owner that holds the session's lease and how
// long it has left, or "" when nobody holds it.
func (s *Store) LeaseHolder(ctx context.Context, sessionID string) (string, time.Duration, error) {
	if err := checkID(sessionID); err != nil {
		return "", 0, err
	}
	if s.closed.Load() {
		return "", 0, storage.ErrClosed
	}
	what := fmt.Sprintf("read the lease of session %q", sessionID)
	res, err := holderScript.Run(ctx, s.client, []string{s.leaseKey(sessionID)}).Slice()
	if err != nil {
		return "", 0, s.fail(ctx, what, err)
	}
	if len(res) < 2 {
		return "", 0, nil
	}
	holder, _ := res[0].(string)
	ms, _ := res[1].(int64)
	return holder, time.Duration(max(ms, 0)) * time.Millisecond, nil
}

// AcquireLease takes the session's lease for ttl (at least a millisecond,
// Redis's resolution) on behalf of owner, or fails with a
// [*storage.LeaseHeldError] (matching [storage.ErrLeaseHeld]) that names
// the holder and tells when its lease expires. An
// owner that holds the lease already gets it again, extended to ttl. The
// lease is a key with a TTL (see the package documentation); the returned
// [*Lease] renews, releases and appends through it.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (storage.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, err
	}
	switch {
	case owner == "":
		return nil, fmt.Errorf("storage/redis: acquire lease of session %q: empty owner", sessionID)
	case strings.HasPrefix(owner, "!"):
		return nil, fmt.Errorf("storage/redis: acquire lease of session %q: owner %q starts with '!', which is reserved", sessionID, owner)
	case ttl < time.Millisecond:
		return nil, fmt.Errorf("storage/redis: acquire lease of session %q: ttl %v is below Redis's resolution of 1ms", sessionID, ttl)
	}
	if s.closed.Load() {
		return nil, storage.ErrClosed
	}
	what := fmt.Sprintf("acquire lease of session %q", sessionID)
	key := s.leaseKey(sessionID)
	res, err := acquireScript.Run(ctx, s.client, []string{key}, owner, ttl.Milliseconds()).Slice()
	if err != nil {
		return nil, s.fail(ctx, what, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("storage/redis: %s: unexpected reply %v", what, res)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		held := &storage.LeaseHeldError{Session: sessionID, Holder: "another owner"}
		if len(res) > 1 {
			if ms, _ := res[1].(int64); ms > 0 {
				held.Left = time.Duration(ms) * time.Millisecond
			}
		}
		if len(res) > 2 {
			if holder, _ := res[2].(string); holder != "" {
				held.Holder = holder
			}
		}
		return nil, fmt.Errorf("storage/redis: %s: %w", what, held)
	}
	return &Lease{store: s, session: sessionID, owner: owner, ttl: ttl, key: key}, nil
}

// Lease is one owner's hold on a session of a [Store], from
// [Store.AcquireLease]. It is safe for concurrent use.
type Lease struct {
	store   *Store
	session string
	owner   string
	ttl     time.Duration
	key     string
}

// Session returns the id of the session the lease is on.
func (l *Lease) Session() string { return l.session }

// Owner returns the owner token the lease was acquired with.
func (l *Lease) Owner() string { return l.owner }

// TTL returns the lease's time to live, to which Renew extends it.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Renew extends the lease to its ttl from now, if the owner still holds
// it; else it fails with an error matching [storage.ErrLeaseLost].
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	what := fmt.Sprintf("renew lease of session %q", l.session)
	n, err := renewScript.Run(ctx, l.store.client, []string{l.key}, l.owner, l.ttl.Milliseconds()).Int64()
	if err != nil {
		return l.store.fail(ctx, what, err)
	}
	if n != 1 {
		return fmt.Errorf("storage/redis: %s: %w (it expired or another owner took it)", what, storage.ErrLeaseLost)
	}
	return nil
}

// Release deletes the lease if the owner still holds it, so that another
// owner may acquire it at once; it returns nil when the lease was already
// lost.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := releaseScript.Run(ctx, l.store.client, []string{l.key}, l.owner).Err(); err != nil {
		return l.store.fail(ctx, fmt.Sprintf("release lease of session %q", l.session), err)
	}
	return nil
}

// Append appends the events to the lease's session like [Store.Append],
// but only while the owner holds the lease (its key holds the owner's
// token and has a TTL left), checked by the append script itself; else it
// fails with an error matching [storage.ErrLeaseLost], and nothing was
// appended.
func (l *Lease) Append(ctx context.Context, events ...ledger.Event) error {
	return l.store.append(ctx, l.session, l.owner, "", events)
}

// AppendRequest implements [storage.LeaseRequestAppender]: Append, unless
// the session holds a message sent under requestID already (see
// [Store.AppendRequest]).
func (l *Lease) AppendRequest(ctx context.Context, requestID string, events ...ledger.Event) error {
	return l.store.append(ctx, l.session, l.owner, requestID, events)
}

func (l *Lease) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.store.closed.Load() {
		return storage.ErrClosed
	}
	return nil
}

var _ storage.Lease = (*Lease)(nil)
