// Package host runs LLM agents durably over append-only session ledgers.
//
// A [Host] ties a storage (the ledgers), a model (any OpenAI-compatible
// endpoint) and an [Agent] (model, system prompt, tools, bounds). A
// [Session] takes messages: [Session.Start] appends the user message and
// returns once it is durable, with a [Run] handle on the run that answers
// it — the agent loop: model pass, persist the step, run the tools, persist
// their results, repeat until the model stops or Agent.MaxSteps. Every step
// is durable as it finishes, so a process that dies mid-run leaves a ledger
// that loads and shows the run as interrupted, and a host resumes it.
//
// Runs belong to the host, not to their callers: a caller watches a run
// ([Run.Subscribe]: what was published, then live progress, from any
// offset), waits for it ([Run.Wait]) and may leave; only [Run.Cancel] (or
// [Host.Cancel]), a lost lease, the host's shutdown or the run's own end
// stop it. [Session.Send] is Start then Wait, with the caller's context
// bound to the run it starts: that context ending cancels the run, unless
// other callers' messages wait in it.
//
// Progress comes as JSON-safe [Progress] events, each carrying the id of
// the transcript item it streams into; [Session.Transcript] returns the
// same items, including the partial text of a run in flight.
//
// Tools implement [Tool]; [NewTool] wraps a Go function. Wasm plugins
// implement the same interface.
package host
