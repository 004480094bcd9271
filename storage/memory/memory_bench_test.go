package memory_test

import (
	"testing"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

// BenchmarkAppend appends one typical step event (a few hundred bytes
// encoded), for comparison with the file store's BenchmarkAppend.
func BenchmarkAppend(b *testing.B) {
	s := memory.New()
	defer s.Close()
	step := typicalStep()
	enc, _ := ledger.Encode(step)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	ctx := b.Context()
	for b.Loop() {
		if err := s.Append(ctx, "bench", step); err != nil {
			b.Fatal(err)
		}
	}
}

// typicalStep is a step event like the host writes after a model pass that
// asked for one tool.
func typicalStep() ledger.Event {
	for _, e := range storagetest.EveryKind("run-bench") {
		if e.Kind == ledger.KindStep {
			e.Step.Raw = nil
			e.Step.Reasoning = ""
			return e
		}
	}
	panic("no step")
}

func BenchmarkLoad10k(b *testing.B) {
	storagetest.BenchmarkLoad(b, memory.New(), 10_000)
}

func BenchmarkKV(b *testing.B) {
	storagetest.BenchmarkKV(b, memory.New())
}
