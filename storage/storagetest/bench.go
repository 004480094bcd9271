package storagetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// TypicalStep returns a step event like the one a host appends after a
// model pass that asked for tools: the step of [EveryKind], without raw
// payload or reasoning, a few hundred bytes encoded.
func TypicalStep() ledger.Event {
	for _, e := range EveryKind("run-bench") {
		if e.Kind == ledger.KindStep {
			s := *e.Step
			s.Raw, s.Reasoning = nil, ""
			e.Step = &s
			return e
		}
	}
	panic("storagetest: no step in EveryKind")
}

// BenchmarkAppend measures one append of [TypicalStep] to one session of
// st, the commonest write of a run, and reports, beside ns/op, bytes (the
// encoded event) and allocations, the median and 99th percentile of the
// appends' latencies (p50-us, p99-us). A first append, outside the
// measure, warms the store up. Every adapter's benchmarks call it, so
// their figures compare.
func BenchmarkAppend(b *testing.B, st storage.Storage) {
	b.Helper()
	ctx := b.Context()
	step := TypicalStep()
	enc, err := ledger.Encode(step)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Append(ctx, "append", step); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, 1<<16)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := st.Append(ctx, "append", step); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p int) float64 { return float64(lat[min(len(lat)-1, len(lat)*p/100)].Nanoseconds()) / 1e3 }
	b.ReportMetric(pct(50), "p50-us")
	b.ReportMetric(pct(99), "p99-us")
}

// BenchmarkLoad fills session "big" of st with n events — the steps, tool
// starts and tool results of [EveryKind] (without raw payloads or
// reasoning), appended in batches of 1 and 3 as a host appends them — and
// measures loading it whole. Every adapter's benchmarks call it, so their
// figures compare.
func BenchmarkLoad(b *testing.B, st storage.Storage, n int) {
	b.Helper()
	ctx := b.Context()
	var pick []ledger.Event
	for _, e := range EveryKind("run-bench") {
		switch e.Kind {
		case ledger.KindStep, ledger.KindToolStart, ledger.KindToolResult:
			if e.Step != nil {
				s := *e.Step
				s.Raw, s.Reasoning = nil, ""
				e.Step = &s
			}
			pick = append(pick, e)
		}
	}
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

// BenchmarkKV measures what a plugin's idempotency check and record cost
// on kv: a Get of a key, and a Set of a 200-byte value, over 1,000 keys of
// one namespace. Every adapter's benchmarks call it, so their figures
// compare.
func BenchmarkKV(b *testing.B, kv storage.KV) {
	b.Helper()
	ctx := b.Context()
	value := []byte(fmt.Sprintf(`{"status":"published","post_id":"post-1","url":"https://blog.example/p/1","at":"2026-11-30T12:00:00Z"}%98s`, ""))
	const keys = 1000
	for i := range keys {
		if err := kv.Set(ctx, "plugins:bench", fmt.Sprintf("publish_post:call-%04d", i), value); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, ok, err := kv.Get(ctx, "plugins:bench", fmt.Sprintf("publish_post:call-%04d", i%keys)); err != nil || !ok {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Set", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(value)))
		i := 0
		for b.Loop() {
			if err := kv.Set(ctx, "plugins:bench", fmt.Sprintf("publish_post:call-%04d", i%keys), value); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
