package redistest

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/redis"
)

// OlderBuild is a Redis store as a build of agentic-host that reads only
// the ledger features Reads sees it: its Load refuses a session with an
// event that uses another, with a *ledger.DecodeError, as an older build's
// decoder refuses a field it does not know, and it keeps no snapshots (its
// storage.Snapshotter methods fail with errors.ErrUnsupported, as a view
// over a store without them does). Every other method is the store's. Give a host over it Options.Features = Reads (serve:
// ledger_features) and it stands for that older build in a rolling
// deploy's tests.
type OlderBuild struct {
	*redis.Store
	Reads []ledger.Feature
}

// Load is the store's Load, refused as the older build would refuse it.
func (s OlderBuild) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
	events, err := s.Store.Load(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		if missing := ledger.MissingFeatures(s.Reads, e); missing != nil {
			return nil, &ledger.DecodeError{EventID: e.ID, Kind: e.Kind, Field: string(missing[0]),
				Err: fmt.Errorf("%w: a field this build does not know", ledger.ErrInvalid)}
		}
	}
	return events, nil
}

// PutSnapshot keeps nothing: an older build knows no snapshots.
func (s OlderBuild) PutSnapshot(context.Context, string, string, []byte) error {
	return fmt.Errorf("an older build keeps no snapshots: %w", errors.ErrUnsupported)
}

// LoadSnapshot reads none: an older build knows no snapshots.
func (s OlderBuild) LoadSnapshot(context.Context, string) ([]byte, string, []ledger.Event, error) {
	return nil, "", nil, fmt.Errorf("an older build keeps no snapshots: %w", errors.ErrUnsupported)
}
