// Package redis is a [storage.Storage] that keeps each session's ledger in
// a Redis stream, for hosts that share their sessions: several hosts on one
// Redis (a single server, with or without replicas behind Sentinel, or a
// Redis Cluster) see the same ledgers and the same [storage.KV] values.
// Besides [storage.Lister], [storage.Closer], [storage.Deleter],
// [storage.NamespaceLister], [storage.KV], [storage.Snapshotter] and
// [storage.Blobs] (with [storage.BlobScoper]), it implements
// [storage.Leaser], so that one host at a time writes a session and a host
// that lost its lease cannot append, and [storage.Watcher], so that a host
// learns of appends made by another.
//
// It is built on github.com/redis/go-redis/v9 and needs Redis 6.2 or later
// (exclusive XRANGE bounds). [Open] takes a URL; [New] wraps a go-redis
// client the caller configured.
//
// # Key layout
//
// With [Options.Prefix] p (default "agentic") and [Options.Tenant] t
// (default "default"), session s has these keys:
//
//	p:{t:s}:events   a stream: one entry per event, in append order
//	p:{t:s}:lease    a string: the lease holder's owner token, with a TTL
//	p:{t:s}:token    a string: the token of the session's last Append
//	p:{t:s}:requests a hash: field a message's request id, value its
//	                 message id and stream entry id, space-separated (the
//	                 first message of each request id), only once a
//	                 message carries one
//	p:{t:s}:snapshot a hash, only once the host kept a snapshot: fields
//	                 entry (the stream entry id it was taken at), event
//	                 (that entry's event id), sum (the SHA-256 of the
//	                 entry's encoding, hex) and data (see
//	                 [storage.Snapshotter])
//	p:{t:s}:rewrite  a stream, only while [Store.Rewrite] builds the new
//	                 ledger it then renames over the session's stream
//
// and the tenant has one index:
//
//	p:{t}:sessions   a sorted set: member s, score the time of its first
//	                 append (Unix milliseconds, the appending host's clock)
//
// [storage.KV] values (the implementation of Get, Set and Delete) live in
// one hash per namespace n, whose fields are the keys:
//
//	p:kv:{t:hex(n)}  a hash: field key, value the value (HGET, HSET, HDEL;
//	                 each atomic, each idempotent, so retries are safe)
//
// [storage.Blobs] (and each [storage.BlobScoper] scope sc, a tenant's
// [storage.Prefix] view; the store's own blobs have the empty scope) have
// one key per blob and one index per scope, d being the digest's hex:
//
//	p:blob:{t:hex(sc):d}  a string: the blob's bytes, in a slot of its own
//	                      so that blobs spread over a cluster's nodes
//	p:{t}:blobs:hex(sc)   a hash: field d, value "<Unix ms> <size>", the
//	                      blob's Stored time (the putting host's clock)
//
// PutBlob writes the index entry first (HSET), then the bytes (SET, skipped
// when the key exists, so bytes already stored are not sent again);
// DeleteBlob deletes the bytes, then the entry; ListBlobs reads the index
// (HSCAN). Each command is idempotent. A put that failed between its two
// commands leaves an entry without bytes: GetBlob finds the blob missing,
// and a sweep of unreferenced blobs removes the entry.
//
// The braces are Redis Cluster hash tags: a session's stream, lease and
// token live in one slot, so a script may use them together. Prefixes may not contain braces,
// and tenants are at most 64 characters of [A-Za-z0-9._-] (no colon, so
// that no tenant and session pair names another's keys).
//
// A stream entry has one field e, the event's encoding by [ledger.Encode].
// (Earlier versions gave the last entry of each Append a second field b,
// its token: readers ignore it, and [Store.Rewrite] keeps it.) Entry ids
// are Redis's own (the server's time and a sequence), increasing; they are
// not the events' ids.
// Streams are never trimmed and keys never expire, except leases.
//
// # Appending
//
// Append encodes the whole batch first (an event the codec refuses fails
// the call, and Redis is not asked), then runs one Lua script that XADDs
// the events in order: Redis runs a script atomically, so the batch becomes
// visible whole, and its effects reach replicas and the append-only file
// wrapped in MULTI/EXEC, so that a replica or a restart from a torn
// append-only file (aof-load-truncated) also sees the batch whole or not at
// all.
//
// The same script first checks the session's lease: an unfenced Append
// fails with an error matching [storage.ErrLeaseHeld] while any owner holds
// the lease (a session under a lease takes appends only through its
// [storage.Lease], so a host that does not use leases cannot write behind a
// leaseholder's back) — except a batch of queued messages only (inputs
// without a run id), which any host may add for the leaseholder's run to
// fold in — and a fenced one (Lease.Append) fails with
// [storage.ErrLeaseLost] unless its owner holds the lease.
//
// # Retries
//
// go-redis retries a command after a network error or a timeout, which may
// strike after Redis ran the script but before its reply arrived. So that a
// retried Append is not appended twice, the script is idempotent: it
// swaps the call's token into the session's token key (SET … GET), and
// when the key held that token already, the batch is already there and the
// script does nothing. (The token has a key of its own so that the
// check reads a few bytes, not the stream's last entry, however large.)
// (The host appends to a session from one place at a time, so a retry
// finds its own batch last.) An Append that
// returns an error may nevertheless have happened, when Redis ran it and
// the connection then failed on every try: what a network makes ambiguous,
// no client can decide. The host reconciles on its next Load.
//
// # Request ids
//
// Every append records, in the session's requests hash, the request id and
// message id of each input event of the batch that carries a request id
// (HSETNX: the first message of a request id stays). [Store.AppendRequest]
// and [Lease.AppendRequest] (the [storage.RequestAppender] the host uses to
// append a new message) check that hash in the same script, before the
// write: a message whose request id the session holds already is not
// appended, and the call fails with a [*storage.RequestSeenError] naming
// the message that is. The host looks in the ledger first, but its look and
// its append are two steps: without the check, two hosts given one request
// (a client's retry while its first try was in doubt — an append whose
// replicas did not acknowledge it in time had landed — or a load that did
// not yet see the first) appended it twice. Messages appended by a build
// older than the hash are not in it: the host's look in the ledger finds
// them. DeleteSession deletes the hash with the session, and
// ReplaceSession builds the replacement's beside its stream and swaps both
// in at once. A request counts as seen only while its message's entry is
// in the stream (one XRANGE of that entry id), so that an entry that an
// older build's deletion or replacement took away, leaving the hash, does
// not refuse a new message.
//
// # The session index and clusters
//
// ListSessions reads the index, not the keyspace: SCAN over a large
// keyspace (every node of a cluster) is slow, and the index is cheap. In
// a cluster, the index lives in another slot than most sessions (it is per
// tenant, and sessions spread over every node), so the append script cannot
// update it: Redis refuses scripts whose keys span slots. There, Append
// adds the session to the index with a ZADD before the first batch it
// writes to the session (it remembers the sessions it indexed), the
// script refuses a session's first batch (the one that finds no token key:
// a new session, or one deleted since) unless a ZADD came right before,
// in which case Append makes one and runs the script again, and
// ListSessions lists only the members whose stream exists. So a session
// with events is always listed (its ZADD preceded its first event, even if
// the process died in between), a session whose first Append failed after
// its ZADD is not (it stays in the index, unseen), and every later batch
// takes one round trip. On a single server
// (a go-redis *Client, Sentinel included) the script updates the index
// itself, in the same atomic step, on the session's first Append (the one
// that finds no token key; DeleteSession removes the keys and the index
// member in one MULTI/EXEC, so the next Append after a deletion is a first
// again); ListSessions filters the same way, which also hides sessions
// whose stream an operator deleted. Neither way lags: when Append returns
// nil, ListSessions lists the session.
//
// # Loading
//
// Load reads the stream with XRANGE in pages of [Options.PageSize] entries
// (each page starting after the last entry read), so that a long session
// does not block Redis; because batches are added atomically, the pages
// together hold whole batches. An entry that does not decode fails the Load
// with a [*CorruptError] naming the stream and the entry id.
//
// # Leases and fencing
//
// [Store.AcquireLease] sets the lease key to the owner's token with SET NX
// PX semantics (in a script that also lets the current owner acquire again:
// go-redis may retry an acquisition whose reply was lost). Renew and
// Release are compare-and-set scripts on the token: Renew extends the TTL
// only if the key still holds the owner's token, Release deletes it only
// then. A fenced Append runs the append script with the owner's token, and
// the script appends only when the lease key holds that token and has a
// TTL left, in the same atomic step as the XADDs. Expiry is Redis's: a
// holder that paused past its TTL finds, on its next Append, that it lost
// the lease, and nothing it sends after that is appended, however its own
// clock disagrees. The guarantee is the primary's: Redis replicates
// asynchronously, so a failover may promote a replica that had not yet
// received a lease (or the last appends) the old primary acknowledged, and
// another owner may then acquire the lease. A lost lease is harmless (the
// holder's next append is refused by the new primary's copy of the
// script's check); a lost append is not: with [Options.Replicas] (the URL's
// wait_replicas), each append is followed by WAIT on the same connection,
// and returns only once that many replicas have it ([ErrNotReplicated]
// otherwise).
//
// On a cluster, the client reloads its map of slots every
// [Options.ClusterReload] (1s), so that after a failover the calls on a
// dead primary's slots reach its promoted replica within about a second of
// the promotion; a call that meets MOVED, ASK or READONLY meanwhile is sent
// again to the node the cluster names.
//
// # Watching
//
// [Store.Watch] resolves the stream's last entry id, then runs a goroutine
// that waits on XREAD BLOCK for entries after it (at most
// [Options.WatchBlock] at a time, then again) and signals the channel after
// each wake-up with a non-blocking send into a buffer of one. On an error
// it reconnects with a backoff from 50 ms to 5 s, resuming from the last id
// it saw, so no append is missed across a reconnection.
//
// Each watch holds one connection while it waits. A Store made by [Open]
// takes them from a pool of its own ([Options.WatchPoolSize], the
// watch_pool_size URL parameter; on a cluster, from the pool of the node
// that serves the session), so that the watches of a host following many
// sessions never make its appends wait for a connection; and when a
// watch's ctx ends, a CLIENT UNBLOCK (sent through the command pool) ends
// its XREAD at once, so a host holds a connection for each watch open,
// not for each opened in the last WatchBlock. A Store made by [New]
// watches on the client's own pool: size it (PoolSize) for the watches a
// host keeps open beside its other calls.
//
// # Durability and failures
//
// When Append returns nil, the events are in Redis's memory, and as durable
// as the server's persistence makes them: with appendonly yes and
// appendfsync always, they survive a crash of the server; with everysec,
// up to a second of them may be lost; without persistence, a restart loses
// everything. A dead or unreachable server makes calls fail promptly with
// errors naming the operation and the session ("storage/redis: append
// session "s": …"): connections are dialled within [Options.DialTimeout],
// replies awaited within [Options.ReadTimeout], and tried at most
// [Options.MaxRetries] more times; a ctx deadline shortens all of them.
// With the defaults, a call to a server that refuses connections fails in
// about a second and a half (go-redis also redials a few times within each
// try), and one to a server that hangs in about ten seconds. The client
// reconnects by itself when the server is back.
//
// go-redis writes some connection-pool events to its own logger (standard
// error by default), benign ones included (a connection closed while a
// watch used it, at Close). Route them with SetLogger of
// github.com/redis/go-redis/v9; the agentic-host command sends them to its
// debug log.
package redis
