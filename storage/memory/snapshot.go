package memory

import (
	"bytes"
	"context"
	"fmt"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// PutSnapshot implements [storage.Snapshotter]. The snapshot lives in the
// session: deleting or replacing the session forgets it.
func (s *Store) PutSnapshot(ctx context.Context, sessionID, eventID string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if len(data) > storage.MaxSnapshotBytes {
		return fmt.Errorf("memory: snapshot of session %q: %d bytes, more than %d", sessionID, len(data), storage.MaxSnapshotBytes)
	}
	sess, err := s.session(sessionID, false)
	if err != nil {
		return err
	}
	if sess == nil {
		return fmt.Errorf("memory: snapshot of session %q at %s: %w", sessionID, eventID, storage.ErrSnapshotPoint)
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for i := len(sess.events) - 1; i >= 0 && i >= len(sess.events)-storage.MaxSnapshotLag; i-- {
		if idOf(sess.events[i]) == eventID {
			sess.snap = &snapshot{at: i, eventID: eventID, data: bytes.Clone(data)}
			return nil
		}
	}
	return fmt.Errorf("memory: snapshot of session %q at %s: %w", sessionID, eventID, storage.ErrSnapshotPoint)
}

// LoadSnapshot implements [storage.Snapshotter].
func (s *Store) LoadSnapshot(ctx context.Context, sessionID string) ([]byte, string, []ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, "", nil, err
	}
	sess, err := s.session(sessionID, false)
	if err != nil || sess == nil {
		return nil, "", []ledger.Event{}, err
	}
	sess.mu.Lock()
	encoded := sess.events[:len(sess.events):len(sess.events)]
	snap := sess.snap
	sess.mu.Unlock()
	from := 0
	if snap != nil && snap.at < len(encoded) && idOf(encoded[snap.at]) == snap.eventID {
		from = snap.at + 1
	} else {
		snap = nil
	}
	events, err := decodeAll(sessionID, encoded, from)
	if err != nil {
		return nil, "", nil, err
	}
	if snap == nil {
		return nil, "", events, nil
	}
	return bytes.Clone(snap.data), snap.eventID, events, nil
}

// snapshot is a session's snapshot: data, taken at its event number at
// (0-based), whose id is eventID.
type snapshot struct {
	at      int
	eventID string
	data    []byte
}

// idOf returns the id of an encoded event, "" when it does not decode.
func idOf(b []byte) string {
	e, err := ledger.DecodeOwned(b)
	if err != nil {
		return ""
	}
	return e.ID
}

var _ storage.Snapshotter = (*Store)(nil)
