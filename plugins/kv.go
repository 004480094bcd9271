package plugins

import (
	"context"
	"sync"

	"github.com/agentichost/agentic/storage"
)

// KV is the key-value store behind the kv_get, kv_set and kv_delete host
// functions. Every operation is scoped to a tenant: a plugin sees only its
// tenant's keys (all plugins of a tenant share them). Implementations must
// be safe for concurrent use. A missing key is a value (ok false), not an
// error. [StoreKV] keeps the values in the host's storage (memory, files or
// Redis, whatever keeps the ledgers); [MemoryKV] keeps them in memory.
type KV interface {
	// Get returns the value under key; ok is false when there is none.
	Get(ctx context.Context, tenant, key string) (value []byte, ok bool, err error)
	// Set stores value under key, replacing any previous value.
	Set(ctx context.Context, tenant, key string, value []byte) error
	// Delete removes key; removing a missing key is not an error.
	Delete(ctx context.Context, tenant, key string) error
	// Len returns the number of keys the tenant has (for its quota,
	// Limits.MaxKVKeys).
	Len(ctx context.Context, tenant string) (int, error)
}

// MemoryKV is a [KV] kept in memory, for the life of the process.
type MemoryKV struct {
	mu   sync.RWMutex
	data map[string]map[string][]byte
}

// NewMemoryKV returns an empty MemoryKV.
func NewMemoryKV() *MemoryKV { return &MemoryKV{data: map[string]map[string][]byte{}} }

// Get implements [KV].
func (m *MemoryKV) Get(_ context.Context, tenant, key string) ([]byte, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.data[tenant][key]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

// Set implements [KV].
func (m *MemoryKV) Set(_ context.Context, tenant, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.data[tenant]
	if t == nil {
		t = map[string][]byte{}
		m.data[tenant] = t
	}
	t[key] = append([]byte{}, value...)
	return nil
}

// Delete implements [KV].
func (m *MemoryKV) Delete(_ context.Context, tenant, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.data[tenant], key)
	return nil
}

// Len implements [KV].
func (m *MemoryKV) Len(_ context.Context, tenant string) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.data[tenant]), nil
}

var _ KV = (*MemoryKV)(nil)

// StorageNamespace is the prefix of the [storage.KV] namespaces of
// [StoreKV]: tenant t's values live in namespace "plugins:"+t.
const StorageNamespace = "plugins:"

// StoreKV returns a [KV] kept in the host's storage, so that a plugin's
// state is as durable as the ledgers and, on a store several hosts share
// (Redis), shared by every host: tenant t's values live in the storage
// namespace [StorageNamespace]+t. Keys and values keep the bounds of
// [storage.KV] besides the tenant's [Limits].
func StoreKV(kv storage.KV) KV { return storeKV{kv} }

type storeKV struct{ kv storage.KV }

func (s storeKV) Get(ctx context.Context, tenant, key string) ([]byte, bool, error) {
	return s.kv.Get(ctx, StorageNamespace+tenant, key)
}

func (s storeKV) Set(ctx context.Context, tenant, key string, value []byte) error {
	return s.kv.Set(ctx, StorageNamespace+tenant, key, value)
}

func (s storeKV) Delete(ctx context.Context, tenant, key string) error {
	return s.kv.Delete(ctx, StorageNamespace+tenant, key)
}

func (s storeKV) Len(ctx context.Context, tenant string) (int, error) {
	return s.kv.Len(ctx, StorageNamespace+tenant)
}
