package host_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/storage/memory"
)

// A host over a memory store, an agent with one Go tool, and the fake model
// standing in for a real provider: the model calls the tool, then answers
// with its result.
func Example() {
	model, _ := fakemodel.Start(fakemodel.Options{})
	defer model.Close()

	weather := host.NewTool(host.ToolSpec{
		Name:        "get_weather",
		Description: "Current weather of a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}, func(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: `{"temp_c":12,"sky":"clear"}`}, nil
	})
	h, err := host.New(host.Options{
		Storage:  memory.New(),
		Provider: provider.Config{BaseURL: model.URL()},
		Agent:    host.Agent{Model: "fake/echo", Tools: []host.Tool{weather}},
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
