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
//
// # The package's files, by concern
//
// The API:
//   - host.go, options.go: [Host], [Model], [Options], [Agent] and its
//     bounds ([Timeouts]).
//   - session.go, run.go: [Session] (send, start, transcript, usage,
//     events) and [Run], a caller's handle on the run that answers it.
//   - progress.go, events.go, eventlog.go, attach.go, status.go: what is
//     seen of a run live ([Progress]), for logs and metrics ([Event],
//     [LogEvents]), by a viewer that
//     reconnects ([Attachment]), and as a session's state ([Status]), read
//     from the ledger and the lease.
//   - tool.go, hooks.go, policy.go, approval.go, approvaltoken.go: tools
//     and their effects, the hooks around model and tool calls, the
//     policies that gate a call, approvals and their tokens.
//   - task.go, validate.go: tasks with a typed deliverable and its
//     validators.
//   - delegate.go: sub-agents, an agent called as another's tool in a
//     child session.
//   - fork.go, delete.go: a session forked from another's ledger, and a
//     session deleted (with [InUseError] when something holds it).
//   - smooth.go: smooth streaming of a reply's text to a UI.
//   - wait.go: a plugin's call that waits for a time or an event.
//   - errors.go: the sentinel errors (features.go and wait.go keep the
//     ones of their own concern).
//
// The engine:
//   - sessions.go: who may touch a session, under which lock (the lock
//     order is written where the locks are declared).
//   - inbox.go: where a message goes, and who waits for what.
//   - loop.go: a run's life: it goes live on a goroutine of the host's,
//     under its timeouts, and loops over passes until it ends.
//   - pass.go: one model pass: the request replayed from the ledger, the
//     stream and its retries, a reply cut short, the step recorded, the
//     turn's end.
//   - toolexec.go: a pass's tool calls, each gated by the policies, and
//     their results recorded (afterTools, which resuming shares).
//   - settle.go: a run's end: the run-end recorded (or the run left
//     resumable), its waiters answered, its lease released.
//   - ledgerview.go, appendctx.go: what a run knows of its ledger (one
//     slice, one writer), and the deadline of each append.
//   - live.go, chunkwatch.go: the live item a client sees streaming, and
//     the watchdog of a silent stream.
//   - resume.go, sweep.go, lease.go: recovery by hand, recovery in bulk at
//     boot, and several hosts.
//   - compact.go, taskrun.go, runapproval.go: features that steer the
//     loop from outside, through its hooks (a hook's approval request:
//     [ApprovalNeededError]).
//   - fence.go: the one rule of every operation that removes or replaces
//     a session's data.
//   - features.go: the ledger features the hosts sharing a store agree on
//     (rolling upgrades).
//   - telemetry.go: the OpenTelemetry spans and metrics of runs.
//   - memstore.go: the private in-memory storage of ephemeral tasks.
//   - blobs.go, blobsweep.go: parts and tool outputs kept by reference in
//     the storage's blobs (Options.BlobThreshold), read back wherever the
//     bytes are needed, bounded by quotas ([BlobQuotaError]); the sweep of
//     unreferenced blobs ([SweepBlobs]).
package host
