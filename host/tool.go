package host

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Effect is what a tool does to the world. It decides how the host treats a
// call that started and has no recorded result after a crash, and (later)
// which calls need approval.
type Effect string

// The tool effects.
const (
	// EffectRead: the tool only reads; running it again is harmless.
	EffectRead Effect = "read"
	// EffectWrite: the tool changes state the host owns (e.g. the
	// session's key-value store).
	EffectWrite Effect = "write"
	// EffectExternal: the tool changes the world outside the host (sends
	// mail, publishes, pays). The host records its intent before it runs.
	EffectExternal Effect = "external"
)

// ToolSpec describes a tool to the model and to the host.
type ToolSpec struct {
	// Name is what the model calls the tool by: 1 to 64 characters of
	// [A-Za-z0-9_-]. Required.
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema (an object schema) of the tool's
	// input. Default: {"type":"object"}.
	InputSchema json.RawMessage
	// Effect is the tool's effect on the world. Default: EffectRead.
	Effect Effect
	// Idempotent declares that running the tool again with the same call
	// id has no further effect (the call id is its idempotency key).
	// Default: false.
	Idempotent bool
	// Timeout bounds one call. Default: 0, which means the host's
	// Options.ToolTimeout.
	Timeout time.Duration
}

// ToolCall is one call of a tool by the model.
type ToolCall struct {
	// ID is the call's id, unique in the session: an idempotency key for
	// tools that declare themselves idempotent.
	ID string
	// SessionID is the session the call belongs to.
	SessionID string
	// Name is the tool's name.
	Name string
	// Input is the model's arguments, valid JSON.
	Input json.RawMessage
	// Journal keeps what the call does through a plugin's host functions,
	// durably, in the session's ledger, for a call interrupted by a crash
	// to be replayed (see [JournaledTool]); it holds what earlier attempts
	// of the call recorded. Nil when the call is not durable (a task that
	// is not, a call outside a run).
	Journal Journal
}

// A Journal keeps, durably, what one tool call did through its host
// functions (package plugins), so that a call a crash interrupted can be
// run again with the journal answering what it had asked, then go on
// live: exactly once all the way into the tool. Its entries are the
// call's tool-journal events (ledger.ToolJournal), appended through the
// run's lease like every event of the run.
type Journal interface {
	// Recorded returns what the call's earlier attempts recorded: the
	// module that made them (its hash) and the entries, in order; "" and
	// none on a call's first attempt.
	Recorded() (source string, entries []ledger.JournalEntry)
	// Record makes entries durable after those recorded before, for
	// the module source, and returns once they are (or why they are not:
	// the call must then fail, as nothing it does after is recorded).
	Record(ctx context.Context, source string, entries []ledger.JournalEntry) error
	// Event returns the payload of the event key posted to the call's
	// session ([Session.PostEvent]) and not taken by a call yet. A call
	// that finds it takes it by recording the entry that completes its
	// wait (ledger.JournalWaitDone, What the key); without it, the call
	// waits: it returns a *[WaitError], and the run parks.
	Event(ctx context.Context, key string) (payload []byte, ok bool, err error)
}

// A JournaledTool is a [Tool] whose every effect passes through its
// call's [Journal] (a Wasm plugin's: its only way out of the sandbox is
// the host's functions). A resumed run runs a call of it that has no
// result again, with its journal, whatever its effect: the journal
// answers what the call had done, and only a request in flight at the
// crash may be sent again (with the same idempotency key). A tool that
// is not journaled and has an external effect gets "outcome unknown"
// instead, unless it is idempotent.
type JournaledTool interface {
	Tool
	Journaled() bool
}

// IsJournaled reports whether t is a [JournaledTool] that says so.
func IsJournaled(t Tool) bool {
	j, ok := t.(JournaledTool)
	return ok && j.Journaled()
}

// ToolResult is what a tool returns to the model.
type ToolResult struct {
	// Output is what the model sees: text, or JSON.
	Output string
	// Source identifies the code that produced the output, e.g. a Wasm
	// module's "sha256:…" digest; recorded in the ledger. Optional.
	Source string
	// Fuel is the work a metered tool (a Wasm plugin) did for the call,
	// in its fuel units, failed calls included; recorded in the ledger.
	// 0 for a tool that is not metered.
	Fuel int64
	// Traffic is what the call did through a plugin's host functions (its
	// HTTP requests and key-value accesses), bounded, recorded in the
	// ledger beside the result; a Wasm plugin's calls always carry one
	// (empty when they did nothing through them). Its texts must be
	// UTF-8. Nil for other tools.
	Traffic *ledger.ToolTraffic
}

// Tool is a capability the model can call. Wasm plugins implement it; so can
// Go code, with [NewTool].
//
// Call may be invoked concurrently for different sessions. A returned error
// becomes an error result the model sees (it may fix its input and call
// again); it never fails the run. A panic is recovered and treated as an
// error.
type Tool interface {
	Spec() ToolSpec
	Call(ctx context.Context, call ToolCall) (ToolResult, error)
}

// Toolset is a source of tools that may change over time, such as a
// directory of hot-reloaded plugins. Tools returns the current tools; it
// is called at the start of every model pass and must be cheap and safe for
// concurrent use.
type Toolset interface {
	Tools() []Tool
}

// NewTool returns a [Tool] made of a spec and a Go function.
func NewTool(spec ToolSpec, fn func(ctx context.Context, call ToolCall) (ToolResult, error)) Tool {
	return funcTool{spec: spec, fn: fn}
}

type funcTool struct {
	spec ToolSpec
	fn   func(context.Context, ToolCall) (ToolResult, error)
}

func (t funcTool) Spec() ToolSpec { return t.spec }

func (t funcTool) Call(ctx context.Context, c ToolCall) (ToolResult, error) {
	return t.fn(ctx, c)
}

var _ Tool = funcTool{}

// ValidToolName reports whether name is acceptable as a tool name to
// OpenAI-compatible providers: 1 to 64 characters of [A-Za-z0-9_-].
// Plugins name their tools, validators and policies by the same rule.
func ValidToolName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
