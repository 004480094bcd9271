package archive_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/archive"
	"github.com/agentichost/agentic/storage/memory"
)

// Export a session from one store and import it into another.
func Example() {
	ctx := context.Background()
	src, dst := memory.New(), memory.New()
	src.Append(ctx, "s1", ledger.Event{ID: "evt_1", Kind: ledger.KindPoke, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		RunID: "run_1", Poke: &ledger.Poke{Text: "hello"}})

	var buf bytes.Buffer
	w := archive.NewWriter(&buf, "")
	if err := archive.ExportSession(ctx, src, "s1", w); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}

	a, err := archive.Read(&buf, archive.ReadOptions{})
	if err != nil {
		panic(err)
	}
	rep, err := archive.Import(ctx, dst, a, archive.ImportOptions{})
	if err != nil {
		panic(err)
	}
	events, _ := dst.Load(ctx, "s1")
	fmt.Println(rep.Sessions, rep.Events, events[0].Poke.Text)
	// Output: [s1] 1 hello
}
