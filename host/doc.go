// Package host runs LLM agents durably over append-only session ledgers.
//
// A [Host] ties a storage (the ledgers), a model (any OpenAI-compatible
// endpoint) and an [Agent] (model, system prompt, tools, bounds). A
// [Session] sends messages: [Session.Send] appends the user message, runs
// the agent loop — model pass, persist the step, run the tools, persist
// their results, repeat until the model stops or Agent.MaxSteps — and
// returns a [RunResult]. Every step is durable as it finishes, so a process
// that dies mid-run leaves a ledger that loads and shows the run as
// interrupted.
//
// Progress streams to [SendOptions.OnProgress] as JSON-safe [Progress]
// events, each carrying the id of the transcript item it streams into;
// [Session.Transcript] returns the same items, including the partial text of
// a run in flight.
//
// Tools implement [Tool]; [NewTool] wraps a Go function. Wasm plugins
// implement the same interface.
package host
