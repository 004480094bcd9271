package host

import (
	"testing"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/storagetest"
)

// TestMemStoreConformance: the private store of non-durable tasks keeps the
// storage contract like every adapter.
func TestMemStoreConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage { return newMemStore() })
}
