package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// A host over a memory store, an agent with one Go tool, and a scripted
// model standing in for a real provider (hosttest.Model, which behaves like
// a small agent when nothing is scripted): the model calls the tool, then
// answers with its result.
func Example() {
	weather := host.NewTool(host.ToolSpec{
		Name:        "get_weather",
		Description: "Current weather of a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}, func(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: `{"temp_c":12,"sky":"clear"}`}, nil
	})
	h, err := host.New(host.Options{
		Storage: memory.New(),
		Model:   hosttest.NewModel(),
		Agent:   host.Agent{Model: "test/model", Tools: []host.Tool{weather}},
	})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())

	res, err := h.Session("example").Send(context.Background(), "get_weather city=Paris", host.SendOptions{
		OnProgress: func(p host.Progress) {
			if p.Type == host.ProgressToolStart {
				fmt.Printf("calling %s with %s\n", p.Tool.Name, p.Tool.Input)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status)
	fmt.Println(res.Text)
	// Output:
	// calling get_weather with {"city":"Paris"}
	// completed
	// The get_weather tool returned: {"temp_c":12,"sky":"clear"}
}

// Start returns once the message is durable; the run is the host's. A
// caller follows its progress from any offset, and waits for its end — or
// leaves, and the run goes on.
func ExampleSession_Start() {
	model := hosttest.NewModel(hosttest.Reply{Text: "Paris is the capital of France."})
	h, err := host.New(host.Options{Storage: memory.New(), Model: model, Agent: host.Agent{Model: "test/model"}})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())

	run, err := h.Session("geo").Start(context.Background(), "What is the capital of France?", host.StartOptions{})
	if err != nil {
		panic(err)
	}
	sub := run.Subscribe(0)
	defer sub.Close()
	for {
		p, err := sub.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		switch p.Type {
		case host.ProgressText:
			fmt.Printf("%d: %q\n", p.Seq, p.Delta)
		case host.ProgressRunEnd:
			fmt.Printf("%d: %s\n", p.Seq, p.Status)
		}
	}
	res, err := run.Wait(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Text)
	// Output:
	// 2: "Paris "
	// 3: "is "
	// 4: "the "
	// 5: "capital "
	// 6: "of "
	// 7: "France."
	// 8: completed
	// Paris is the capital of France.
}

// A task: the model must submit a deliverable its JSON Schema accepts. The
// scripted model first submits one the schema rejects, reads the problems,
// and submits again.
func ExampleHost_Task() {
	model := hosttest.NewModel(
		hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: host.SubmitToolName, Arguments: `{"title":""}`}}},
		hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: host.SubmitToolName, Arguments: `{"title":"Hello"}`}}},
	)
	h, err := host.New(host.Options{Storage: memory.New(), Model: model, Agent: host.Agent{Model: "test/model"}})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())

	out := h.Task(context.Background(), host.TaskSpec{
		Prompt: "Write a headline.",
		Deliverable: host.Deliverable{
			Name:   "headline",
			Schema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","minLength":1}},"required":["title"]}`),
		},
	})
	fmt.Println(out.Status)
	fmt.Println(string(out.Value))
	fmt.Println(model.Requests()[1].Messages[2].Text())
	// Output:
	// submitted
	// {"title":"Hello"}
	// error: the deliverable is invalid; fix these problems and call submit_deliverable again:
	// /title: minLength: got 0, want 1
}

// LogEvents logs the live events of the host's runs — what
// `agentic-host chat --logs` prints — on any slog.Logger. (The example
// leaves out the attributes that change from run to run: the time, the
// run's id and the durations.)
func ExampleLogEvents() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "run", "elapsed_ms", "duration_ms":
				return slog.Attr{}
			}
			return a
		},
	}))
	h, err := host.New(host.Options{
		Storage: memory.New(),
		Model:   hosttest.NewModel(hosttest.Reply{Text: "Hello."}),
		Agent:   host.Agent{Model: "test/model"},
		OnEvent: host.LogEvents(logger),
	})
	if err != nil {
		panic(err)
	}
	if _, err := h.Session("s1").Send(context.Background(), "hi", host.SendOptions{}); err != nil {
		panic(err)
	}
	h.Close(context.Background()) // waits for the events queued
	// Output:
	// level=INFO msg=run-start session=s1 agent=default step=0
	// level=INFO msg=step session=s1 agent=default step=0 finish=stop model=test/model tokens_in=1 tokens_out=2 cost=0.000000
	// level=INFO msg=run-end session=s1 agent=default step=0 status=completed
}

// Fork makes a new session from a session's ledger up to a response, and
// goes on from there with another model: the tool the response called is
// not called again, its recorded result is the model's to read.
func ExampleHost_Fork() {
	calls := 0
	weather := host.NewTool(host.ToolSpec{
		Name:        "get_weather",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}, func(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
		calls++
		return host.ToolResult{Output: `{"temp_c":12}`}, nil
	})
	agent := host.Agent{Model: "test/model", Tools: []host.Tool{weather}}
	h, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(), Agent: agent})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())
	ctx := context.Background()
	if _, err := h.Session("trip").Send(ctx, "get_weather city=Oslo", host.SendOptions{}); err != nil {
		panic(err)
	}
	tr, _ := h.Session("trip").Transcript(ctx)
	step := tr.Items[1] // the response that called the tool

	other := agent
	other.Model = "test/other"
	run, err := h.Fork(ctx, host.ForkOptions{Source: "trip", At: step.ID, SessionID: "trip-b", Agent: &other})
	if err != nil {
		panic(err)
	}
	res, _ := run.Wait(ctx)
	fork, _ := h.Session("trip-b").Transcript(ctx)
	fmt.Println(res.Status, res.Text)
	fmt.Println("forked from", fork.ForkedFrom.Source, "with", fork.ForkedFrom.Model)
	fmt.Println("tool calls:", calls)
	// Output:
	// completed The get_weather tool returned: {"temp_c":12}
	// forked from trip with test/other
	// tool calls: 1
}

// SweepBlobs deletes the blobs no event refers to once they are older
// than the grace; a referenced blob always stays.
func ExampleSweepBlobs() {
	ctx := context.Background()
	store := memory.New()
	blobs := store // memory.Store keeps blobs (storage.Blobs)
	kept, _ := blobs.PutBlob(ctx, []byte("an image a message refers to"))
	_, _ = blobs.PutBlob(ctx, []byte("an orphan"))
	_ = store.Append(ctx, "s1", ledger.Event{ID: "e1", Kind: ledger.KindInput, Time: time.Now().UTC(),
		Input: &ledger.Input{MessageID: "m1", Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Blob: kept, Size: 28}}}})

	// Grace -1 spares nothing for its age (the default spares an hour's).
	res, err := host.SweepBlobs(ctx, store, host.BlobSweepOptions{Grace: -1})
	fmt.Println(res.Referenced, res.Deleted, res.DeletedBytes, err)
	// Output: 1 1 9 <nil>
}
