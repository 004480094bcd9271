// Package memory is a [storage.Storage] that keeps session ledgers in the
// process's memory, for tests, demos and hosts that need no durability.
//
// Events are durable for the life of the [Store] (until Close or the end of
// the process). Each event is kept in its ledger encoding, so what Load
// returns is a fresh copy, equal to what was appended, that shares nothing
// with the appended values or with other loads. The store implements
// [storage.Lister], [storage.Closer], [storage.Deleter], [storage.KV] and
// [storage.NamespaceLister] (values kept for the life of the Store, like
// events), [storage.Snapshotter] and [storage.Blobs] with
// [storage.BlobScoper] (blobs kept likewise).
package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Store keeps session ledgers in memory. It is safe for concurrent use:
// appends to different sessions proceed in parallel, and appends to one
// session are serialised. The zero value is not usable; call [New].
type Store struct {
	mu       sync.RWMutex // guards closed and the sessions map (not the sessions)
	closed   bool
	sessions map[string]*session

	kvMu sync.RWMutex
	kv   map[string]map[string][]byte // namespace → key → value, never modified in place

	blobOnce  sync.Once
	blobSpace *blobSpace

	versions atomic.Uint64 // the last version given to a session (see SessionVersion)
}

// session is one ledger: its events in their encoding, in append order.
type session struct {
	mu     sync.Mutex
	events [][]byte // never modified in place: Load may hold a prefix
	// version changes with every change of the ledger (a number from
	// Store.versions); gone is set once the session is deleted or
	// replaced, so that an Append that found it before then starts again.
	version uint64
	gone    bool
	snap    *snapshot // the session's snapshot, nil when none
}

// New returns an empty store.
func New() *Store {
	return &Store{sessions: make(map[string]*session), kv: make(map[string]map[string][]byte)}
}

// Append adds the events to the session, atomically: it encodes them all
// first, and an event the codec refuses fails the whole call with the
// codec's error, leaving the session as it was.
func (s *Store) Append(ctx context.Context, sessionID string, events ...ledger.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	encoded := make([][]byte, len(events))
	for i, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			return fmt.Errorf("memory: append to session %q: event %d of %d: %w", sessionID, i+1, len(events), err)
		}
		encoded[i] = b
	}
	if len(events) == 0 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return storage.ErrClosed
		}
		return nil // nothing to add, and no session to create
	}
	for {
		sess, err := s.session(sessionID, true)
		if err != nil {
			return err
		}
		sess.mu.Lock()
		if sess.gone { // deleted or replaced since it was found
			sess.mu.Unlock()
			continue
		}
		sess.events = append(sess.events, encoded...)
		sess.version = s.versions.Add(1)
		sess.mu.Unlock()
		return nil
	}
}

// Load returns the session's events in append order, decoded afresh; an
// empty slice for a session with none.
func (s *Store) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, err
	}
	sess, err := s.session(sessionID, false)
	if err != nil || sess == nil {
		return []ledger.Event{}, err
	}
	sess.mu.Lock()
	encoded := sess.events[:len(sess.events):len(sess.events)]
	sess.mu.Unlock()
	return decodeAll(sessionID, encoded, 0)
}

// decodeAll decodes the encoded events from number from (0-based) on.
func decodeAll(sessionID string, encoded [][]byte, from int) ([]ledger.Event, error) {
	events := make([]ledger.Event, len(encoded)-from)
	for i, b := range encoded[from:] {
		// The encodings are never changed once appended: the events'
		// strings may share them (and keep nothing the store does not).
		e, err := ledger.DecodeOwned(b)
		if err != nil {
			// Only a codec that cannot read what it wrote gets here.
			return nil, fmt.Errorf("memory: load session %q: event %d: %w", sessionID, from+i+1, err)
		}
		events[i] = e
	}
	return events, nil
}

// ListSessions returns the ids of the sessions that have events.
func (s *Store) ListSessions(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, storage.ErrClosed
	}
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id) // a session exists only once it has events
	}
	return ids, nil
}

// Close drops every session. Afterwards every method returns
// [storage.ErrClosed]; Close itself may be called again, and returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.sessions = nil
	return nil
}

// session returns the session named id, creating it when create is set; a
// nil session (and no error) when it does not exist and create is not set.
func (s *Store) session(id string, create bool) (*session, error) {
	s.mu.RLock()
	sess, closed := s.sessions[id], s.closed
	s.mu.RUnlock()
	if closed {
		return nil, storage.ErrClosed
	}
	if sess != nil || !create {
		return sess, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, storage.ErrClosed
	}
	if sess = s.sessions[id]; sess == nil {
		sess = &session{}
		s.sessions[id] = sess
	}
	return sess, nil
}

func checkID(id string) error {
	if !storage.ValidSessionID(id) {
		return fmt.Errorf("memory: session %q: %w", id, storage.ErrInvalidSessionID)
	}
	return nil
}

var (
	_ storage.Storage = (*Store)(nil)
	_ storage.Lister  = (*Store)(nil)
	_ storage.Closer  = (*Store)(nil)
)

// kvReady checks the store, ctx and bounds before a KV operation.
func (s *Store) kvReady(ctx context.Context, bounds error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return storage.ErrClosed
	}
	return bounds
}

// Get implements [storage.KV].
func (s *Store) Get(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return nil, false, err
	}
	s.kvMu.RLock()
	v, ok := s.kv[namespace][key]
	s.kvMu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

// Set implements [storage.KV].
func (s *Store) Set(ctx context.Context, namespace, key string, value []byte) error {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, value)); err != nil {
		return err
	}
	v := append([]byte{}, value...)
	s.kvMu.Lock()
	ns := s.kv[namespace]
	if ns == nil {
		ns = make(map[string][]byte)
		s.kv[namespace] = ns
	}
	ns[key] = v
	s.kvMu.Unlock()
	return nil
}

// Delete implements [storage.KV].
func (s *Store) Delete(ctx context.Context, namespace, key string) error {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return err
	}
	s.kvMu.Lock()
	delete(s.kv[namespace], key)
	if len(s.kv[namespace]) == 0 {
		delete(s.kv, namespace)
	}
	s.kvMu.Unlock()
	return nil
}

// Len implements [storage.KV].
func (s *Store) Len(ctx context.Context, namespace string) (int, error) {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return 0, err
	}
	s.kvMu.RLock()
	defer s.kvMu.RUnlock()
	return len(s.kv[namespace]), nil
}

// Keys implements [storage.KV].
func (s *Store) Keys(ctx context.Context, namespace string) ([]string, error) {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return nil, err
	}
	s.kvMu.RLock()
	keys := slices.Sorted(maps.Keys(s.kv[namespace]))
	s.kvMu.RUnlock()
	return keys, nil
}

// AddWithin implements [storage.Counter].
func (s *Store) AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (int64, bool, error) {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return 0, false, err
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	var cur []byte
	if v, ok := s.kv[namespace][key]; ok {
		cur = v
	}
	value, added, err := storage.AddCounter(cur, delta, limit)
	if err != nil || !added {
		return value, false, err
	}
	ns := s.kv[namespace]
	if ns == nil {
		ns = make(map[string][]byte)
		s.kv[namespace] = ns
	}
	ns[key] = strconv.AppendInt(nil, value, 10)
	return value, true, nil
}

var (
	_ storage.KV      = (*Store)(nil)
	_ storage.Counter = (*Store)(nil)
)

// DeleteSession implements [storage.Deleter].
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	if sess := s.sessions[sessionID]; sess != nil {
		sess.mu.Lock()
		sess.gone = true
		sess.mu.Unlock()
		delete(s.sessions, sessionID)
	}
	return nil
}

// Namespaces implements [storage.NamespaceLister].
func (s *Store) Namespaces(ctx context.Context, prefix string) ([]string, error) {
	if err := s.kvReady(ctx, nil); err != nil {
		return nil, err
	}
	s.kvMu.RLock()
	defer s.kvMu.RUnlock()
	var out []string
	for ns, keys := range s.kv {
		if len(keys) > 0 && strings.HasPrefix(ns, prefix) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out, nil
}

// DeleteNamespace implements [storage.NamespaceLister].
func (s *Store) DeleteNamespace(ctx context.Context, namespace string) error {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return err
	}
	s.kvMu.Lock()
	delete(s.kv, namespace)
	s.kvMu.Unlock()
	return nil
}

var (
	_ storage.Deleter         = (*Store)(nil)
	_ storage.NamespaceLister = (*Store)(nil)
)
