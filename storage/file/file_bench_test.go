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
	ctx := b.Context()
	kinds := storagetest.EveryKind("run-bench")
	var pick []ledger.Event
	for _, e := range kinds {
		switch e.Kind {
		case ledger.KindStep, ledger.KindToolStart, ledger.KindToolResult:
			e.Step = stripped(e.Step)
			pick = append(pick, e)
		}
	}
	const n = 10_000
	for i := 0; i < n; {
		size := min(1+2*(i%2), n-i) // 1, 3, 1, 3, …
		batch := make([]ledger.Event, size)
		for j := range batch {
			batch[j] = pick[(i+j)%len(pick)]
			batch[j].ID = fmt.Sprintf("evt-%05d", i+j)
		}
		if err := st.Append(ctx, "big", batch...); err != nil {
			b.Fatal(err)
		}
		i += size
	}
	b.ReportAllocs()
	for b.Loop() {
		events, err := st.Load(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		if len(events) != n {
			b.Fatalf("loaded %d events, want %d", len(events), n)
		}
	}
}

// stripped drops a step's raw payload and reasoning, as typicalStep does.
func stripped(s *ledger.Step) *ledger.Step {
	if s == nil {
		return nil
	}
	c := *s
	c.Raw, c.Reasoning = nil, ""
	return &c
}
