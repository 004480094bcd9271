package storagetest

import (
	"fmt"
	"testing"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage"
)

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
