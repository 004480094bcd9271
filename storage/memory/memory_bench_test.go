package memory_test

import (
	"testing"

	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

// BenchmarkAppend appends one typical step event, for comparison with the
// other stores' BenchmarkAppend.
func BenchmarkAppend(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storagetest.BenchmarkAppend(b, s)
}

func BenchmarkLoad10k(b *testing.B) {
	storagetest.BenchmarkLoad(b, memory.New(), 10_000)
}

func BenchmarkKV(b *testing.B) {
	storagetest.BenchmarkKV(b, memory.New())
}
