// Package storage defines the contract between the host and the stores that
// keep session ledgers: a small required interface, [Storage], and optional
// ones found by type assertion, each with a documented fallback.
//
// The host owns everything above the contract (ids, ordering of its own
// appends, retries, projections); a store only keeps events. Adapters live
// in subpackages: storage/memory, storage/file, and later storage/redis.
// Every adapter must pass the conformance suite in storage/storagetest.
//
// # The contract
//
// A session is an ordered, append-only sequence of [ledger.Event] values
// named by a session id. Implementations of [Storage] must guarantee:
//
//   - Durability. When Append returns nil, the events are durable to the
//     adapter's documented degree (memory: for the life of the process;
//     file: across a crash of the process, and across power loss when
//     fsync is on; redis: as durable as the server's persistence). The host
//     acknowledges a user only after Append returned nil.
//   - Atomic batches. The events of one Append call become visible
//     together, in the order given, or not at all. A failed Append (non-nil
//     error) may be retried by the host; an adapter must not leave a partial
//     batch visible, and a torn batch found after a crash is dropped whole.
//   - Read-your-writes. Load issued after an Append returned nil sees the
//     appended events, from any goroutine of the same process (and, for a
//     shared store, from any process).
//   - Order. Load returns a session's events in append order. Events of
//     one session never reorder; sessions are independent of one another.
//   - Verbatim round-trip. Load returns events equal to those appended:
//     the same ids, times, texts and binary bytes. Stores keep events in
//     the [ledger] codec's encoding (ledger.Encode / ledger.Decode).
//   - One writer per session. The host appends to a session from one
//     goroutine at a time; a store need not serialise concurrent appends to
//     the same session, but must allow concurrent appends to different
//     sessions. Across processes, stores that support several hosts
//     enforce this with a lease (an optional interface, see the redis
//     adapter).
//
// Load of a session that has no events returns an empty slice and a nil
// error: a missing session is a value, not a failure. An Append of no events
// is a no-op that returns nil and creates no session. Both methods return
// [ErrInvalidSessionID] for an id the store cannot keep, and honour ctx:
// when it is done before the operation happened, they return ctx.Err() and
// the operation did not happen (so does ListSessions).
//
// Ownership: Append keeps no reference to the caller's events or their
// slices, and the events Load returns belong to the caller. Close is
// idempotent.
package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Storage keeps session ledgers. See the package documentation for the
// guarantees every implementation gives.
type Storage interface {
	// Append adds events to the end of the session's ledger, atomically
	// and in order. It validates nothing beyond what encoding requires:
	// the host appends only events that ledger.Validate accepts.
	Append(ctx context.Context, sessionID string, events ...ledger.Event) error
	// Load returns all events of the session in append order; an empty
	// slice when the session has none.
	Load(ctx context.Context, sessionID string) ([]ledger.Event, error)
}

// Lister is implemented by stores that can enumerate their sessions. The host
// uses it to find interrupted runs at boot; without it, only sessions named
// explicitly can be resumed.
type Lister interface {
	// ListSessions returns the ids of every session that has at least one
	// event, in no particular order.
	ListSessions(ctx context.Context) ([]string, error)
}

// Closer is implemented by stores that hold resources. The host does not
// close a store it was given; the code that opened it does.
type Closer interface {
	Close() error
}

// Leaser is implemented by stores that several hosts share: a lease makes
// one host the only writer of a session, and its fenced Append refuses the
// events of a host whose lease has expired or been taken, so that a host
// that stalled past its lease (a long GC pause, a partition) cannot append
// behind its successor's back. Without it, the host falls back to its
// in-process lock, which is correct only while one host uses the store.
type Leaser interface {
	// AcquireLease takes the session's lease for ttl on behalf of owner
	// (a random token per host), or fails with [ErrLeaseHeld] while
	// another owner holds it. An owner that already holds the lease gets
	// it again, extended to ttl from now. The session need not have
	// events. A ttl the store cannot keep (zero, negative, or below its
	// resolution) is an error.
	AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (Lease, error)
}

// LeaseInspector is implemented by Leasers that can tell who holds a
// session's lease without taking it: the host's [Session.Status] uses it to
// tell a run another host leads (running) from one whose host died
// (interrupted). Without it, a host takes a run it does not run itself for
// interrupted.
type LeaseInspector interface {
	// LeaseHolder returns the owner holding the session's lease and how
	// long it runs unless renewed; holder is "" when nobody holds it.
	LeaseHolder(ctx context.Context, sessionID string) (holder string, left time.Duration, err error)
}

// Lease is one owner's hold on a session, from [Leaser.AcquireLease]. The
// store, not the holder's clock, decides when it expires: the holder must
// Renew it well within its ttl, and learns that it lost it from
// [ErrLeaseLost]. A Lease is safe for concurrent use.
type Lease interface {
	// Renew extends the lease to its ttl from now. It fails with
	// [ErrLeaseLost] when the lease expired or was taken by another
	// owner (who may have appended since): the holder must stop writing
	// and reload the session before it acquires the lease again.
	Renew(ctx context.Context) error
	// Release gives the lease up if this owner still holds it, so that
	// another owner may acquire it at once. It returns nil when the lease
	// was already lost.
	Release(ctx context.Context) error
	// Append is [Storage.Append] fenced by the lease: it appends the
	// events atomically, in order, only while the lease is held by this
	// owner, checked in the same atomic step as the write. Otherwise it
	// fails with [ErrLeaseLost] and nothing was appended.
	Append(ctx context.Context, events ...ledger.Event) error
}

// RequestAppender is implemented by stores that several hosts share (see
// [Leaser]) and can append a new message only while the session holds no
// message sent under the same request id, checked in the same atomic step
// as the write. The host looks for a message's request id in the ledger
// before it appends the message, but on a shared store that look and the
// append are two steps: two hosts given one request (a client's retry
// while its first try was in doubt, a load that did not yet see the
// first) could both append it. Without it, the host appends after its
// look, and a message appended twice is read as one ([ledger.Aliases]).
//
// Such a store records the request id and message id of every input
// event it appends, by any method (the first message of a request id is
// kept), and forgets them with the session. A view of another store (see
// [Prefix]) may implement it and fail with errors.ErrUnsupported when the
// store under it does not: the caller then appends as it would without.
type RequestAppender interface {
	// AppendRequest is [Storage.Append] of a batch that holds a new
	// message sent under requestID, unless the session already holds an
	// input event with that request id: then nothing is appended and it
	// fails with a [*RequestSeenError] naming that input's message id.
	// An append retried inside the store (its first try's outcome in
	// doubt) is recognised as the same append, not as seen.
	AppendRequest(ctx context.Context, sessionID, requestID string, events ...ledger.Event) error
}

// LeaseRequestAppender is implemented by the leases of a
// [RequestAppender]: AppendRequest is [Lease.Append] with the check of
// [RequestAppender.AppendRequest] in the same atomic step.
type LeaseRequestAppender interface {
	AppendRequest(ctx context.Context, requestID string, events ...ledger.Event) error
}

// Snapshotter is implemented by stores that keep, beside a session's
// ledger, one snapshot of it: bytes the host writes, opaque to the store
// (what answering and resuming read from the events up to one event), so
// that a load reads the snapshot and only the events after that event,
// not the whole ledger. The ledger stays the truth: a snapshot names the
// event it was taken at, and a load that does not find that event where
// the snapshot put it (the ledger was replaced, rewritten, truncated by a
// recovery, or the snapshot damaged) drops the snapshot and reads the
// whole ledger. A store forgets a session's snapshot whenever it deletes,
// replaces or rewrites the ledger.
//
// A view of another store (see [Prefix]) implements it and fails with
// errors.ErrUnsupported when the store under it does not: the caller then
// loads the whole ledger.
type Snapshotter interface {
	// PutSnapshot keeps data as the session's snapshot taken at the event
	// whose id is eventID (data describes the events up to and including
	// it), in place of the one before; a snapshot's writer may be any
	// host, and a later snapshot may be taken at an earlier event. The
	// event must be among the session's last [MaxSnapshotLag] events;
	// otherwise nothing is kept and it fails with [ErrSnapshotPoint].
	// data holds at most [MaxSnapshotBytes]. The invalid-id and ctx rules
	// of [Storage] apply.
	PutSnapshot(ctx context.Context, sessionID, eventID string, data []byte) error
	// LoadSnapshot returns the session's snapshot, the id of the event it
	// was taken at, and the events after that event, in order: what
	// [Storage.Load] returns after it. Without a snapshot, or with one
	// whose event is not where it was taken, data is nil, eventID "" and
	// events the whole ledger, exactly as Load. Its errors are Load's.
	LoadSnapshot(ctx context.Context, sessionID string) (data []byte, eventID string, events []ledger.Event, err error)
}

// MaxSnapshotBytes bounds a snapshot's data (see [Snapshotter]).
const MaxSnapshotBytes = 16 << 20

// MaxSnapshotLag is how far back from a session's last event a snapshot
// may be taken (see [Snapshotter]): the store finds the event by looking
// back from the end.
const MaxSnapshotLag = 4096

// Watcher is implemented by stores that can wake a host when a session
// receives events from any host (or any handle on the same backend), so
// that a host serving a session's readers learns of appends it did not
// make. Without it, the host sees only the appends it made itself.
type Watcher interface {
	// Watch reports appends to the session made after Watch returned: the
	// channel receives a value after each, coalesced (several appends
	// may yield one value; sends never block the store), and it is closed
	// when ctx ends or the store is closed. A value carries no events: the
	// receiver loads the session to see what changed. A value may also
	// come without a new append (for instance after the store reconnected
	// to its backend), so receivers must tolerate a load that finds
	// nothing new.
	Watch(ctx context.Context, sessionID string) (<-chan struct{}, error)
}

// Rewriter is implemented by stores whose ledgers can be rewritten in
// place, below the codec: agentic-host migrate uses it to bring ledgers
// written by an older codec version to the current one
// ([ledger.Upgrade]). Without it, a store's ledgers cannot be migrated.
type Rewriter interface {
	// Rewrite passes the stored encoding of each of the session's events,
	// in order, to fn, and replaces each with what fn returns, keeping the
	// events' order and their batches (the events of one Append stay one
	// batch). When fn changed nothing, or with dryRun, nothing is
	// written; otherwise the session's ledger is replaced whole, in one
	// atomic step: a crash leaves the old ledger or the new one, never a
	// mix. When fn fails, Rewrite fails with its error, naming the event,
	// and nothing is written. The bytes fn gets are its own only for the
	// call.
	//
	// Rewrite is meant for an offline tool, with the hosts that use the
	// store stopped. It refuses a session whose lease another owner holds
	// ([ErrLeaseHeld]) in stores that lease sessions, and one appended to
	// while it was being rewritten ([ErrRewriteRaced]; it may be tried
	// again). The ctx rule of [Storage] applies.
	Rewrite(ctx context.Context, sessionID string, fn func(event []byte) ([]byte, error), dryRun bool) (RewriteStats, error)
}

// Deleter is implemented by stores that can delete a session: the
// operator's way to remove data (a user's request to be forgotten, a
// tenant that leaves, retention). Without it, a store's sessions can only
// be removed by hand, below the store.
type Deleter interface {
	// DeleteSession removes the session's events and everything the
	// store keeps for it (its lease, the token of its last batch, what a
	// watch of it needs), so that afterwards Load returns no events,
	// ListSessions does not list it, and its id names no data left in
	// the backend; a later Append starts a new ledger under the id.
	// Deleting a session that has no events is a no-op that returns nil.
	// It removes no [KV] value and no blob: those belong to no session
	// in the store's eyes.
	//
	// DeleteSession does not look at the session's lease: whether a
	// session may go (no run in progress, no other host leading it) is
	// the caller's decision, made before (the host's own deletion checks both). An
	// Append that runs concurrently with it may land before the deletion
	// (and be deleted) or after it (and start the new ledger). The
	// invalid-id and ctx rules of [Storage] apply.
	DeleteSession(ctx context.Context, sessionID string) error
}

// NamespaceLister is implemented by [KV] stores that can enumerate their
// namespaces and drop one whole: what deleting a tenant (every namespace
// under its prefix) needs. Without it, only the namespaces a caller names
// can be emptied, key by key.
type NamespaceLister interface {
	// Namespaces returns, sorted, every namespace that starts with prefix
	// ("" for all) and holds at least one key.
	Namespaces(ctx context.Context, prefix string) ([]string, error)
	// DeleteNamespace removes every key of namespace, and whatever the
	// store keeps for it; a namespace with no keys is a no-op. A Set into
	// the namespace concurrent with it may survive it.
	DeleteNamespace(ctx context.Context, namespace string) error
}

// RewriteStats tells what one [Rewriter.Rewrite] found.
type RewriteStats struct {
	// Events is how many events the session holds.
	Events int
	// Changed is how many of them fn changed: the events rewritten, or
	// those a dry run would rewrite.
	Changed int
}

// KV is implemented by stores that also keep values by key, outside any
// session: small state that belongs to no ledger, such as the key-value
// store the host gives a tenant's plugins, which is then as durable, and as
// shared between hosts, as the ledgers. Without it, the host keeps such
// values in memory, for the life of the process.
//
// Keys live in namespaces (the host uses one per tenant). A namespace is 1
// to [MaxNamespaceBytes] bytes, a key 1 to [MaxKeyBytes] bytes, both
// arbitrary (binary included; adapters encode them as they must); a value
// is 0 to [MaxValueBytes] arbitrary bytes. Implementations guarantee:
//
//   - Durability. When Set or Delete returns nil, the change is durable to
//     the degree the adapter documents for Append.
//   - Atomic values. A Get sees a value whole: the one before a Set or the
//     one after it, never a mix.
//   - Read-your-writes. A Get sees every Set and Delete that returned
//     before it started, from any goroutine (and, for a shared store, any
//     handle on the same backend).
//   - Isolation. Namespaces never see each other's keys, and no namespace
//     or key is confused with another (however they contain separators),
//     nor with a session.
//
// A missing key is a value (ok false), not an error; deleting one is a
// no-op. An invalid namespace or key fails with [ErrInvalidKey], a value
// too large with [ErrValueTooLarge], and nothing is changed. The ctx rule
// of [Storage] applies, and so does [ErrClosed]. Set keeps no reference to
// value, and the values Get returns belong to the caller.
type KV interface {
	// Get returns the value under key in namespace; ok is false when there
	// is none.
	Get(ctx context.Context, namespace, key string) (value []byte, ok bool, err error)
	// Set stores value under key in namespace, replacing any previous one.
	Set(ctx context.Context, namespace, key string, value []byte) error
	// Delete removes key from namespace.
	Delete(ctx context.Context, namespace, key string) error
	// Len returns the number of keys in namespace (0 for one never
	// used), for quotas.
	Len(ctx context.Context, namespace string) (int, error)
	// Keys returns the keys of namespace, sorted (none for one never
	// used), for indexes a host keeps beside the ledgers, such as the
	// inbox of pending approvals.
	Keys(ctx context.Context, namespace string) ([]string, error)
}

// Counter is implemented by stores whose key-value store ([KV]) keeps
// integer counters that change atomically, for what several hosts must
// count together without a race (a tenant's daily budget reserves and
// settles its spend with it). A counter is a KV value, the decimal text of
// an int64, which Get returns and Set and Delete change as any value.
// Callers that find no Counter fall back to values of their own (one per
// host) and say what they lose.
type Counter interface {
	// AddWithin adds delta to the counter under key in namespace (a
	// missing key counts as 0), atomically with respect to every other
	// AddWithin on the key, unless delta > 0 and the sum would pass limit.
	// It returns the counter's value after the add — or as it stands,
	// when refused — and whether it added. A value there that is not the
	// decimal text of an int64 fails it with [ErrNotCounter], and is left
	// as it is. The bounds and the ctx rule of [KV] apply.
	AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (value int64, added bool, err error)
}

// AddCounter is the arithmetic of [Counter.AddWithin], for its
// implementations: the counter's next value from its current text (nil for
// a missing key), and whether to store it.
func AddCounter(current []byte, delta, limit int64) (value int64, added bool, err error) {
	if current != nil {
		if value, err = strconv.ParseInt(string(current), 10, 64); err != nil {
			return 0, false, fmt.Errorf("%w: %.40q", ErrNotCounter, current)
		}
	}
	if delta > 0 && (value > limit-delta || value+delta < value) {
		return value, false, nil
	}
	return value + delta, true, nil
}

// Blobs is implemented by stores that keep large payloads (attachments,
// large tool outputs) beside the ledger, once each, named by the SHA-256
// of their bytes ([BlobDigest]): an event then keeps the digest, the media
// type and the size instead of the bytes. Callers that find no Blobs keep
// the bytes inline in the events, as before.
//
// Implementations must guarantee:
//
//   - Content addressing. PutBlob stores data under BlobDigest(data) and
//     returns it; putting bytes already stored changes nothing but their
//     Stored time, which it moves to now (so that a sweep of unreferenced
//     blobs, which spares recent ones, spares a blob put again while an
//     event that refers to it is being written).
//   - Durability, read-your-writes and the ctx rule of [Storage]; a blob
//     is visible whole or not at all.
//   - Isolation. Blobs are not sessions, nor KV values: they never appear
//     in ListSessions or Keys. A store wrapped by [Prefix] keeps each
//     prefix's blobs apart (the same bytes put by two tenants are two
//     blobs, so deleting one tenant's never removes the other's): a
//     Blobs store implements [BlobScoper] for that.
//
// A missing blob is a value (ok false), not an error; deleting one is a
// no-op. A digest that is not "sha256:" and 64 lower-case hex digits fails
// with [ErrInvalidKey]. GetBlob's bytes belong to the caller, and PutBlob
// keeps no reference to data.
type Blobs interface {
	// PutBlob stores data and returns its digest.
	PutBlob(ctx context.Context, data []byte) (digest string, err error)
	// GetBlob returns the bytes stored under digest; ok is false when
	// there are none.
	GetBlob(ctx context.Context, digest string) (data []byte, ok bool, err error)
	// DeleteBlob removes the blob under digest.
	DeleteBlob(ctx context.Context, digest string) error
	// ListBlobs returns every blob of the store (of its prefix, for a
	// prefixed store), sorted by digest.
	ListBlobs(ctx context.Context) ([]BlobInfo, error)
}

// BlobScoper is implemented by [Blobs] stores that keep blobs in scopes
// apart from one another: [Prefix] uses it to give each prefix (each
// tenant) blobs of its own, so that the same bytes put by two tenants are
// two blobs and deleting one tenant's never touches another's. A store
// that implements Blobs without BlobScoper has views without Blobs: their
// callers keep bytes inline in the events.
type BlobScoper interface {
	// BlobScope returns the blobs of scope (a [Prefix] prefix, or
	// several joined), apart from every other scope's and from the
	// store's own. It does no I/O; the Blobs it returns shares the
	// store's connections and its Close.
	BlobScope(scope string) Blobs
}

// BlobInfo describes one blob of a [Blobs] store.
type BlobInfo struct {
	// Digest names the blob: "sha256:" and the hex of its bytes' SHA-256.
	Digest string
	// Size is the blob's length in bytes.
	Size int64
	// Stored is when the blob was last put.
	Stored time.Time
}

// BlobDigest returns the name a [Blobs] store keeps data under: "sha256:"
// and the lower-case hex of its SHA-256.
func BlobDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CheckBlobDigest returns nil when digest is one [BlobDigest] makes, or an
// error wrapping [ErrInvalidKey] that says what is wrong.
func CheckBlobDigest(digest string) error {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != sha256.Size*2 {
		return fmt.Errorf("%w: blob digest %.80q is not sha256: and 64 hex digits", ErrInvalidKey, digest)
	}
	for _, c := range hexPart {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: blob digest %.80q is not sha256: and 64 lower-case hex digits", ErrInvalidKey, digest)
		}
	}
	return nil
}

// The bounds of [KV] namespaces, keys and values.
const (
	MaxNamespaceBytes = 256
	MaxKeyBytes       = 1024
	MaxValueBytes     = 1 << 20
)

// CheckKV returns nil when namespace, key and value (nil for a Get or a
// Delete) are within the bounds of [KV], or an error wrapping
// [ErrInvalidKey] or [ErrValueTooLarge] that says what is wrong.
func CheckKV(namespace, key string, value []byte) error {
	if err := CheckNamespace(namespace); err != nil {
		return err
	}
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyBytes)
	case len(value) > MaxValueBytes:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrValueTooLarge, len(value), MaxValueBytes)
	}
	return nil
}

// CheckNamespace returns nil when namespace is within the bounds of [KV],
// or an error wrapping [ErrInvalidKey] that says what is wrong.
func CheckNamespace(namespace string) error {
	switch {
	case namespace == "":
		return fmt.Errorf("%w: empty namespace", ErrInvalidKey)
	case len(namespace) > MaxNamespaceBytes:
		return fmt.Errorf("%w: namespace of %d bytes, the limit is %d", ErrInvalidKey, len(namespace), MaxNamespaceBytes)
	}
	return nil
}

var (
	// ErrInvalidKey is returned by a [KV] for a namespace or key outside
	// its bounds.
	ErrInvalidKey = errors.New("storage: invalid key")
	// ErrValueTooLarge is returned by [KV.Set] for a value above
	// [MaxValueBytes].
	ErrValueTooLarge = errors.New("storage: value too large")
	// ErrInvalidSessionID is returned for a session id the store cannot
	// keep (empty, too long, or with characters the adapter refuses).
	ErrInvalidSessionID = errors.New("storage: invalid session id")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("storage: store is closed")
	// ErrLeaseHeld is returned by [Leaser.AcquireLease] while another
	// owner holds the session's lease (and, by adapters that document it,
	// by an unfenced [Storage.Append] to a session under a lease). It is
	// transient: the lease may be acquired once its holder releases it or
	// lets it expire.
	ErrLeaseHeld = errors.New("storage: session lease is held by another owner")
	// ErrLeaseLost is returned by a [Lease] whose owner no longer holds
	// it: it expired, or another owner took it. A fenced Append that
	// fails with it appended nothing.
	ErrLeaseLost = errors.New("storage: session lease was lost")
	// ErrNotCounter is returned by [Counter.AddWithin] for a value that is
	// not a counter's (the decimal text of an int64).
	ErrNotCounter = errors.New("storage: the value is not a counter")
	// ErrRequestSeen is matched (errors.Is) by a [*RequestSeenError].
	ErrRequestSeen = errors.New("storage: the request was appended already")
	// ErrCorrupt is matched (errors.Is) by the error of a [Storage.Load]
	// that refuses a session whose ledger holds damage it will not skip
	// (a record in the middle that does not decode): the session is
	// damaged, not the store unavailable. Callers that go over many
	// sessions (lists, sweeps) show or skip it and go on; each adapter's
	// error says where the damage is.
	ErrCorrupt = errors.New("storage: corrupt ledger")
	// ErrRewriteRaced is returned by [Rewriter.Rewrite] when the session
	// was appended to while it was being rewritten: nothing was written,
	// and the rewrite may be tried again.
	ErrRewriteRaced = errors.New("storage: session was appended to while it was rewritten")
	// ErrSessionChanged is returned by [Fencer.ReplaceSession] when the
	// session was appended to (or deleted, or replaced) since the version
	// it was given: nothing was changed. The caller checks the session
	// again, and decides again.
	ErrSessionChanged = errors.New("storage: the session changed since it was checked")
	// ErrSnapshotPoint is returned by [Snapshotter.PutSnapshot] when the
	// event it names is not among the session's last [MaxSnapshotLag]
	// events: nothing was kept.
	ErrSnapshotPoint = errors.New("storage: the snapshot's event is not among the session's last events")
)

// LeaseHeldError is how a [Leaser] may tell who holds a session's lease and
// for how long: AcquireLease fails with it while another owner holds the
// lease. It matches [ErrLeaseHeld] (errors.Is), which remains the contract;
// callers find the details with errors.As.
type LeaseHeldError struct {
	// Session is the session whose lease is held.
	Session string
	// Holder is the owner that holds the lease, as it acquired it.
	Holder string
	// Left is how long the lease runs unless its holder renews it; 0 when
	// the store cannot tell.
	Left time.Duration
}

func (e *LeaseHeldError) Error() string {
	left := "an unknown time"
	if e.Left > 0 {
		left = e.Left.String()
	}
	return fmt.Sprintf("storage: the lease of session %q is held by %s (it expires in %s unless renewed)", e.Session, e.Holder, left)
}

// Unwrap returns [ErrLeaseHeld].
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// RequestSeenError is the error of an AppendRequest (see
// [RequestAppender]) refused because the session holds a message sent
// under the request id already. It matches [ErrRequestSeen].
type RequestSeenError struct {
	// RequestID is the request id asked for.
	RequestID string
	// MessageID is the message id of the input the session holds under
	// it.
	MessageID string
}

func (e *RequestSeenError) Error() string {
	return fmt.Sprintf("storage: request %q was appended already, as message %s", e.RequestID, e.MessageID)
}

// Unwrap returns [ErrRequestSeen].
func (e *RequestSeenError) Unwrap() error { return ErrRequestSeen }

// ValidSessionID reports whether id is acceptable to every built-in adapter:
// 1 to 128 characters from [A-Za-z0-9._:-], not starting with a dot. Ids
// that pass can name a Redis key, a URL path segment unescaped, and a file
// on a case-sensitive POSIX file system (the file adapter's target; on a
// case-insensitive one, ids differing only in case would share a file).
func ValidSessionID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
