package file_test

import (
	"fmt"
	"testing"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage/storagetest"
)

// typicalStep is a step event like the host writes after a model pass
// that asked for tools: a few hundred bytes encoded.
func typicalStep() ledger.Event {
	for _, e := range storagetest.EveryKind("run-bench") {
		if e.Kind == ledger.KindStep {
			e.Step.Raw = nil
			e.Step.Reasoning = ""
			return e
		}
	}
	panic("no step in storagetest.EveryKind")
}

// BenchmarkAppend appends one typical step event per operation, with Fsync
// off (a write(2)) and on (a write(2) and an fsync(2)).
func BenchmarkAppend(b *testing.B) {
	step := typicalStep()
	enc, err := ledger.Encode(step)
	if err != nil {
		b.Fatal(err)
	}
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			st, _ := openStore(b, b.TempDir(), fsync)
			ctx := b.Context()
			b.SetBytes(int64(len(enc) + 1))
			b.ReportAllocs()
			for b.Loop() {
				if err := st.Append(ctx, "bench", step); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad10k loads a session of 10,000 events (steps, tool results
// and tool starts, appended one at a time and in batches of three).
func BenchmarkLoad10k(b *testing.B) {
	st, _ := openStore(b, b.TempDir(), false)
	storagetest.BenchmarkLoad(b, st, 10_000)
}

// BenchmarkKV gets and sets values (a file each), without and with fsync.
func BenchmarkKV(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			st, _ := openStore(b, b.TempDir(), fsync)
			storagetest.BenchmarkKV(b, st)
		})
	}
}
