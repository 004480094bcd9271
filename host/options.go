package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Options configures a [Host]. The zero value of every field but Storage,
// Model and Agent.Model is a usable default.
type Options struct {
	// Storage keeps the ledgers. Required.
	Storage storage.Storage
	// Model streams model passes. Required: the host reads no environment
	// and builds no client itself; the program that builds the host
	// passes one (a *provider.Client over OpenRouter or any
	// OpenAI-compatible endpoint, a hosttest.Model in tests).
	Model Model
	// Agent is the agent sessions run unless a send names another.
	// Agent.Model is required.
	Agent Agent
	// Validators are the deliverable validators tasks may name
	// (TaskSpec.ValidatorName): a task's run records the name, so that a
	// host resuming the run after a restart checks its submissions with
	// the same validator. Default: none.
	Validators map[string]Validator
	// ToolTimeout bounds a tool call whose spec sets no Timeout. Default:
	// 0, which means 60s; -1 disables the bound.
	ToolTimeout time.Duration
	// Logger receives the host's logs. Default: slog.Default().
	Logger *slog.Logger
	// Retry bounds and paces the retries of a model pass that failed
	// with a transient error. Default: the zero model.RetryPolicy (6
	// attempts, 500ms doubling to 30s, Retry-After honoured up to 2m).
	Retry model.RetryPolicy
	// AutoResume, when set, makes the host re-drive interrupted runs at
	// boot (see [AutoResume]). Default: nil, off; [Host.Resume] still
	// resumes a session on demand.
	AutoResume *AutoResume
	// Compaction keeps sessions within the model's context window (see
	// [Compaction]). Default: nil, which compacts only when the provider
	// reports a context overflow (then with the Compaction defaults).
	Compaction *Compaction
	// NoSnapshots makes the host read and write no snapshots of long
	// sessions (storage.Snapshotter): every answer and resume loads the
	// whole ledger. Default false: a session the host compacted twice is
	// answered and resumed from its snapshot and the events after it (see
	// docs/performance.md, "Long sessions").
	NoSnapshots bool
	// LeaseTTL is the time to live of a session's lease, when the storage
	// has leases (storage.Leaser): how long a dead host's session stays
	// locked before another host may resume it. The lease is renewed
	// every third of it. Default: 0, which means 15s.
	LeaseTTL time.Duration
	// Tenant names the tenant the host serves: approval tokens are bound
	// to it. Default: "".
	Tenant string
	// ApprovalSecret keys the HMAC of approval tokens (see
	// [Session.DecideWithToken]): every host sharing a storage must share
	// it, and it must survive restarts for tokens to. At least 32 bytes.
	// Default: nil, a random secret for the life of the host (tokens it
	// mints are then good only on it, until it stops).
	ApprovalSecret []byte
	// HostID names this host in the ledger's resume-attempt events.
	// Default: "<hostname>-<pid>".
	HostID string
	// Agreement tells which ledger features every live host sharing the
	// storage reads: the host writes an event that uses one only while
	// all do (see [Agreement]). Hosts of one process may share one.
	// Default: nil — the host announces and agrees on its own when the
	// storage is shared (storage.Leaser and storage.KV), and writes what
	// it reads itself otherwise.
	Agreement *Agreement
	// Features are the ledger features the host announces that it reads,
	// when it makes its own Agreement; without one, the features it
	// writes. Default: nil, every feature of this build
	// (ledger.Features). Fewer keep the hosts sharing the storage from
	// writing the others, so that a rollback to a build that lacks them
	// stays possible.
	Features []ledger.Feature
	// Hooks wrap the host's model calls and tool calls, in this order
	// (see [Hook]); [Host.AddHook] adds more. Default: none.
	Hooks []Hook
	// Timeouts bound the host's own work (see [Timeouts]). Default: the
	// zero Timeouts, every bound at its default.
	Timeouts Timeouts
	// OnEvent receives the live events of the host's runs (see [Event]):
	// run-start, step, retry, compaction, poke, queued-message,
	// auto-resume, approval-requested, approval-decided, timeout, run-end.
	// Each is sent once what it tells is durable, in order per run. It is
	// called from a goroutine of its own, one event at a time, through a
	// queue of 4096 events: a hook that falls behind loses events (counted
	// by [Host.DroppedEvents], with a warning in the log) rather than
	// stall a run, and one that panics is logged and called with the next
	// event. Close waits for the events queued. Default: nil, none.
	OnEvent func(Event)
	// Telemetry turns on OpenTelemetry spans and metrics of the runs (see
	// [Telemetry]). Default: nil, none, at no cost.
	Telemetry *Telemetry
	// Outbox is told of every batch of ledger events before the host
	// appends it (see [Outbox]). Default: nil, none.
	Outbox Outbox
	// BlobThreshold is the size in bytes above which, when the storage
	// implements storage.Blobs, a message's image, audio and file parts
	// and a tool's output are kept by reference: put once in the blob
	// store (the same bytes sent twice are stored once), their event
	// keeping the digest, the media type and the size. The host reads
	// them back wherever the bytes are needed (the model's request, which
	// is what it would have been with the bytes inline; compaction;
	// transcripts). Tool outputs are first cut to
	// Agent.MaxToolResultBytes. Default: 0, which means 64 KiB
	// ([DefaultBlobThreshold]); -1 keeps every byte inline.
	BlobThreshold int64
	// BlobQuota bounds the bytes of all the blobs of the storage (for a
	// tenant's host over its prefixed store: the tenant's): a message
	// whose parts would pass it fails with a [*BlobQuotaError], nothing
	// appended. Checked when a message is sent, against what the store
	// lists and what this host's sends in flight reserved before their
	// puts, so that sends at once on one host cannot pass it together;
	// hosts sharing a storage do not see one another's reservations, so
	// each may add, at once, what the quota had left when it looked. Tool
	// outputs are not refused for it. Default: 0, no quota.
	BlobQuota int64
	// MaxBlobBytes bounds one part kept by reference: a message with a
	// larger one fails with a [*BlobQuotaError], nothing appended.
	// Default: 0, no bound.
	MaxBlobBytes int64
	// Delegation bounds the child runs that delegate calls start (see
	// [NewDelegateTool] and [DelegateLimits]). Default: the zero value,
	// each bound its default.
	Delegation DelegateLimits
}

// DelegateLimits bounds the child runs the delegate calls of a host's runs
// start. A call past a bound starts nothing: its result is an error the
// calling model reads ([ErrDelegateLimit]), naming the bound. The counts
// are kept in the host's memory from a run's start on this host: a run
// resumed elsewhere, or after a restart, counts its calls again from
// there (a call made again finds its child, and counts once more).
type DelegateLimits struct {
	// MaxDepth bounds the nesting: the children of a run that is no
	// delegate's child are of depth 1, theirs of depth 2, and a call that
	// would start a child deeper than MaxDepth is refused. Default: 0,
	// which means 4 ([DefaultDelegateDepth]); -1, no bound.
	MaxDepth int
	// MaxPerRun bounds the delegate calls one run makes (parallel calls
	// of one step and calls of every step together). Default: 0, which
	// means 16 ([DefaultDelegatesPerRun]); -1, no bound.
	MaxPerRun int
	// MaxPerMessage bounds the children of a message's whole tree: the
	// run that answers it (a run that is no delegate's child) and every
	// run under it, however deep. Default: 0, which means 64
	// ([DefaultDelegatesPerMessage]); -1, no bound.
	MaxPerMessage int
	// Admit, when set, is asked before a child run starts, with the
	// child's session id, as a caller of the API would admit a message
	// (a service's run limits, rate limits, budgets): it returns the
	// function that gives the place back once the child run is in flight,
	// or why it may not start, which the calling model reads. Default:
	// nil, every child that passes the bounds above starts.
	Admit func(ctx context.Context, sessionID string) (release func(), err error)
}

// The defaults of [DelegateLimits].
const (
	DefaultDelegateDepth       = 4
	DefaultDelegatesPerRun     = 16
	DefaultDelegatesPerMessage = 64
)

// normalized fills the defaults (0) and turns -1 into 0 (no bound).
func (l DelegateLimits) normalized() (DelegateLimits, error) {
	var errs []error
	for _, b := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxDepth", &l.MaxDepth, DefaultDelegateDepth}, {"MaxPerRun", &l.MaxPerRun, DefaultDelegatesPerRun}, {"MaxPerMessage", &l.MaxPerMessage, DefaultDelegatesPerMessage}} {
		switch {
		case *b.v == 0:
			*b.v = b.def
		case *b.v == -1:
			*b.v = 0
		case *b.v < -1:
			errs = append(errs, fmt.Errorf("host: Options.Delegation.%s %d: want a bound, 0 for the default or -1 for none", b.name, *b.v))
		}
	}
	return l, errors.Join(errs...)
}

// Outbox is what must follow ledger events out of the host (a webhook per
// run-end, say) and must be written before them: the host calls Stage
// with each batch of events it is about to append to a session, from
// every place it appends, and appends the batch only when Stage returned
// nil (an error fails the append as a storage failure would: a run's
// append leaves it interrupted, resumable). So a crash between the two
// writes leaves something staged whose events no ledger holds, never an
// event whose consequence was not staged: an Outbox acts on what it
// staged only once the session's ledger holds the event (the host may
// die before its append, or its append may be refused), and forgets
// what no ledger holds after a grace longer than an append can take
// ([Timeouts].Append). Stage is called with the session's appends
// serialised, and must not keep events.
type Outbox interface {
	Stage(ctx context.Context, sessionID string, events []ledger.Event) error
}

// Timeouts names the bounds the host puts on its own work; each is reported
// as a [*TimeoutError] of its kind. The zero value of every field is its
// default.
type Timeouts struct {
	// Append bounds one ledger append of a run (and the reload of the
	// ledger after another host's append). Appends are detached from
	// callers, so that finished work is recorded; an append that times out
	// leaves the run interrupted, resumable. Default: 0, which means 30s.
	Append time.Duration
	// LeaseRelease bounds giving a session's lease back when its runs
	// end; a release that times out lets the lease lapse (another host
	// waits up to Options.LeaseTTL to take the session). Default: 0,
	// which means 5s.
	LeaseRelease time.Duration
	// Poll paces a send that waits on another host's run when the storage
	// cannot watch sessions (storage.Watcher). Default: 0, which means
	// 250ms.
	Poll time.Duration
}

// The defaults of [Timeouts].
const (
	DefaultAppendTimeout       = 30 * time.Second
	DefaultLeaseReleaseTimeout = 5 * time.Second
	DefaultPollInterval        = 250 * time.Millisecond
)

func (t Timeouts) normalized() (Timeouts, error) {
	var errs []error
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Append", &t.Append, DefaultAppendTimeout}, {"LeaseRelease", &t.LeaseRelease, DefaultLeaseReleaseTimeout}, {"Poll", &t.Poll, DefaultPollInterval}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("host: Options.Timeouts.%s %s is negative", f.name, *f.v))
		}
	}
	return t, errors.Join(errs...)
}

// Agent is the configuration an agent runs with: model, instructions, tools
// and bounds. It is a value; the host copies it at the start of each run.
type Agent struct {
	// Name identifies the agent in the ledger. Default: "default".
	Name string
	// Model is the model id sent to the provider. Required.
	Model string
	// Fallback names the models to ask, in order, when a pass's model is
	// not served (model.Unavailable: an unknown or withdrawn id, no
	// endpoint for it) or its transient failures outlast the retry
	// policy: the pass goes to the next at once, recorded in the ledger
	// as a retry naming both models, and each step records the model
	// that answered (usage and cost are the answering model's). A failure
	// no other model can mend (a bad request, credits, auth, a context
	// overflow) never falls back. Compaction falls back likewise. An
	// OpenAI-compatible router's own fallback (OpenRouter's "models"
	// parameter, in ExtraBody) stays possible beside it. Default: none.
	Fallback []string
	// ExtraBody are extra top-level fields of each of the agent's model
	// requests, its passes' and its compactions' (model.Request.Extra),
	// for what an OpenAI-compatible endpoint offers beyond the common
	// wire: OpenRouter's "models" (its own fallback inside one request;
	// the step records the model its response names), "provider"
	// (routing among providers), "reasoning", "transforms". The fields the
	// host writes itself (model, messages, tools, stream, stream_options,
	// max_tokens, max_completion_tokens) may not be set here, and every
	// value must encode as JSON. Default: none.
	ExtraBody map[string]any
	// Retry bounds and paces the retries of the agent's model passes (per
	// cause with Retry.ByCause; see model.RetryPolicy). Default: nil,
	// the host's Options.Retry.
	Retry *model.RetryPolicy
	// System is the system prompt. Default: none.
	System string
	// Tools the model may call. Names must be unique. Default: none.
	Tools []Tool
	// Toolsets provide tools that may change while the host runs, such as
	// hot-reloaded plugins. They are asked for their tools at the start of
	// every model pass; a pass and its tool calls use that snapshot. A
	// toolset tool whose name is taken by an earlier tool is skipped with
	// a warning. Default: none.
	Toolsets []Toolset
	// MaxSteps bounds the model passes of one run; a run that still asks
	// for tools at the bound ends failed. Default: 0, which means 16.
	MaxSteps int
	// MaxTokens bounds each pass's output. Default: 0, the provider's own.
	MaxTokens int
	// Policies decide every tool call before it runs: allow, deny, or
	// require a person's approval (see [Policy]); deny beats
	// require_approval beats allow. Default: none, which means
	// [DefaultPolicy]: read and write calls run, calls with an external
	// effect need approval.
	Policies []Policy
	// ToolApprovals overrides the policies for the tools it names (see
	// [ApprovalMode]), for unattended runs. Default: none.
	ToolApprovals map[string]ApprovalMode
	// ApprovalTTL is how long an approval request waits for a decision;
	// past it, the call is refused as expired and the run goes on.
	// Default: 0, which means 24h.
	ApprovalTTL time.Duration
	// PolicyTimeout bounds one policy's decision; a policy past it denies
	// the call. Default: 0, which means 10s.
	PolicyTimeout time.Duration
	// Compaction, when set, is how the agent's runs keep their sessions
	// within the model's context window, in place of the host's
	// Options.Compaction (see [Compaction]): an agent bound to one session
	// with [Host.SessionWith] gives that session a compaction of its own.
	// Its zero fields take the Compaction defaults, not the host's.
	// Default: nil, the host's.
	Compaction *Compaction
	// Timeouts bound the agent's runs, their steps, model streams and
	// tool calls (see [AgentTimeouts]). Default: the zero AgentTimeouts,
	// no bound but the tool calls' Options.ToolTimeout.
	Timeouts AgentTimeouts
	// MaxToolResultBytes bounds what one tool result puts before the
	// model (and in the ledger): a longer one is cut, with a line saying
	// how much was (see ledger.CapToolOutput), so that one result cannot
	// fill the context window. Default: 0, which means 64 KiB; -1
	// disables the bound.
	MaxToolResultBytes int
	// OnInterrupted is what becomes of a run of this agent that its
	// process left interrupted (it died, or was stopped mid-run), when a
	// host takes it over — the boot sweep, a takeover of a dead host's
	// lease, or the next message to the session: [ActionResume] goes on
	// where the ledger stopped, [ActionRestart] runs its inputs again from
	// scratch, [ActionFail] ends it failed, and [ActionLeave] leaves it
	// interrupted until the next message (which closes it as interrupted
	// and starts a run of its own, whose model sees the transcript; the
	// interrupted turn is not replayed) or an explicit [Session.Resume].
	// It decides before AutoResume.OnInterrupted, which it overrides; a
	// resume on demand ([Session.Resume]) does what its options say.
	// Default: "", which means AutoResume.OnInterrupted's choice, else
	// ActionResume.
	OnInterrupted ResumeAction
	// Overlap is what a message to a session does while a run of the
	// session works (in this host or another, or parked for approvals)
	// when the message names this agent: [OverlapQueue] queues it into
	// that run, which folds it in at its next step; [OverlapReject]
	// refuses it with a [*BusyError] naming the run, appending nothing;
	// [OverlapInterrupt] cancels that run (durably, what it did kept, as
	// a cancel does) and answers the message in a run of its own;
	// [OverlapRollback] does so too and drops the cancelled run's turn
	// from what the model sees next (the ledger keeps it, marked). A
	// message sent again with the RequestID of one accepted before is
	// answered as the first, never refused. SendOptions.Overlap overrides
	// it for one message. Default: "", which means OverlapQueue.
	Overlap Overlap
}

// Overlap is what a message does when it finds its session's run working
// (see Agent.Overlap).
type Overlap string

// The overlap rules.
const (
	// OverlapQueue queues the message into the run in flight.
	OverlapQueue Overlap = "queue"
	// OverlapReject refuses the message ([*BusyError]): one turn at a
	// time.
	OverlapReject Overlap = "reject"
	// OverlapInterrupt cancels the run in flight (a parked one too) and
	// answers the message in a new run: the model sees what the
	// cancelled run did.
	OverlapInterrupt Overlap = "interrupt"
	// OverlapRollback is OverlapInterrupt, and the cancelled run's turn
	// (its messages, passes and tool results) is dropped from what the
	// model sees next; the ledger and the transcript keep it.
	OverlapRollback Overlap = "rollback"
)

// interrupts reports whether o stops the run in flight.
func (o Overlap) interrupts() bool { return o == OverlapInterrupt || o == OverlapRollback }

// validOverlap checks an overlap rule ("" is the default).
func validOverlap(o Overlap) error {
	switch o {
	case "", OverlapQueue, OverlapReject, OverlapInterrupt, OverlapRollback:
		return nil
	}
	return fmt.Errorf("overlap %q is not queue, reject, interrupt or rollback", o)
}

// DefaultMaxToolResultBytes is Agent.MaxToolResultBytes when it is 0.
const DefaultMaxToolResultBytes = 64 << 10

// AgentTimeouts are the named bounds of an agent's runs. Each that fires is
// reported as a [*TimeoutError] of its kind, in the run's end (reason and
// [RunResult.Timeout]), its progress and its live events; none rolls back
// what the run recorded. The zero value of every field means no bound
// (Tool: Options.ToolTimeout); a negative one is an error.
type AgentTimeouts struct {
	// Total bounds a run's working time: from its run-start, less the time
	// it waited for approvals, counted from the ledger's times (so a run
	// resumed after a crash, on any host, keeps the time it used — the
	// downtime counts). Past it, the run ends timed_out ("total"), keeping
	// the text that streamed. Default: 0, none.
	Total time.Duration
	// Step bounds one step: a model pass, with its retries, and the tool
	// calls it asked for. Past it, the run ends timed_out ("step").
	// Default: 0, none.
	Step time.Duration
	// FirstChunk bounds the wait, after a model request is sent, for the
	// first fragment of the reply (text, reasoning or a tool call). Past
	// it, the attempt is cut and retried as a transient failure; once the
	// retries are spent, the run ends timed_out ("first-chunk"). Default:
	// 0, none (the model client's own bounds apply).
	FirstChunk time.Duration
	// Chunk bounds the silence between two fragments of a reply; past it,
	// as FirstChunk ("chunk"). Default: 0, none.
	Chunk time.Duration
	// Tool bounds a tool call whose ToolSpec sets no Timeout, instead of
	// Options.ToolTimeout. Past it, the model is told that the call timed
	// out, and the run goes on. Default: 0, Options.ToolTimeout.
	Tool time.Duration
}

func (t AgentTimeouts) check() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Total", t.Total}, {"Step", t.Step}, {"FirstChunk", t.FirstChunk}, {"Chunk", t.Chunk}, {"Tool", t.Tool}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("host: Agent.Timeouts.%s %s is negative", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// DefaultMaxSteps is the bound on model passes per run when Agent.MaxSteps
// is 0.
const DefaultMaxSteps = 16

// DefaultToolTimeout is the tool call bound when Options.ToolTimeout is 0.
const DefaultToolTimeout = 60 * time.Second

// hostBodyFields are the fields of a model request that the host writes
// itself, which Agent.ExtraBody may not set.
var hostBodyFields = []string{"max_completion_tokens", "max_tokens", "messages", "model", "stream", "stream_options", "tools"}

// HostBodyField reports whether name is a field of a model request that
// the host writes itself, which Agent.ExtraBody may not set.
func HostBodyField(name string) bool { return slices.Contains(hostBodyFields, name) }

// normalizeAgent fills an agent's defaults and checks it.
func normalizeAgent(a Agent) (Agent, error) {
	var errs []error
	if a.Name == "" {
		a.Name = "default"
	}
	if a.Model == "" {
		errs = append(errs, errors.New("host: Agent.Model is required"))
	}
	for i, m := range a.Fallback {
		switch {
		case m == "":
			errs = append(errs, fmt.Errorf("host: Agent.Fallback[%d] is empty", i))
		case m == a.Model || slices.Contains(a.Fallback[:i], m):
			errs = append(errs, fmt.Errorf("host: Agent.Fallback[%d]: model %q is named twice", i, m))
		}
	}
	if a.Retry != nil {
		if err := a.Retry.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("host: Agent.Retry: %w", err))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.ExtraBody)) {
		if HostBodyField(k) {
			errs = append(errs, fmt.Errorf("host: Agent.ExtraBody[%q]: the host writes that field itself", k))
		} else if _, err := json.Marshal(a.ExtraBody[k]); err != nil {
			errs = append(errs, fmt.Errorf("host: Agent.ExtraBody[%q]: %v", k, err))
		}
	}
	if a.MaxSteps == 0 {
		a.MaxSteps = DefaultMaxSteps
	}
	if a.MaxSteps < 0 {
		errs = append(errs, fmt.Errorf("host: Agent.MaxSteps %d is negative", a.MaxSteps))
	}
	seen := map[string]bool{}
	for i, t := range a.Tools {
		if t == nil {
			errs = append(errs, fmt.Errorf("host: Agent.Tools[%d] is nil", i))
			continue
		}
		name := t.Spec().Name
		switch {
		case !ValidToolName(name):
			errs = append(errs, fmt.Errorf("host: Agent.Tools[%d]: invalid tool name %q", i, name))
		case seen[name]:
			errs = append(errs, fmt.Errorf("host: Agent.Tools[%d]: duplicate tool name %q", i, name))
		}
		seen[name] = true
	}
	for i, ts := range a.Toolsets {
		if ts == nil {
			errs = append(errs, fmt.Errorf("host: Agent.Toolsets[%d] is nil", i))
		}
	}
	for i, p := range a.Policies {
		if p == nil {
			errs = append(errs, fmt.Errorf("host: Agent.Policies[%d] is nil", i))
		}
	}
	for name, mode := range a.ToolApprovals {
		switch mode {
		case ApproveAlways, ApproveNever, ApproveAsk:
		default:
			errs = append(errs, fmt.Errorf("host: Agent.ToolApprovals[%q]: %q is not always, never or ask", name, mode))
		}
	}
	switch {
	case a.ApprovalTTL == 0:
		a.ApprovalTTL = DefaultApprovalTTL
	case a.ApprovalTTL < 0:
		errs = append(errs, fmt.Errorf("host: Agent.ApprovalTTL %s is negative", a.ApprovalTTL))
	}
	switch {
	case a.PolicyTimeout == 0:
		a.PolicyTimeout = DefaultPolicyTimeout
	case a.PolicyTimeout < 0:
		errs = append(errs, fmt.Errorf("host: Agent.PolicyTimeout %s is negative", a.PolicyTimeout))
	}
	switch {
	case a.MaxToolResultBytes == 0:
		a.MaxToolResultBytes = DefaultMaxToolResultBytes
	case a.MaxToolResultBytes < -1:
		errs = append(errs, fmt.Errorf("host: Agent.MaxToolResultBytes %d is negative (use -1 to disable the bound)", a.MaxToolResultBytes))
	}
	if err := a.Timeouts.check(); err != nil {
		errs = append(errs, err)
	}
	if a.Compaction != nil {
		c, err := a.Compaction.normalized("Agent.Compaction")
		if err != nil {
			errs = append(errs, err)
		}
		a.Compaction = &c
	}
	switch a.OnInterrupted {
	case "", ActionResume, ActionRestart, ActionFail, ActionLeave:
	default:
		errs = append(errs, fmt.Errorf("host: Agent.OnInterrupted %q is not resume, restart, fail or leave", a.OnInterrupted))
	}
	if err := validOverlap(a.Overlap); err != nil {
		errs = append(errs, fmt.Errorf("host: Agent.%s", strings.Replace(err.Error(), "overlap", "Overlap", 1)))
	} else if a.Overlap == "" {
		a.Overlap = OverlapQueue
	}
	a.Tools = append([]Tool(nil), a.Tools...)
	a.Toolsets = append([]Toolset(nil), a.Toolsets...)
	a.Policies = append([]Policy(nil), a.Policies...)
	a.ToolApprovals = maps.Clone(a.ToolApprovals)
	return a, errors.Join(errs...)
}

// AutoResume configures the host's boot sweep: on [New], the host lists the
// sessions of its storage (which must implement storage.Lister) and
// re-drives every run that was interrupted (a run-start without a run-end).
// When the sweep does not repeat (see Interval), the host also resumes, by
// the same rules, a run of its own that a storage error interrupted: after
// 100 ms, then after twice the wait while the resume cannot start, 7 times
// at most.
type AutoResume struct {
	// AgentFor returns the agent that resumes a session. Default: nil,
	// which means Options.Agent.
	AgentFor func(ctx context.Context, sessionID string) (Agent, error)
	// MaxAttempts bounds the resume attempts of one run, counted in the
	// ledger, so that a run that crashes the process on every resume
	// cannot wedge the boot in a loop: past the bound, the sweep leaves
	// the run interrupted (its input kept) for a manual [Host.Resume].
	// Default: 0, which means 3.
	MaxAttempts int
	// MaxConcurrent bounds the resumed runs in flight at once, over every
	// sweep of the host: a sweep waits for a free slot before it resumes
	// another run. Default: 0, which means 4.
	MaxConcurrent int
	// Stagger is the pause between starting two resumes, to spread the
	// load on the provider after a restart. Default: 0, none.
	Stagger time.Duration
	// OnInterrupted chooses what to do with each interrupted run whose
	// agent's Agent.OnInterrupted is "" (an agent's own choice wins). An
	// error, a panic or an unknown action falls back to ActionResume.
	// Default: nil, which means ActionResume.
	OnInterrupted func(ctx context.Context, run Interrupted) (ResumeAction, error)
	// OnResumed is told how each resumed run ended (res.Status, or err
	// when the ledger could not be written). Default: nil.
	OnResumed func(sessionID string, res RunResult, err error)
	// Interval repeats the sweep while the host lives, so that the runs
	// of a host that died are resumed by the others once its leases
	// lapse. A sweep never waits for the runs it resumed to end, so a
	// long run does not hold back the next sweep. Default: 0, which means Options.LeaseTTL when the storage has
	// leases (several hosts share it), else no repeat; -1 disables it.
	Interval time.Duration
}

// The defaults of [AutoResume].
const (
	DefaultResumeAttempts = 3
	DefaultMaxConcurrent  = 4
)

func (a AutoResume) normalized() (AutoResume, error) {
	var errs []error
	if a.MaxAttempts == 0 {
		a.MaxAttempts = DefaultResumeAttempts
	}
	if a.MaxConcurrent == 0 {
		a.MaxConcurrent = DefaultMaxConcurrent
	}
	if a.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.MaxAttempts %d is negative", a.MaxAttempts))
	}
	if a.MaxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.MaxConcurrent %d is negative", a.MaxConcurrent))
	}
	if a.Interval < -1 {
		errs = append(errs, fmt.Errorf("host: AutoResume.Interval %s is negative (use -1 to disable)", a.Interval))
	}
	if a.Stagger < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.Stagger %s is negative", a.Stagger))
	}
	return a, errors.Join(errs...)
}

// Compaction configures how the host keeps a session within the model's
// context window: when the prompt of a pass reaches Limit of the window, the
// older turns are summarised, by the model, into a hand-off note that stands
// for them from then on. The transcript never shows the note; the model's
// replay does.
type Compaction struct {
	// Limit is the fraction of the context window at which to compact,
	// measured on the provider-reported prompt and completion tokens of
	// the last pass. Default: 0, which means 0.8.
	Limit float64
	// KeepRecent is the number of most recent user messages and model
	// passes kept verbatim after a compaction. Default: 0, which means 4.
	KeepRecent int
	// ContextWindow is the window, in tokens, of models the provider's
	// model list does not name. Default: 0, which means none: compaction
	// then happens only when the provider reports a context overflow.
	ContextWindow int
	// Instructions tell the model how to write the hand-off note.
	// Default: [DefaultCompactionInstructions].
	Instructions string
}

// DefaultCompactionInstructions ask the model for a hand-off note.
const DefaultCompactionInstructions = `Your conversation is about to be compacted: everything above this message will be replaced by the note you write now, and you will continue from it.
Write a hand-off note to yourself. Keep every fact the user gave (names, numbers, codes, dates, preferences), every decision made, what was done with which tools and their key results, the task in progress and what remains to do. Describe images, audio and files that matter in words. Write only the note.`

// The defaults of [Compaction].
const (
	DefaultCompactionLimit = 0.8
	DefaultKeepRecent      = 4
)

// normalized fills c's defaults; its errors name the fields as field
// ("Compaction", "Agent.Compaction") says where c was given.
func (c Compaction) normalized(field string) (Compaction, error) {
	if c.Limit == 0 {
		c.Limit = DefaultCompactionLimit
	}
	if c.KeepRecent == 0 {
		c.KeepRecent = DefaultKeepRecent
	}
	if c.Instructions == "" {
		c.Instructions = DefaultCompactionInstructions
	}
	var errs []error
	if c.Limit <= 0 || c.Limit > 1 {
		errs = append(errs, fmt.Errorf("host: %s.Limit %v is not in (0, 1]", field, c.Limit))
	}
	if c.KeepRecent < 0 {
		errs = append(errs, fmt.Errorf("host: %s.KeepRecent %d is negative", field, c.KeepRecent))
	}
	if c.ContextWindow < 0 {
		errs = append(errs, fmt.Errorf("host: %s.ContextWindow %d is negative", field, c.ContextWindow))
	}
	return c, errors.Join(errs...)
}

// DefaultLeaseTTL is the session lease's time to live when
// Options.LeaseTTL is 0.
const DefaultLeaseTTL = 15 * time.Second
