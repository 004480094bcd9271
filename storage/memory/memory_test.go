package memory_test

import (
	"testing"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		s := memory.New()
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}
