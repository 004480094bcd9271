package fakemodel_test

import (
	"context"
	"fmt"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// A scripted reply, a scripted fault (served once, so the retry gets the
// reply), then the default echo, all seen through openai-go.
func Example() {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.Enqueue(
		fakemodel.Reply{Text: "Hello from the fake model."},
		fakemodel.Reply{Text: "Worth the wait.", Fault: &fakemodel.Fault{Kind: fakemodel.FaultRateLimit}},
	)

	client := openai.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ask := func(text string) {
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:    fakemodel.DefaultModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			fmt.Println("error:", err.(*openai.Error).StatusCode)
			return
		}
		fmt.Printf("%s (%s)\n", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason)
	}
	ask("hi")
	ask("again")
	ask("again")
	ask("ping")
	fmt.Println(srv.RequestCount(), "requests")
	// Output:
	// Hello from the fake model. (stop)
	// error: 429
	// Worth the wait. (stop)
	// You said: ping (stop)
	// 4 requests
}

// ParseFaults reads the value of a --faults flag.
func ExampleParseFaults() {
	spec, err := fakemodel.ParseFaults("rate=0.3,kinds=429+500+sever+stall,seed=7")
	if err != nil {
		panic(err)
	}
	var opts fakemodel.Options
	spec.Apply(&opts)
	fmt.Println(opts.FaultRate, opts.FaultKinds, opts.Seed)
	// Output: 0.3 [429 500 sever stall] 7
}
