// Package gatestore wraps the built-in stores with gates: a test names an
// operation on a session, and the first such call blocks, once it has
// said so, until the test opens the gate. Race tests use it to make the
// interleaving they are about certain (a message accepted while a
// deletion is between its check and its act), not a matter of luck.
//
// The wrappers embed the concrete stores, so that they keep every optional
// interface of theirs (leases, watches, fences, blobs, values).
package gatestore

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

// The operations a gate can stop.
const (
	// Append: Storage.Append of the session.
	Append = "append"
	// Remove: Deleter.DeleteSession, or Fencer.ReplaceSession, of the
	// session (what a deletion or a replacement does to it).
	Remove = "remove"
	// Load: Storage.Load, or Snapshotter.LoadSnapshot, of the session.
	Load = "load"
)

// Gates holds the gates set on a store's operations. The zero value is
// ready; its methods are safe for concurrent use.
type Gates struct {
	mu    sync.Mutex
	gates []*Gate
}

// Gate stops the first call of one operation on one session.
type Gate struct {
	op, id  string
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
	used    bool
}

// Set stops the next call of op on session id (as the store names it: a
// tenant's view prefixes it) until the gate is opened.
func (g *Gates) Set(op, id string) *Gate {
	gt := &Gate{op: op, id: id, reached: make(chan struct{}), open: make(chan struct{})}
	g.mu.Lock()
	g.gates = append(g.gates, gt)
	g.mu.Unlock()
	return gt
}

// Reached is closed once a call reached the gate (and waits at it).
func (gt *Gate) Reached() <-chan struct{} { return gt.reached }

// Open lets the call through, and every later one.
func (gt *Gate) Open() { gt.once.Do(func() { close(gt.open) }) }

// at stops a call of op on id at its gate, if one is set and unused.
func (g *Gates) at(ctx context.Context, op, id string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	var gt *Gate
	for _, x := range g.gates {
		if x.op == op && x.id == id && !x.used {
			x.used, gt = true, x
			break
		}
	}
	g.mu.Unlock()
	if gt == nil {
		return
	}
	close(gt.reached)
	select {
	case <-gt.open:
	case <-ctx.Done():
	}
}

// File is a file store with gates.
type File struct {
	*file.Store
	G *Gates
}

func (s *File) Append(ctx context.Context, id string, events ...ledger.Event) error {
	s.G.at(ctx, Append, id)
	return s.Store.Append(ctx, id, events...)
}

func (s *File) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.Load(ctx, id)
}

func (s *File) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.LoadSnapshot(ctx, id)
}

func (s *File) DeleteSession(ctx context.Context, id string) error {
	s.G.at(ctx, Remove, id)
	return s.Store.DeleteSession(ctx, id)
}

func (s *File) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	s.G.at(ctx, Remove, id)
	return s.Store.ReplaceSession(ctx, id, version, events)
}

// Memory is a memory store with gates.
type Memory struct {
	*memory.Store
	G *Gates
}

func (s *Memory) Append(ctx context.Context, id string, events ...ledger.Event) error {
	s.G.at(ctx, Append, id)
	return s.Store.Append(ctx, id, events...)
}

func (s *Memory) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.Load(ctx, id)
}

func (s *Memory) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.LoadSnapshot(ctx, id)
}

func (s *Memory) DeleteSession(ctx context.Context, id string) error {
	s.G.at(ctx, Remove, id)
	return s.Store.DeleteSession(ctx, id)
}

func (s *Memory) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	s.G.at(ctx, Remove, id)
	return s.Store.ReplaceSession(ctx, id, version, events)
}

// Redis is a Redis store with gates.
type Redis struct {
	*redis.Store
	G *Gates
}

func (s *Redis) Append(ctx context.Context, id string, events ...ledger.Event) error {
	s.G.at(ctx, Append, id)
	return s.Store.Append(ctx, id, events...)
}

func (s *Redis) Load(ctx context.Context, id string) ([]ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.Load(ctx, id)
}

func (s *Redis) LoadSnapshot(ctx context.Context, id string) ([]byte, string, []ledger.Event, error) {
	s.G.at(ctx, Load, id)
	return s.Store.LoadSnapshot(ctx, id)
}

func (s *Redis) DeleteSession(ctx context.Context, id string) error {
	s.G.at(ctx, Remove, id)
	return s.Store.DeleteSession(ctx, id)
}

func (s *Redis) ReplaceSession(ctx context.Context, id, version string, events iter.Seq2[ledger.Event, error]) error {
	s.G.at(ctx, Remove, id)
	return s.Store.ReplaceSession(ctx, id, version, events)
}

var (
	_ storage.Fencer    = (*File)(nil)
	_ storage.BlobFence = (*File)(nil)
	_ storage.Fencer    = (*Memory)(nil)
	_ storage.Leaser    = (*Redis)(nil)
	_ storage.Fencer    = (*Redis)(nil)
	_ storage.BlobFence = (*Redis)(nil)
)

// Hold is BlobFence.HoldBlob of a digest, in any blob scope of the store
// (a tenant's included): name the gate by the digest.
const Hold = "hold"

// blobs is a blob scope with gates.
type blobs struct {
	storage.Blobs
	g *Gates
}

func (b *blobs) fence() storage.BlobFence { return b.Blobs.(storage.BlobFence) }

func (b *blobs) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	b.g.at(ctx, Hold, digest)
	return b.fence().HoldBlob(ctx, digest, ttl)
}

func (b *blobs) ReleaseBlob(ctx context.Context, digest, hold string) error {
	return b.fence().ReleaseBlob(ctx, digest, hold)
}

func (b *blobs) MarkBlob(ctx context.Context, digest string) (string, error) {
	return b.fence().MarkBlob(ctx, digest)
}

func (b *blobs) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	return b.fence().DeleteMarkedBlob(ctx, digest, mark)
}

// BlobScope gives the scope's blobs gates.
func (s *File) BlobScope(scope string) storage.Blobs {
	return &blobs{Blobs: s.Store.BlobScope(scope), g: s.G}
}

// HoldBlob stops at a Hold gate.
func (s *File) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	s.G.at(ctx, Hold, digest)
	return s.Store.HoldBlob(ctx, digest, ttl)
}

// BlobScope gives the scope's blobs gates.
func (s *Redis) BlobScope(scope string) storage.Blobs {
	return &blobs{Blobs: s.Store.BlobScope(scope), g: s.G}
}

// HoldBlob stops at a Hold gate.
func (s *Redis) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	s.G.at(ctx, Hold, digest)
	return s.Store.HoldBlob(ctx, digest, ttl)
}

var _ storage.BlobFence = (*blobs)(nil)
