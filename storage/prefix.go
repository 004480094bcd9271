package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Prefix returns a view of store in which every session id and every
// key-value namespace is prefixed with prefix: the store of one tenant
// among several sharing one backend. Sessions and values of other
// prefixes are invisible through it — absent, exactly as missing ones are.
// The view passes Close through to nobody: the code that opened store
// closes it.
//
// store must implement [Lister] and [KV], as every built-in store does. The
// view implements [Leaser], [LeaseInspector], [Watcher] and
// [RequestAppender] when store implements the first three (a store shared
// by several hosts; AppendRequest fails with errors.ErrUnsupported when
// store does not implement it), none otherwise; [Snapshotter] always
// (failing with errors.ErrUnsupported when store keeps no snapshots);
// [Counter] when store does; [Blobs] (and [BlobScoper]) when store
// implements both, with blobs of the prefix's own scope, apart from the
// store's and every other prefix's; and [Deleter] always (failing with
// errors.ErrUnsupported when store deletes no sessions). [DeletePrefix]
// deletes what a view holds.
// prefix must be a valid session id of at most 48 bytes that ends with ':'
// (so that "a:" and "ab:" never overlap). Every id [ValidSessionID]
// accepts is accepted: one too long to prefix within 128 bytes is kept
// under the prefix and its SHA-256 (with the way back to the id in a
// value of the prefix's), as is a namespace too long to prefix within
// [MaxNamespaceBytes].
func Prefix(store Storage, prefix string) (Storage, error) {
	switch {
	case prefix == "" || len(prefix) > maxPrefix || !strings.HasSuffix(prefix, ":") || !ValidSessionID(prefix):
		return nil, fmt.Errorf("storage: prefix %q: want a valid session id of at most %d bytes ending with ':'", prefix, maxPrefix)
	case store == nil:
		return nil, errors.New("storage: Prefix of a nil store")
	}
	lister, ok1 := store.(Lister)
	kv, ok2 := store.(KV)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("storage: Prefix needs a store that lists sessions and keeps values (storage.Lister and storage.KV); %T does not", store)
	}
	p := &prefixed{store: store, lister: lister, kv: kv, prefix: prefix}
	view := withoutBlobs(p)
	_, hasBlobs := store.(Blobs)
	scoper, scopes := store.(BlobScoper)
	if !hasBlobs || !scopes {
		return view, nil
	}
	pb := &prefixBlobs{Blobs: scoper.BlobScope(prefix), scoper: scoper, prefix: prefix}
	switch v := view.(type) {
	case *countingSharedPrefixed:
		return &blobCountingSharedPrefixed{v, pb}, nil
	case *sharedPrefixed:
		return &blobSharedPrefixed{v, pb}, nil
	case *countingPrefixed:
		return &blobCountingPrefixed{v, pb}, nil
	default:
		return &blobPrefixed{p, pb}, nil
	}
}

// withoutBlobs returns the view of p's store with every optional interface
// the store has but Blobs.
func withoutBlobs(p *prefixed) Storage {
	store := p.store
	counter, counts := store.(Counter)
	leaser, ok1 := store.(Leaser)
	inspector, ok2 := store.(LeaseInspector)
	watcher, ok3 := store.(Watcher)
	if ok1 && ok2 && ok3 {
		sp := &sharedPrefixed{prefixed: p, leaser: leaser, inspector: inspector, watcher: watcher}
		if counts {
			return &countingSharedPrefixed{sharedPrefixed: sp, counter: counter}
		}
		return sp
	}
	if counts {
		return &countingPrefixed{prefixed: p, counter: counter}
	}
	return p
}

// maxPrefix bounds a prefix, so that a prefixed hash of a session id is a
// session id.
const maxPrefix = 48

// prefixed is a Prefix view of a store that lists and keeps values.
type prefixed struct {
	store  Storage
	lister Lister
	kv     KV
	prefix string
	named  sync.Map // store ids of long session ids whose way back is kept
}

// longIDs is the namespace (under the prefix) that maps the store's ids of
// sessions whose ids are too long to prefix back to those ids.
const longIDs = "~sessions"

// id returns the store's id of the session id: the prefix and id, or, when
// that would pass the 128 bytes of a session id, the prefix, '.' and the
// SHA-256 of id (which cannot be a prefixed id: no id starts with '.').
func (p *prefixed) id(id string) (string, error) {
	if !ValidSessionID(id) {
		return "", fmt.Errorf("%w: %q", ErrInvalidSessionID, id)
	}
	if full := p.prefix + id; ValidSessionID(full) {
		return full, nil
	}
	sum := sha256.Sum256([]byte(id))
	return p.prefix + "." + hex.EncodeToString(sum[:]), nil
}

func (p *prefixed) Append(ctx context.Context, sessionID string, events ...ledger.Event) error {
	id, err := p.appendID(ctx, sessionID)
	if err != nil {
		return err
	}
	return p.store.Append(ctx, id, events...)
}

// appendID is id for an append: it keeps the way back from the store's id
// of a long id before the session's first append.
func (p *prefixed) appendID(ctx context.Context, sessionID string) (string, error) {
	id, err := p.id(sessionID)
	if err != nil {
		return "", err
	}
	if long := id != p.prefix+sessionID; long {
		// Keep the way back to the id before the first append, so that
		// ListSessions can name the session.
		if _, seen := p.named.Load(id); !seen {
			if err := p.kv.Set(ctx, p.ns(longIDs), id, []byte(sessionID)); err != nil {
				return "", err
			}
			p.named.Store(id, true)
		}
	}
	return id, nil
}

func (p *prefixed) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
	id, err := p.id(sessionID)
	if err != nil {
		return nil, err
	}
	return p.store.Load(ctx, id)
}

// ListSessions returns the sessions of the prefix, without it.
func (p *prefixed) ListSessions(ctx context.Context) ([]string, error) {
	all, err := p.lister.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range all {
		rest, ok := strings.CutPrefix(id, p.prefix)
		switch {
		case !ok || rest == "":
		case strings.HasPrefix(rest, "."):
			name, found, err := p.kv.Get(ctx, p.ns(longIDs), id)
			if err != nil {
				return nil, err
			}
			if found {
				out = append(out, string(name))
			}
		default:
			out = append(out, rest)
		}
	}
	return out, nil
}

// ns returns the store's namespace of the namespace ns: the prefix and ns,
// or, when that would pass MaxNamespaceBytes (or ns starts with '~'), the
// prefix, '~' and the SHA-256 of ns, so that no two namespaces meet.
func (p *prefixed) ns(ns string) string {
	if len(p.prefix)+len(ns) <= MaxNamespaceBytes && !strings.HasPrefix(ns, "~") {
		return p.prefix + ns
	}
	sum := sha256.Sum256([]byte(ns))
	return p.prefix + "~" + hex.EncodeToString(sum[:])
}

func (p *prefixed) Get(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := CheckKV(namespace, key, nil); err != nil {
		return nil, false, err
	}
	return p.kv.Get(ctx, p.ns(namespace), key)
}

func (p *prefixed) Set(ctx context.Context, namespace, key string, value []byte) error {
	if err := CheckKV(namespace, key, value); err != nil {
		return err
	}
	return p.kv.Set(ctx, p.ns(namespace), key, value)
}

func (p *prefixed) Delete(ctx context.Context, namespace, key string) error {
	if err := CheckKV(namespace, key, nil); err != nil {
		return err
	}
	return p.kv.Delete(ctx, p.ns(namespace), key)
}

func (p *prefixed) Len(ctx context.Context, namespace string) (int, error) {
	if err := CheckNamespace(namespace); err != nil {
		return 0, err
	}
	return p.kv.Len(ctx, p.ns(namespace))
}

func (p *prefixed) Keys(ctx context.Context, namespace string) ([]string, error) {
	if err := CheckNamespace(namespace); err != nil {
		return nil, err
	}
	return p.kv.Keys(ctx, p.ns(namespace))
}

// sharedPrefixed is a Prefix view of a store shared by several hosts.
type sharedPrefixed struct {
	*prefixed
	leaser    Leaser
	inspector LeaseInspector
	watcher   Watcher
}

func (p *sharedPrefixed) AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (Lease, error) {
	id, err := p.id(sessionID)
	if err != nil {
		return nil, err
	}
	l, err := p.leaser.AcquireLease(ctx, id, owner, ttl)
	if held, ok := errors.AsType[*LeaseHeldError](err); ok {
		// The holder's error names the session as the store knows it.
		h := *held
		h.Session = sessionID
		return nil, &h
	}
	return l, err
}

// AppendRequest implements [RequestAppender] when the store does, and
// fails with errors.ErrUnsupported otherwise.
func (p *sharedPrefixed) AppendRequest(ctx context.Context, sessionID, requestID string, events ...ledger.Event) error {
	ra, ok := p.store.(RequestAppender)
	if !ok {
		return fmt.Errorf("storage: %T appends no request: %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.appendID(ctx, sessionID)
	if err != nil {
		return err
	}
	return ra.AppendRequest(ctx, id, requestID, events...)
}

func (p *sharedPrefixed) LeaseHolder(ctx context.Context, sessionID string) (string, time.Duration, error) {
	id, err := p.id(sessionID)
	if err != nil {
		return "", 0, err
	}
	return p.inspector.LeaseHolder(ctx, id)
}

func (p *sharedPrefixed) Watch(ctx context.Context, sessionID string) (<-chan struct{}, error) {
	id, err := p.id(sessionID)
	if err != nil {
		return nil, err
	}
	return p.watcher.Watch(ctx, id)
}

// addWithin is Counter.AddWithin of a view, on counter, the store's.
func (p *prefixed) addWithin(ctx context.Context, counter Counter, namespace, key string, delta, limit int64) (int64, bool, error) {
	if err := CheckKV(namespace, key, nil); err != nil {
		return 0, false, err
	}
	return counter.AddWithin(ctx, p.ns(namespace), key, delta, limit)
}

// countingPrefixed is a Prefix view of a store that keeps counters.
type countingPrefixed struct {
	*prefixed
	counter Counter
}

func (p *countingPrefixed) AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (int64, bool, error) {
	return p.addWithin(ctx, p.counter, namespace, key, delta, limit)
}

// countingSharedPrefixed is a Prefix view of a shared store that keeps
// counters.
type countingSharedPrefixed struct {
	*sharedPrefixed
	counter Counter
}

func (p *countingSharedPrefixed) AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (int64, bool, error) {
	return p.addWithin(ctx, p.counter, namespace, key, delta, limit)
}

// prefixBlobs is the blobs of a view: its scope of the store's, which is
// itself a BlobScoper (a view of a view scopes within its scope).
type prefixBlobs struct {
	Blobs
	scoper BlobScoper
	prefix string
}

// BlobScope implements [BlobScoper]: the scope within the view's.
func (b *prefixBlobs) BlobScope(scope string) Blobs {
	return b.scoper.BlobScope(b.prefix + scope)
}

// blobPrefixed is a Prefix view with blobs of a store that keeps values.
type blobPrefixed struct {
	*prefixed
	*prefixBlobs
}

// blobCountingPrefixed is a Prefix view with blobs of a store that keeps
// counters.
type blobCountingPrefixed struct {
	*countingPrefixed
	*prefixBlobs
}

// blobSharedPrefixed is a Prefix view with blobs of a shared store.
type blobSharedPrefixed struct {
	*sharedPrefixed
	*prefixBlobs
}

// blobCountingSharedPrefixed is a Prefix view with blobs of a shared store
// that keeps counters.
type blobCountingSharedPrefixed struct {
	*countingSharedPrefixed
	*prefixBlobs
}

var (
	_ Blobs          = (*blobPrefixed)(nil)
	_ BlobScoper     = (*blobPrefixed)(nil)
	_ KV             = (*blobPrefixed)(nil)
	_ Counter        = (*blobCountingPrefixed)(nil)
	_ Blobs          = (*blobCountingPrefixed)(nil)
	_ Leaser         = (*blobSharedPrefixed)(nil)
	_ Blobs          = (*blobSharedPrefixed)(nil)
	_ Counter        = (*blobCountingSharedPrefixed)(nil)
	_ Watcher        = (*blobCountingSharedPrefixed)(nil)
	_ Blobs          = (*blobCountingSharedPrefixed)(nil)
	_ Counter        = (*countingPrefixed)(nil)
	_ Counter        = (*countingSharedPrefixed)(nil)
	_ Storage        = (*prefixed)(nil)
	_ Lister         = (*prefixed)(nil)
	_ KV             = (*prefixed)(nil)
	_ Leaser         = (*sharedPrefixed)(nil)
	_ LeaseInspector = (*sharedPrefixed)(nil)
	_ Watcher        = (*sharedPrefixed)(nil)
)

// PutSnapshot implements [Snapshotter] when the view's store does;
// otherwise it fails with an error matching errors.ErrUnsupported.
func (p *prefixed) PutSnapshot(ctx context.Context, sessionID, eventID string, data []byte) error {
	sn, ok := p.store.(Snapshotter)
	if !ok {
		return fmt.Errorf("storage: %T keeps no snapshots (storage.Snapshotter): %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.id(sessionID)
	if err != nil {
		return err
	}
	return sn.PutSnapshot(ctx, id, eventID, data)
}

// LoadSnapshot implements [Snapshotter] when the view's store does;
// otherwise it fails with an error matching errors.ErrUnsupported.
func (p *prefixed) LoadSnapshot(ctx context.Context, sessionID string) ([]byte, string, []ledger.Event, error) {
	sn, ok := p.store.(Snapshotter)
	if !ok {
		return nil, "", nil, fmt.Errorf("storage: %T keeps no snapshots (storage.Snapshotter): %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.id(sessionID)
	if err != nil {
		return nil, "", nil, err
	}
	return sn.LoadSnapshot(ctx, id)
}
