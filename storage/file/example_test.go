package file_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// Open a store, append a user's input alone and a run's first events as one
// batch, and load the session back. Each Append is one line of the file.
func Example() {
	dir, err := os.MkdirTemp("", "sessions")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := file.Open(dir, file.Options{Fsync: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	ctx := context.Background()
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	input := ledger.Event{
		ID: "evt_1", Kind: ledger.KindInput, Time: t0,
		Input: &ledger.Input{MessageID: "msg_1", Parts: []ledger.Part{ledger.TextPart("Hello!")}},
	}
	start := ledger.Event{
		ID: "evt_2", Kind: ledger.KindRunStart, Time: t0.Add(time.Millisecond), RunID: "run_1",
		RunStart: &ledger.RunStart{Inputs: []string{"msg_1"}, ResponseID: "resp_1"},
	}
	step := ledger.Event{
		ID: "evt_3", Kind: ledger.KindStep, Time: t0.Add(time.Second), RunID: "run_1",
		Step: &ledger.Step{ResponseID: "resp_1", Text: "Hi! How can I help?", FinishReason: "stop"},
	}
	if err := st.Append(ctx, "sess_1", input); err != nil {
		log.Fatal(err)
	}
	if err := st.Append(ctx, "sess_1", start, step); err != nil {
		log.Fatal(err)
	}

	events, err := st.Load(ctx, "sess_1")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println(e.ID, e.Kind, e.Time.Format(time.RFC3339Nano))
	}
	data, err := os.ReadFile(filepath.Join(dir, "sess_1.jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) > 0 {
			fmt.Printf("%.60s…\n", line)
		}
	}
	// Output:
	// evt_1 input 2025-06-01T12:00:00Z
	// evt_2 run-start 2025-06-01T12:00:00.001Z
	// evt_3 step 2025-06-01T12:00:01Z
	// {"v":1,"id":"evt_1","kind":"input","time":"2025-06-01T12:00:…
	// [{"v":1,"id":"evt_2","kind":"run-start","time":"2025-06-01T1…
}
