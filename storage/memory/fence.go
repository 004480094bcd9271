package memory

import (
	"context"
	"fmt"
	"iter"
	"strconv"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// SessionVersion implements [storage.Fencer]: a number the store gives the
// session at each change of its ledger.
func (s *Store) SessionVersion(ctx context.Context, sessionID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := checkID(sessionID); err != nil {
		return "", err
	}
	sess, err := s.session(sessionID, false)
	if err != nil || sess == nil {
		return "", err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if len(sess.events) == 0 || sess.gone {
		return "", nil
	}
	return strconv.FormatUint(sess.version, 10), nil
}

// ReplaceSession implements [storage.Fencer]: it encodes the events first,
// then swaps the session for a new one holding them (or, with none,
// deletes it) while its version is still version.
func (s *Store) ReplaceSession(ctx context.Context, sessionID, version string, events iter.Seq2[ledger.Event, error]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	var encoded [][]byte
	i := 0
	for e, err := range events {
		if err != nil {
			return err
		}
		i++
		b, err := ledger.Encode(e)
		if err != nil {
			return fmt.Errorf("memory: replace session %q: event %d: %w", sessionID, i, err)
		}
		encoded = append(encoded, b)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	old := s.sessions[sessionID]
	if old != nil {
		old.mu.Lock()
		defer old.mu.Unlock()
	}
	now := ""
	if old != nil && len(old.events) > 0 {
		now = strconv.FormatUint(old.version, 10)
	}
	if now != version {
		return fmt.Errorf("memory: replace session %q: %w", sessionID, storage.ErrSessionChanged)
	}
	if old != nil {
		old.gone = true
		delete(s.sessions, sessionID)
	}
	if len(encoded) > 0 {
		s.sessions[sessionID] = &session{events: encoded, version: s.versions.Add(1)}
	}
	return nil
}

var _ storage.Fencer = (*Store)(nil)
