package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// memStore is the private in-memory [storage.Storage] of non-durable tasks
// (TaskSpec.Ephemeral). The host may not import a storage adapter
// (arrows point inward), so it keeps this minimal one of its own: events are
// kept in their ledger encoding, so that loads share nothing with appends,
// as the storage contract asks.
type memStore struct {
	mu       sync.Mutex
	sessions map[string][][]byte
}

func newMemStore() *memStore { return &memStore{sessions: map[string][][]byte{}} }

func (m *memStore) Append(ctx context.Context, sessionID string, events ...ledger.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !storage.ValidSessionID(sessionID) {
		return fmt.Errorf("%w: %q", storage.ErrInvalidSessionID, sessionID)
	}
	encoded := make([][]byte, len(events))
	for i, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			return fmt.Errorf("host: task store: append to session %q: %w", sessionID, err)
		}
		encoded[i] = b
	}
	if len(encoded) == 0 {
		return nil
	}
	m.mu.Lock()
	m.sessions[sessionID] = append(m.sessions[sessionID], encoded...)
	m.mu.Unlock()
	return nil
}

func (m *memStore) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !storage.ValidSessionID(sessionID) {
		return nil, fmt.Errorf("%w: %q", storage.ErrInvalidSessionID, sessionID)
	}
	m.mu.Lock()
	encoded := m.sessions[sessionID]
	m.mu.Unlock()
	events := make([]ledger.Event, 0, len(encoded))
	for _, b := range encoded {
		e, err := ledger.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("host: task store: load session %q: %w", sessionID, err)
		}
		events = append(events, e)
	}
	return events, nil
}

var _ storage.Storage = (*memStore)(nil)
