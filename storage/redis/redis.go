package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The defaults of [Options].
const (
	DefaultPrefix      = "agentic"
	DefaultTenant      = "default"
	DefaultPageSize    = 1000
	DefaultDialTimeout = 2 * time.Second
	DefaultReadTimeout = 3 * time.Second
	DefaultMaxRetries  = 2
	DefaultWatchBlock  = 2 * time.Second
	// DefaultWatchPoolSize bounds the connections [Open]'s watches hold
	// at once (per node of a cluster).
	DefaultWatchPoolSize = 10000
	// DefaultClusterReload is how often a cluster client reloads the map
	// of slots to nodes (go-redis's own default, 60s, would send a dead
	// primary's slots to it for up to a minute after its replica took
	// over).
	DefaultClusterReload = time.Second
	// DefaultReplicaTimeout bounds the wait for Options.Replicas.
	DefaultReplicaTimeout = time.Second
)

const (
	maxTenantLen = 64
	maxPrefixLen = 128
)

var (
	// ErrCorrupt is matched (errors.Is) by every [*CorruptError].
	ErrCorrupt = errors.New("storage/redis: corrupt stream entry")
	// ErrNotReplicated reports an append that fewer replicas than
	// Options.Replicas acknowledged within Options.ReplicaTimeout: the
	// primary may have it, a failover may lose it.
	ErrNotReplicated = errors.New("storage/redis: not acknowledged by enough replicas")
)

// CorruptError reports a stream entry that Load cannot turn into an event:
// it has no field e, or the field does not decode. Load refuses to skip it,
// since that would silently drop an event.
type CorruptError struct {
	// Key is the session's stream.
	Key string
	// EntryID is the stream entry's id, e.g. "1717243200000-0".
	EntryID string
	// Err is the cause: a *ledger.DecodeError, or an error saying the
	// field is missing.
	Err error
}

// Error returns "storage/redis: stream <key> entry <id>: " followed by the
// cause.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("storage/redis: stream %s entry %s: %v", e.Key, e.EntryID, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrCorrupt] or [storage.ErrCorrupt].
func (e *CorruptError) Is(target error) bool {
	return target == ErrCorrupt || target == storage.ErrCorrupt
}

// Options configures a [Store]. The zero value is the default; a field
// left zero takes the default its documentation ends with, and -1 turns a
// limit off where it says so.
type Options struct {
	// Prefix starts every key of the store (see the package
	// documentation for the layout). It may not contain braces. Default
	// "agentic".
	Prefix string
	// Tenant separates the sessions of several tenants on one Redis: each
	// has its own keys and index, and sessions of one tenant are invisible
	// to a Store of another. At most 64 characters of [A-Za-z0-9._-].
	// Default "default".
	Tenant string
	// PageSize is how many stream entries one XRANGE of Load reads, and
	// how many index members one ZSCAN of ListSessions asks for. Default
	// 1000.
	PageSize int
	// DialTimeout bounds the opening of a connection. [Open] only (a
	// client given to [New] keeps its own settings); it overrides the
	// URL's dial_timeout. Default 2s.
	DialTimeout time.Duration
	// ReadTimeout bounds the wait for a reply (a watch's blocking XREAD
	// is bounded by WatchBlock instead). -1 waits as long as ctx allows.
	// [Open] only; it overrides the URL's read_timeout. Default 3s.
	ReadTimeout time.Duration
	// WriteTimeout bounds the sending of a command. -1 waits as long as
	// ctx allows. [Open] only; it overrides the URL's write_timeout.
	// Default ReadTimeout.
	WriteTimeout time.Duration
	// MaxRetries is how many times a command that failed on the network
	// (or timed out) is tried again, on another connection, after a short
	// backoff; Appends stay idempotent across retries (see the package
	// documentation). -1 tries once. [Open] only; it overrides the URL's
	// max_retries. Default 2.
	MaxRetries int
	// WatchBlock is the longest a watch's XREAD BLOCK waits before it is
	// issued again. Default 2s.
	WatchBlock time.Duration
	// WatchPoolSize bounds the connections the watches of a Store made by
	// [Open] hold at once (per node of a cluster): each watch holds one
	// while it lasts, from a pool of its own, so that watches never wait
	// for the connections of the other calls nor make them wait. A watch
	// past the bound waits for one (and fails after the pool's timeout,
	// then tries again). [Open] only (a Store made by [New] watches on
	// the client's pool); it overrides the URL's watch_pool_size.
	// Default 10000.
	WatchPoolSize int
	// Replicas is how many replicas must have an append before Append
	// returns: the append is followed, on the same connection of the
	// session's primary, by WAIT Replicas ReplicaTimeout, and fails with
	// [ErrNotReplicated] when fewer acknowledge it in time (it may be on
	// the primary: appends are idempotent, and the host records the run
	// as interrupted, resumable). So a failover, which promotes a
	// replica, loses no append that returned. It overrides the URL's
	// wait_replicas. Default 0: an append returns once the primary has
	// it, and Redis replicates it asynchronously.
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas. It overrides the
	// URL's wait_timeout. Default 1s.
	ReplicaTimeout time.Duration
	// ClusterReload is how often a cluster client (redis+cluster://)
	// reloads the map of slots to nodes: after a primary fails over,
	// the calls on its slots fail until the map names its promoted
	// replica, so a failover costs about cluster-node-timeout plus this.
	// [Open] only. Default 1s (one CLUSTER SLOTS a second while calls
	// are made).
	ClusterReload time.Duration
}

// normalize applies the defaults and reports every invalid field.
func (o *Options) normalize() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("storage/redis: options: "+format, args...))
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") || len(o.Prefix) > maxPrefixLen || strings.ContainsFunc(o.Prefix, isControl) {
		bad("prefix %q: want at most %d characters, no braces nor control characters", o.Prefix, maxPrefixLen)
	}
	if o.Tenant == "" {
		o.Tenant = DefaultTenant
	}
	if !validTenant(o.Tenant) {
		bad("tenant %q: want 1 to %d characters of [A-Za-z0-9._-]", o.Tenant, maxTenantLen)
	}
	switch {
	case o.PageSize == 0:
		o.PageSize = DefaultPageSize
	case o.PageSize < 0:
		bad("page size %d is negative", o.PageSize)
	}
	switch {
	case o.DialTimeout == 0:
		o.DialTimeout = DefaultDialTimeout
	case o.DialTimeout < 0:
		bad("dial timeout %v is negative", o.DialTimeout)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"read", &o.ReadTimeout}, {"write", &o.WriteTimeout}} {
		if *d.v < 0 && *d.v != -1 {
			bad("%s timeout %v: want a positive duration, 0 for the default or -1 for none", d.name, *d.v)
		}
	}
	if o.MaxRetries < -1 {
		bad("max retries %d: want a count, 0 for the default or -1 for none", o.MaxRetries)
	}
	switch {
	case o.WatchBlock == 0:
		o.WatchBlock = DefaultWatchBlock
	case o.WatchBlock < time.Millisecond:
		bad("watch block %v: want at least 1ms", o.WatchBlock)
	}
	switch {
	case o.WatchPoolSize == 0:
		o.WatchPoolSize = DefaultWatchPoolSize
	case o.WatchPoolSize < 0:
		bad("watch pool size %d is negative", o.WatchPoolSize)
	}
	if o.Replicas < 0 {
		bad("replicas %d is negative", o.Replicas)
	}
	switch {
	case o.ReplicaTimeout == 0:
		o.ReplicaTimeout = DefaultReplicaTimeout
	case o.ReplicaTimeout < time.Millisecond:
		bad("replica timeout %v: want at least 1ms", o.ReplicaTimeout)
	}
	switch {
	case o.ClusterReload == 0:
		o.ClusterReload = DefaultClusterReload
	case o.ClusterReload < 10*time.Millisecond:
		bad("cluster reload %v: want at least 10ms", o.ClusterReload)
	}
	return errors.Join(errs...)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func validTenant(t string) bool {
	if t == "" || len(t) > maxTenantLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Store keeps session ledgers in Redis streams. It is safe for concurrent
// use, by goroutines of one process and by other Stores (in this process
// or others) on the same Redis, prefix and tenant. The zero value is not
// usable; call [Open] or [New].
type Store struct {
	client goredis.UniversalClient
	owned  bool // Close closes client
	// watchClient is what watches wait on: a client of its own (Open),
	// closed by Close, or client itself (New).
	watchClient goredis.UniversalClient
	prefix      string
	tenant      string
	pageSize    int
	block       time.Duration
	// indexInScript tells that every key lives on one server, so the
	// append script may update the index too.
	indexInScript bool
	// indexed holds sessions this Store added to the index (in a cluster,
	// where Append does): their next batches skip the ZADD. It is a hint
	// only — the script still refuses a session's first batch that was
	// not indexed right before (one deleted since) — and is dropped whole
	// past maxIndexed entries.
	indexed  sync.Map // session id → struct{}
	nIndexed atomic.Int64

	replicas       int           // Options.Replicas
	replicaTimeout time.Duration // Options.ReplicaTimeout

	tokenBase string        // random, unique to this Store
	tokenSeq  atomic.Uint64 // makes each Append's token unique

	closed atomic.Bool
	mu     sync.Mutex // guards watchers' Add against Close's Wait
	stop   context.CancelFunc
	done   context.Context // ends at Close: watches end with it
	wg     sync.WaitGroup  // the watches' goroutines
}

// Open connects to the Redis a URL names and returns a Store over it. The
// Store owns the client: Close closes it. URLs:
//
//	redis://[user:password@]host[:port][/db][?param=value&…]
//	rediss://…                               the same over TLS
//	redis+cluster://[user:password@]host1:port1[,host2:port2…][?…]
//	rediss+cluster://…                       a cluster over TLS
//
// A cluster URL lists seed nodes, comma-separated (more may be given as
// addr=host:port parameters); the client discovers the rest. A host without
// a port has port 6379. The parameters are go-redis's (pool_size,
// read_timeout, client_name, protocol, …; see redis.ParseURL and
// redis.ParseClusterURL); the connection fields of opts, when set,
// override them. Three are the store's own: wait_replicas=N,
// wait_timeout=D and watch_pool_size=N set Options.Replicas,
// Options.ReplicaTimeout and Options.WatchPoolSize, unless opts sets
// them.
//
// Open pings the server (for a cluster, one seed that answers is enough)
// and fails when it does not answer within ctx and the dial and read
// timeouts. It also refuses a redis:// URL that names a node of a cluster,
// whose keys would be spread over other nodes: use redis+cluster:// there.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	rawURL, err := ownParams(rawURL, &opts)
	if err != nil {
		return nil, fmt.Errorf("storage/redis: open %s: %w", redact(rawURL), err)
	}
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	var client, watchClient goredis.UniversalClient
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch scheme {
	case "redis", "rediss":
		o, err := goredis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("storage/redis: open %s: %w", redact(rawURL), err)
		}
		o.DialTimeout = pick(opts.DialTimeout, o.DialTimeout, DefaultDialTimeout)
		o.ReadTimeout = pick(opts.ReadTimeout, o.ReadTimeout, DefaultReadTimeout)
		o.WriteTimeout = pick(opts.WriteTimeout, o.WriteTimeout, o.ReadTimeout)
		o.MaxRetries = pick(opts.MaxRetries, o.MaxRetries, DefaultMaxRetries)
		o.ContextTimeoutEnabled = true
		o.MaintNotificationsConfig = noMaintNotifications()
		client = goredis.NewClient(o)
		wo := *o
		wo.PoolSize, wo.MinIdleConns, wo.MaxIdleConns, wo.ConnMaxIdleTime = opts.WatchPoolSize, 0, 0, watchIdleTime
		watchClient = goredis.NewClient(&wo)
	case "redis+cluster", "rediss+cluster":
		o, err := parseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("storage/redis: open %s: %w", redact(rawURL), err)
		}
		o.DialTimeout = pick(opts.DialTimeout, o.DialTimeout, DefaultDialTimeout)
		o.ReadTimeout = pick(opts.ReadTimeout, o.ReadTimeout, DefaultReadTimeout)
		o.WriteTimeout = pick(opts.WriteTimeout, o.WriteTimeout, o.ReadTimeout)
		o.MaxRetries = pick(opts.MaxRetries, o.MaxRetries, DefaultMaxRetries)
		o.ContextTimeoutEnabled = true
		o.ClusterStateReloadInterval = opts.ClusterReload
		o.MaintNotificationsConfig = noMaintNotifications()
		client = goredis.NewClusterClient(o)
		wo := *o
		wo.PoolSize, wo.MinIdleConns, wo.MaxIdleConns, wo.ConnMaxIdleTime = opts.WatchPoolSize, 0, 0, watchIdleTime
		watchClient = goredis.NewClusterClient(&wo)
	default:
		return nil, fmt.Errorf("storage/redis: open %s: unknown scheme %q (want redis, rediss, redis+cluster or rediss+cluster)", redact(rawURL), scheme)
	}
	s, err := newStore(client, true, opts)
	if err != nil {
		client.Close()
		watchClient.Close()
		return nil, err
	}
	s.watchClient = watchClient
	if err := client.Ping(ctx).Err(); err != nil {
		s.closeClients()
		return nil, fmt.Errorf("storage/redis: open %s: %w", redact(rawURL), err)
	}
	if s.indexInScript {
		// A server that does not answer INFO (a managed service that
		// renamed it) is taken as what the URL says.
		info, err := client.Info(ctx, "cluster").Result()
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			s.closeClients()
			return nil, fmt.Errorf("storage/redis: open %s: the server is a node of a Redis Cluster: use a redis+cluster:// URL", redact(rawURL))
		}
	}
	return s, nil
}

// noMaintNotifications turns go-redis's maintenance notifications off.
// The store does not use them, and in their default mode (auto) a
// server without them (Redis before 8) makes every new connection try
// the handshake, and the first to fail turn the mode off in options a
// watch's sticky connection (Client.Conn) shares under another lock: a
// data race the race detector reports when watches start together.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// ownParams takes the store's own parameters out of a URL's query
// (wait_replicas, wait_timeout, watch_pool_size), into opts where opts
// leaves them unset, and returns the URL go-redis is to parse.
func ownParams(rawURL string, opts *Options) (string, error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return rawURL, err
	}
	if v := q.Get("wait_replicas"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return rawURL, fmt.Errorf("wait_replicas=%q: want a count", v)
		}
		if opts.Replicas == 0 {
			opts.Replicas = n
		}
	}
	if v := q.Get("wait_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return rawURL, fmt.Errorf("wait_timeout=%q: want a duration", v)
		}
		if opts.ReplicaTimeout == 0 {
			opts.ReplicaTimeout = d
		}
	}
	if v := q.Get("watch_pool_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return rawURL, fmt.Errorf("watch_pool_size=%q: want a positive count", v)
		}
		if opts.WatchPoolSize == 0 {
			opts.WatchPoolSize = n
		}
	}
	q.Del("wait_replicas")
	q.Del("wait_timeout")
	q.Del("watch_pool_size")
	if len(q) == 0 {
		return base, nil
	}
	return base + "?" + q.Encode(), nil
}

// pick returns the first of opt (the caller's option) and url (what the
// URL said) that is set, else def.
func pick[T comparable](opt, url, def T) T {
	var zero T
	switch {
	case opt != zero:
		return opt
	case url != zero:
		return url
	}
	return def
}

// New returns a Store over a client the caller configured (a *Client, a
// *ClusterClient, a Sentinel failover client, …). The caller keeps the
// client: Close does not close it. The connection fields of opts are
// ignored. Configure the client with bounded timeouts, and with
// ContextTimeoutEnabled so that ctx deadlines bound each call.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("storage/redis: new: nil client")
	}
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	return newStore(client, false, opts)
}

func newStore(client goredis.UniversalClient, owned bool, opts Options) (*Store, error) {
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("storage/redis: %w", err)
	}
	_, single := client.(*goredis.Client)
	done, stop := context.WithCancel(context.Background())
	return &Store{
		client:         client,
		watchClient:    client,
		owned:          owned,
		prefix:         opts.Prefix,
		tenant:         opts.Tenant,
		pageSize:       opts.PageSize,
		block:          opts.WatchBlock,
		indexInScript:  single,
		replicas:       opts.Replicas,
		replicaTimeout: opts.ReplicaTimeout,
		tokenBase:      hex.EncodeToString(seed[:]) + ":",
		done:           done,
		stop:           stop,
	}, nil
}

// parseClusterURL turns redis+cluster://[u:p@]h1,h2[/0][?q] into
// go-redis's cluster options.
func parseClusterURL(raw string) (*goredis.ClusterOptions, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	base := strings.TrimSuffix(scheme, "+cluster")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "6379")
		}
		addrs = append(addrs, h)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no host")
	}
	path, query, _ := strings.Cut(tail, "?")
	if strings.Contains(query, "#") || strings.Contains(path, "#") {
		return nil, errors.New("a fragment is not allowed")
	}
	switch path {
	case "", "/", "/0":
	default:
		return nil, fmt.Errorf("path %q: a cluster has database 0 only", path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := base + "://" + userinfo + addrs[0]
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return goredis.ParseClusterURL(u)
}

// redact returns the URL without its password, for error messages.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return strconv.Quote(raw)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	return strconv.Quote(scheme + "://" + rest)
}

// eventsKey returns the key of the session's stream.
func (s *Store) eventsKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:events"
}

// tokenKey returns the key of the token of the session's last batch, by
// which a retried append is recognised (in the stream's hash slot).
func (s *Store) tokenKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:token"
}

// requestsKey returns the key of the hash of the session's request ids
// (request id → message id), in the stream's hash slot.
func (s *Store) requestsKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:requests"
}

// leaseKey returns the key of the session's lease.
func (s *Store) leaseKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:lease"
}

// indexKey returns the key of the tenant's session index.
func (s *Store) indexKey() string {
	return s.prefix + ":{" + s.tenant + "}:sessions"
}

// Script error codes: the first word of the error replies the scripts
// return.
const (
	codeLeaseHeld  = "AGENTIC_LEASE_HELD"
	codeLeaseLost  = "AGENTIC_LEASE_LOST"
	codeRaced      = "AGENTIC_REWRITE_RACED"   // replaceScript: the stream changed
	codeNotCounter = "AGENTIC_NOT_COUNTER"     // addWithinScript: the value is no counter
	codeFirst      = "AGENTIC_FIRST_BATCH"     // appendScript: index the session first
	codeChanged    = "AGENTIC_SESSION_CHANGED" // swapScript: the session changed since its version
	codeSeen       = "AGENTIC_REQUEST_SEEN"    // appendScript: the request's message is in the session
)

// queueOwner stands for the owner of an unfenced append that carries only
// queued messages, which a lease does not refuse. Owners never start with
// '!' (AcquireLease refuses them).
const queueOwner = "!queue"

// appendScript appends a batch, atomically and idempotently, after the
// lease check. KEYS: the stream, the lease, the token of the last batch,
// the session's request ids, and (on a single server) the index. ARGV:
// the owner ("" for an unfenced append, queueOwner for one of queued
// messages only), the call's token, the time in ms, the session id, "i"
// when the caller added the session to the index (in a cluster) or "",
// the request id the batch's new message must not share with an earlier
// one ("" for none), the number k of the batch's inputs that carry a
// request id, then k triples of the input's place in the batch (from 1),
// its request id and its message id, then the encoded events. The batch's token is kept in a key of its own, swapped in by one
// SET … GET that returns the previous batch's (reading it back from the
// stream's last entry would copy that entry into the script): a retry of
// a batch that landed finds its own token and appends nothing. The token
// is set before the events: should the script refuse the batch (a request
// id seen, a first batch in a cluster) or the first XADD fail (a key of
// another type), it puts the previous token back, so that a retry is not
// taken for a duplicate. A token key that was missing marks the session's
// first batch (or the first since it was deleted): only then is the
// session added to the index — by the script on a single server; in a
// cluster, where the index lives in another slot, the script refuses a
// first batch (codeFirst, having written nothing) unless the caller says
// it indexed the session, and the caller adds it and runs the script
// again. The request ids live in a hash (request id → the message id and
// the stream entry id of its input, the first kept): a request is seen
// while its entry is in the stream, so that an entry a deletion or a
// replacement by an older build took away (which left the hash as it
// was) refuses nothing. The fenced check is a GET of the lease: a lapsed lease
// reads as missing in a script (Redis runs it at one frozen time), and
// every lease is set with a TTL.
var appendScript = goredis.NewScript(`
local holder = redis.call('GET', KEYS[2])
if ARGV[1] ~= '' and ARGV[1] ~= '` + queueOwner + `' then
  if holder ~= ARGV[1] then
    return redis.error_reply('` + codeLeaseLost + ` the lease is not held by this owner')
  end
elseif holder and ARGV[1] ~= '` + queueOwner + `' then
  return redis.error_reply('` + codeLeaseHeld + ` the session is under a lease: append through it')
end
local prev = redis.call('SET', KEYS[3], ARGV[2], 'GET')
if prev == ARGV[2] then
  return 0
end
local function unset()
  if prev then
    redis.call('SET', KEYS[3], prev)
  else
    redis.call('DEL', KEYS[3])
  end
end
if not prev and not KEYS[5] and ARGV[5] == '' then
  redis.call('DEL', KEYS[3])
  return redis.error_reply('` + codeFirst + ` add the session to the index first')
end
if ARGV[6] ~= '' then
  local seen = redis.call('HGET', KEYS[4], ARGV[6])
  if seen then
    local msg, entry = string.match(seen, '^(.*) (%S+)$')
    if msg and #redis.call('XRANGE', KEYS[1], entry, entry) > 0 then
      unset()
      return redis.error_reply('` + codeSeen + ` ' .. msg)
    end
    redis.call('HDEL', KEYS[4], ARGV[6])
  end
end
local first = 8 + 3 * tonumber(ARGV[7])
local r = redis.pcall('XADD', KEYS[1], '*', 'e', ARGV[first])
if type(r) == 'table' and r.err then
  unset()
  return r
end
local ids = {r}
local n = #ARGV
for i = first + 1, n do
  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'e', ARGV[i])
end
for i = 8, first - 1, 3 do
  redis.call('HSETNX', KEYS[4], ARGV[i + 1], ARGV[i + 2] .. ' ' .. ids[tonumber(ARGV[i])])
end
if KEYS[5] and not prev then
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[4])
end
return n - first + 1
`)

// lastIDScript returns the id of the stream's last entry, or "0-0", without
// sending the entry.
var lastIDScript = goredis.NewScript(`
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last then
  return last[1]
end
return '0-0'
`)

// Append adds the events to the end of the session's stream, atomically
// and in order, in one script. An event the codec refuses fails the call,
// and Redis is not asked. While an owner holds the session's lease it
// fails with an error matching [storage.ErrLeaseHeld] — use the
// [storage.Lease] then — unless every event is a queued message (an input
// without a run id): any host may queue a message into the run another
// host is leading, which folds it in at its next step boundary.
func (s *Store) Append(ctx context.Context, sessionID string, events ...ledger.Event) error {
	owner := queueOwner
	for _, e := range events {
		if e.Kind != ledger.KindInput || e.RunID != "" {
			owner = ""
			break
		}
	}
	return s.append(ctx, sessionID, owner, "", events)
}

// AppendRequest implements [storage.RequestAppender]: Append, unless the
// session holds a message sent under requestID already, checked by the
// append script (see Store's documentation on request ids).
func (s *Store) AppendRequest(ctx context.Context, sessionID, requestID string, events ...ledger.Event) error {
	owner := queueOwner
	for _, e := range events {
		if e.Kind != ledger.KindInput || e.RunID != "" {
			owner = ""
			break
		}
	}
	return s.append(ctx, sessionID, owner, requestID, events)
}

// append is Append, fenced by owner's lease when owner is not empty, and
// refused when requestID is not empty and the session holds a message
// sent under it.
func (s *Store) append(ctx context.Context, sessionID, owner, requestID string, events []ledger.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	if len(events) == 0 {
		return nil
	}
	args := make([]any, 7, 7+len(events))
	args[0] = owner // "" or queueOwner: unfenced
	args[1] = s.tokenBase + strconv.FormatUint(s.tokenSeq.Add(1), 36)
	now := time.Now().UnixMilli()
	args[2] = now
	args[3] = sessionID
	args[4] = "" // the session is not known to be in the index
	args[5] = requestID
	k := 0
	for i, e := range events {
		if e.Kind == ledger.KindInput && e.Input != nil && e.Input.RequestID != "" {
			args = append(args, i+1, e.Input.RequestID, e.Input.MessageID)
			k++
		}
	}
	args[6] = k
	for i, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			return fmt.Errorf("storage/redis: append session %q: event %d of %d: %w", sessionID, i+1, len(events), err)
		}
		args = append(args, b)
	}
	keys := []string{s.eventsKey(sessionID), s.leaseKey(sessionID), s.tokenKey(sessionID), s.requestsKey(sessionID)}
	if s.indexInScript {
		keys = append(keys, s.indexKey())
	}
	run := func() error {
		if s.replicas > 0 {
			return s.runReplicated(ctx, appendScript, keys, args...)
		}
		return appendScript.Run(ctx, s.client, keys, args...).Err()
	}
	// In a cluster the index first, so that a session with events is
	// always listed: before a session's first batch from this Store, and
	// whenever the script finds the batch is the session's first.
	index := func() error {
		if err := s.client.ZAddNX(ctx, s.indexKey(), goredis.Z{Score: float64(now), Member: sessionID}).Err(); err != nil {
			return s.fail(ctx, fmt.Sprintf("append session %q: index", sessionID), err)
		}
		args[4] = "i"
		return nil
	}
	if !s.indexInScript {
		if _, ok := s.indexed.Load(sessionID); !ok {
			if err := index(); err != nil {
				return err
			}
		}
	}
	err := run()
	if err != nil && strings.HasPrefix(err.Error(), codeFirst) {
		if err := index(); err != nil {
			return err
		}
		err = run()
	}
	if err == nil && !s.indexInScript {
		s.rememberIndexed(sessionID)
	}
	if err != nil {
		if msg, ok := strings.CutPrefix(err.Error(), codeSeen+" "); ok {
			return &storage.RequestSeenError{RequestID: requestID, MessageID: msg}
		}
		return s.fail(ctx, fmt.Sprintf("append session %q", sessionID), err)
	}
	return nil
}

// maxIndexed bounds Store.indexed.
const maxIndexed = 1 << 16

// rememberIndexed notes that the session is in the index.
func (s *Store) rememberIndexed(sessionID string) {
	if _, loaded := s.indexed.LoadOrStore(sessionID, struct{}{}); loaded {
		return
	}
	if s.nIndexed.Add(1) > maxIndexed {
		s.indexed.Clear()
		s.nIndexed.Store(0)
	}
}

// runReplicated runs script on the primary of keys[0], then WAIT for
// s.replicas on the same connection (WAIT counts the replicas that have
// the connection's writes), in one pipeline; it fails with
// ErrNotReplicated when fewer acknowledged them. On a cluster, a stale map
// of slots (a failover, a slot moved) is reloaded and the pipeline sent
// once more: the script is idempotent.
func (s *Store) runReplicated(ctx context.Context, script *goredis.Script, keys []string, args ...any) error {
	cluster, _ := s.client.(*goredis.ClusterClient)
	for try := 0; ; try++ {
		var node goredis.Cmdable = s.client
		if cluster != nil {
			n, err := cluster.MasterForKey(ctx, keys[0])
			if err != nil {
				return err
			}
			node = n
		}
		err := s.pipeReplicated(ctx, node, script, keys, args)
		if cluster == nil || try > 0 || !staleSlots(err) {
			return err
		}
		cluster.ReloadState(ctx)
	}
}

// pipeReplicated is one try of runReplicated on node.
func (s *Store) pipeReplicated(ctx context.Context, node goredis.Cmdable, script *goredis.Script, keys []string, args []any) error {
	for _, load := range []bool{false, true} {
		pipe := node.Pipeline()
		var cmd *goredis.Cmd
		if load {
			cmd = script.Eval(ctx, pipe, keys, args...) // the primary lacks the script (a promoted replica)
		} else {
			cmd = script.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", s.replicas, s.replicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil {
			if !load && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				continue
			}
			return err
		}
		n, err := wait.Int64()
		if err != nil {
			return fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(s.replicas) {
			return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.replicas, s.replicaTimeout)
		}
		return nil
	}
	return nil
}

// staleSlots reports whether err says the node no longer serves the slot.
func staleSlots(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK") ||
		goredis.HasErrorPrefix(err, "READONLY") || goredis.HasErrorPrefix(err, "CLUSTERDOWN") ||
		goredis.HasErrorPrefix(err, "TRYAGAIN"))
}

// fail wraps the error of a Redis call made for what (an operation and its
// session), mapping the scripts' error replies to the storage sentinels.
func (s *Store) fail(ctx context.Context, what string, err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, codeLeaseLost):
		return fmt.Errorf("storage/redis: %s: %w", what, storage.ErrLeaseLost)
	case strings.HasPrefix(msg, codeLeaseHeld):
		return fmt.Errorf("storage/redis: %s: %w (append through the lease)", what, storage.ErrLeaseHeld)
	case strings.HasPrefix(msg, codeRaced):
		return fmt.Errorf("storage/redis: %s: %w", what, storage.ErrRewriteRaced)
	case strings.HasPrefix(msg, codeNotCounter):
		return fmt.Errorf("storage/redis: %s: %w", what, storage.ErrNotCounter)
	case strings.HasPrefix(msg, codeChanged):
		return fmt.Errorf("storage/redis: %s: %w", what, storage.ErrSessionChanged)
	case s.closed.Load():
		return fmt.Errorf("storage/redis: %s: %w", what, storage.ErrClosed)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("storage/redis: %s: %w (%v)", what, cerr, err)
	}
	return fmt.Errorf("storage/redis: %s: %w", what, err)
}

// Load returns the session's events in append order, reading the stream
// in pages of [Options.PageSize]; an empty slice when it has none. An entry
// that does not decode fails it with a [*CorruptError].
func (s *Store) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
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
	events := []ledger.Event{}
	err := s.eachEntry(ctx, key, fmt.Sprintf("load session %q", sessionID), func(m goredis.XMessage) error {
		e, err := decodeEntry(key, m)
		if err != nil {
			return fmt.Errorf("storage/redis: load session %q: %w", sessionID, err)
		}
		events = append(events, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// eachEntry calls fn with each entry of the stream key, in order, reading
// it in pages of [Options.PageSize], and stops at fn's first error. what
// names the operation in the errors of the reads.
func (s *Store) eachEntry(ctx context.Context, key, what string, fn func(goredis.XMessage) error) error {
	return s.eachEntryFrom(ctx, key, "-", what, fn)
}

// eachEntryFrom is eachEntry from the entry start on (an XRANGE start).
func (s *Store) eachEntryFrom(ctx context.Context, key, start, what string, fn func(goredis.XMessage) error) error {
	for {
		msgs, err := s.client.XRangeN(ctx, key, start, "+", int64(s.pageSize)).Result()
		if err != nil {
			return s.fail(ctx, what, err)
		}
		for _, m := range msgs {
			if err := fn(m); err != nil {
				return err
			}
		}
		if len(msgs) < s.pageSize {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// entryEvent returns the encoded event of one stream entry.
func entryEvent(key string, m goredis.XMessage) (string, error) {
	v, ok := m.Values["e"].(string)
	if !ok {
		return "", &CorruptError{Key: key, EntryID: m.ID, Err: errors.New(`no field "e"`)}
	}
	return v, nil
}

// decodeEntry returns the event of one stream entry.
func decodeEntry(key string, m goredis.XMessage) (ledger.Event, error) {
	v, err := entryEvent(key, m)
	if err != nil {
		return ledger.Event{}, err
	}
	e, err := ledger.Decode([]byte(v))
	if err != nil {
		return ledger.Event{}, &CorruptError{Key: key, EntryID: m.ID, Err: err}
	}
	return e, nil
}

// ListSessions returns the sessions of the tenant that have events: the
// members of its index whose stream exists, read with ZSCAN.
func (s *Store) ListSessions(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, storage.ErrClosed
	}
	seen := map[string]bool{}
	ids := []string{}
	var cursor uint64
	for {
		page, next, err := s.client.ZScan(ctx, s.indexKey(), cursor, "", int64(s.pageSize)).Result()
		if err != nil {
			return nil, s.fail(ctx, "list sessions", err)
		}
		// ZSCAN returns member, score, member, score…; a member may come
		// twice across pages.
		var fresh []string
		for i := 0; i < len(page); i += 2 {
			if id := page[i]; !seen[id] && storage.ValidSessionID(id) {
				seen[id] = true
				fresh = append(fresh, id)
			}
		}
		if len(fresh) > 0 {
			exists := make([]*goredis.IntCmd, len(fresh))
			_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i, id := range fresh {
					exists[i] = p.Exists(ctx, s.eventsKey(id))
				}
				return nil
			})
			if err != nil {
				return nil, s.fail(ctx, "list sessions", err)
			}
			for i, id := range fresh {
				if exists[i].Val() > 0 {
					ids = append(ids, id)
				}
			}
		}
		if next == 0 {
			return ids, nil
		}
		cursor = next
	}
}

// Close stops the store's watches and, when the Store was opened by
// [Open], closes its client; it returns when the watches' goroutines have
// ended (over a client given to [New], which it leaves open, that may take
// up to [Options.WatchBlock]). After it every method returns
// [storage.ErrClosed]; Close itself may be called again and then returns
// nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.closed.CompareAndSwap(false, true) {
		s.mu.Unlock()
		return nil
	}
	s.stop()
	s.mu.Unlock()
	var err error
	if s.owned {
		err = s.closeClients()
	}
	s.wg.Wait()
	return err
}

// closeClients closes the clients Open made.
func (s *Store) closeClients() error {
	err := s.client.Close()
	if s.watchClient != s.client {
		err = errors.Join(err, s.watchClient.Close())
	}
	if err != nil {
		return fmt.Errorf("storage/redis: close: %w", err)
	}
	return nil
}

func checkID(id string) error {
	if !storage.ValidSessionID(id) {
		return fmt.Errorf("storage/redis: session %q: %w", id, storage.ErrInvalidSessionID)
	}
	return nil
}

var (
	_ storage.Storage        = (*Store)(nil)
	_ storage.Lister         = (*Store)(nil)
	_ storage.Closer         = (*Store)(nil)
	_ storage.Leaser         = (*Store)(nil)
	_ storage.LeaseInspector = (*Store)(nil)
	_ storage.Watcher        = (*Store)(nil)
)
