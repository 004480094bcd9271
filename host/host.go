package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/storage"
)

// Model streams one model pass. *provider.Client implements it; wrappers
// that add telemetry or metering implement it around another Model.
//
// Stream may call onDelta from any goroutine, even concurrently: the host
// takes deltas one at a time, in the order they come, until Stream
// returns, and drops any that come after (an abandoned attempt's).
type Model interface {
	Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (provider.Result, error)
}

// Agent is the configuration an agent runs with: model, instructions, tools
// and bounds. It is a value; the host copies it at the start of each run.
type Agent struct {
	// Name identifies the agent in the ledger. Default: "default".
	Name string
	// Model is the model id sent to the provider. Required.
	Model string
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
}

// DefaultMaxSteps is the bound on model passes per run when Agent.MaxSteps
// is 0.
const DefaultMaxSteps = 16

// Options configures a [Host]. The zero value of every field but Storage
// and Agent.Model is a usable default.
type Options struct {
	// Storage keeps the ledgers. Required.
	Storage storage.Storage
	// Model streams model passes. Default: nil, which means a
	// provider.Client built from Provider.
	Model Model
	// Provider configures the default model client when Model is nil.
	// Default: the zero Config (OpenRouter, key from OPENROUTER_API_KEY).
	Provider provider.Config
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
	// with a transient error. Default: the zero provider.RetryPolicy (6
	// attempts, 500ms doubling to 30s, Retry-After honoured up to 2m).
	Retry provider.RetryPolicy
	// AutoResume, when set, makes the host re-drive interrupted runs at
	// boot (see [AutoResume]). Default: nil, off; [Host.Resume] still
	// resumes a session on demand.
	AutoResume *AutoResume
	// Compaction keeps sessions within the model's context window (see
	// [Compaction]). Default: nil, which compacts only when the provider
	// reports a context overflow (then with the Compaction defaults).
	Compaction *Compaction
	// LeaseTTL is the time to live of a session's lease, when the storage
	// has leases (storage.Leaser): how long a dead host's session stays
	// locked before another host may resume it. The lease is renewed
	// every third of it. Default: 0, which means 15s.
	LeaseTTL time.Duration
	// HostID names this host in the ledger's resume-attempt events.
	// Default: "<hostname>-<pid>".
	HostID string
}

// DefaultToolTimeout is the tool call bound when Options.ToolTimeout is 0.
const DefaultToolTimeout = 60 * time.Second

var (
	// ErrInvalidInput is returned by Send for a message that cannot be
	// accepted (empty, or with malformed parts); nothing was appended.
	ErrInvalidInput = errors.New("host: invalid input")
	// ErrClosed is returned by a Host used after Close.
	ErrClosed = errors.New("host: closed")
	// ErrSlowSubscriber is returned by [Subscription.Next] to a subscriber
	// that fell too far behind the run's progress: it was dropped rather
	// than waited for, and may subscribe again after the last
	// [Progress.Seq] it read.
	ErrSlowSubscriber = errors.New("host: subscriber fell behind and was dropped")
)

// Host runs agents over durable session ledgers. It is safe for concurrent
// use; different sessions run independently, and runs of one session never
// overlap.
type Host struct {
	store       storage.Storage
	model       Model
	agent       Agent
	toolTimeout time.Duration
	log         *slog.Logger
	retry       provider.RetryPolicy
	hostID      string
	validators  map[string]Validator
	auto        *AutoResume
	compaction  *Compaction
	leaser      storage.Leaser  // nil: one host per store
	watcher     storage.Watcher // nil: no cross-host wake-ups
	leaseTTL    time.Duration
	leaseOwner  string // this host's lease token

	bg       context.Context // the host's own work (the boot sweep); cancelled by Close
	stopBg   context.CancelFunc
	sweep    chan struct{} // closed when the boot sweep is over
	sweepRep SweepReport
	// resumeSlots holds a token per resumed run in flight: at most
	// AutoResume.MaxConcurrent, over every sweep.
	resumeSlots chan struct{}
	// jobs hands work to the idle goroutines that ran runs (see spawn).
	jobs        chan func()
	idleDrivers atomic.Int32

	mu       sync.Mutex
	sessions map[sessionKey]*sessionState
	closed   bool        // Close was called: no new work
	stopping atomic.Bool // Close's context ended: runs in flight stop
	wg       sync.WaitGroup
}

// New validates opts and returns a Host. All configuration problems are
// reported together.
func New(opts Options) (*Host, error) {
	var errs []error
	if opts.Storage == nil {
		errs = append(errs, errors.New("host: Options.Storage is required"))
	}
	agent, err := normalizeAgent(opts.Agent)
	if err != nil {
		errs = append(errs, err)
	}
	if opts.LeaseTTL < 0 || (opts.LeaseTTL > 0 && opts.LeaseTTL < 30*time.Millisecond) {
		errs = append(errs, fmt.Errorf("host: Options.LeaseTTL %s is below 30ms", opts.LeaseTTL))
	}
	for name, v := range opts.Validators {
		if name == "" || strings.HasPrefix(name, "!") || v == nil {
			errs = append(errs, fmt.Errorf("host: Options.Validators[%q]: want a name not starting with \"!\" and a validator", name))
		}
	}
	if opts.ToolTimeout < -1 {
		errs = append(errs, fmt.Errorf("host: Options.ToolTimeout %s is negative (use -1 to disable)", opts.ToolTimeout))
	}
	model := opts.Model
	if model == nil {
		c, err := provider.New(opts.Provider)
		if err != nil {
			errs = append(errs, err)
		} else {
			model = c
		}
	}
	var auto *AutoResume
	if opts.AutoResume != nil {
		a, err := opts.AutoResume.normalized()
		if err != nil {
			errs = append(errs, err)
		}
		auto = &a
	}
	var compaction *Compaction
	if opts.Compaction != nil {
		c, err := opts.Compaction.normalized()
		if err != nil {
			errs = append(errs, err)
		}
		compaction = &c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &Host{
		compaction:  compaction,
		store:       opts.Storage,
		model:       model,
		agent:       agent,
		toolTimeout: opts.ToolTimeout,
		log:         opts.Logger,
		retry:       opts.Retry,
		hostID:      opts.HostID,
		validators:  maps.Clone(opts.Validators),
		auto:        auto,
		sessions:    map[sessionKey]*sessionState{},
		jobs:        make(chan func()),
		sweep:       make(chan struct{}),
	}
	if h.hostID == "" {
		name, _ := os.Hostname()
		h.hostID = fmt.Sprintf("%s-%d", name, os.Getpid())
	}
	h.leaser, _ = opts.Storage.(storage.Leaser)
	h.watcher, _ = opts.Storage.(storage.Watcher)
	h.leaseTTL = opts.LeaseTTL
	if h.leaseTTL == 0 {
		h.leaseTTL = DefaultLeaseTTL
	}
	h.leaseOwner = ledger.NewID(h.hostID)
	h.bg, h.stopBg = context.WithCancel(context.Background())
	switch h.toolTimeout {
	case 0:
		h.toolTimeout = DefaultToolTimeout
	case -1:
		h.toolTimeout = 0
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.auto != nil {
		h.resumeSlots = make(chan struct{}, h.auto.MaxConcurrent)
		h.wg.Add(2)
		boot := make(chan func(), 1)
		go func() {
			// SweepDone waits for the boot sweep's runs to end; the
			// sweeps that follow do not.
			defer h.wg.Done()
			wait := <-boot
			wait()
			close(h.sweep)
		}()
		go func() {
			defer h.wg.Done()
			rep, wait, err := h.sweepOnce(h.bg)
			if err != nil && h.bg.Err() == nil {
				h.log.Error("auto-resume: the boot sweep failed", "err", err)
			}
			h.mu.Lock()
			h.sweepRep = rep
			h.mu.Unlock()
			boot <- wait
			every := h.auto.Interval
			if every == 0 && h.leaser != nil {
				every = h.leaseTTL
			}
			if every <= 0 {
				return
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-h.bg.Done():
					return
				case <-t.C:
				}
				if _, err := h.Sweep(h.bg); err != nil && h.bg.Err() == nil {
					h.log.Error("auto-resume: a sweep failed", "err", err)
				}
			}
		}()
	} else {
		close(h.sweep)
	}
	return h, nil
}

// normalizeAgent fills an agent's defaults and checks it.
func normalizeAgent(a Agent) (Agent, error) {
	var errs []error
	if a.Name == "" {
		a.Name = "default"
	}
	if a.Model == "" {
		errs = append(errs, errors.New("host: Agent.Model is required"))
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
	a.Tools = append([]Tool(nil), a.Tools...)
	a.Toolsets = append([]Toolset(nil), a.Toolsets...)
	return a, errors.Join(errs...)
}

// Close shuts the host down. It refuses new work at once ([ErrClosed]),
// stops the sweeps, and waits for the runs in flight to end as they would
// have: when they finish, are cancelled ([Host.Cancel]), or their callers'
// contexts end. Close cancels nothing itself.
//
// When ctx ends first, Close stops the runs still in flight the way a
// crash would, but cleanly: nothing more is recorded for them, so they
// stay interrupted in the ledger (the pass that was streaming restarts
// when the run is resumed), and their leases are released, so that
// another host sharing the storage can take them over at once. Their
// callers get an error wrapping ErrClosed. Close then returns ctx.Err()
// once they have stopped.
//
// Close does not close the storage. Calling it again waits again.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stopBg()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	h.stopping.Store(true)
	h.mu.Lock()
	states := slices.Collect(maps.Values(h.sessions))
	h.mu.Unlock()
	for _, st := range states {
		st.mu.Lock()
		if r := st.cur; r != nil {
			r.cancel(ErrClosed)
		}
		st.mu.Unlock()
	}
	<-done
	return ctx.Err()
}

// shutDown reports whether ctx, a run's context, ended because the host is
// closing: the run then stops as a crash would, recording nothing more.
func shutDown(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrClosed)
}

// Session returns a handle on the session id. It does no I/O; the session
// exists once a message is sent to it.
func (h *Host) Session(id string) *Session {
	return &Session{h: h, id: id}
}

// sessionKey names a session in the host's table: its id, and whether it
// is kept in a private store (a task that is not durable) rather than the
// host's storage.
type sessionKey struct {
	id      string
	private bool
}

// Cancel asks the run in flight of the session to stop, with reason. It
// returns true only when this call newly requested the cancellation: false
// when no run of the session is in flight in this host, or one was already
// asked to stop. The run ends cancelled, durably (see [Session.Send]).
func (h *Host) Cancel(sessionID, reason string) bool {
	cancelled := false
	for _, st := range h.states(sessionID) {
		st.mu.Lock()
		r := st.cur
		st.mu.Unlock()
		if r != nil && r.requestCancel(reason) {
			cancelled = true
		}
	}
	return cancelled
}

// states returns the states of the sessions named id in the table: the one
// in the host's storage and the private one, as far as they exist.
func (h *Host) states(id string) []*sessionState {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*sessionState
	for _, private := range []bool{false, true} {
		if st := h.sessions[sessionKey{id, private}]; st != nil {
			out = append(out, st)
		}
	}
	return out
}

// CancelledError is the cause of a run's context when [Host.Cancel] stopped
// it.
type CancelledError struct{ Reason string }

func (e *CancelledError) Error() string { return e.Reason }

// IsRunning reports whether a run of the session is in flight in this host.
func (h *Host) IsRunning(sessionID string) bool {
	for _, st := range h.states(sessionID) {
		st.mu.Lock()
		live := st.cur != nil
		st.mu.Unlock()
		if live {
			return true
		}
	}
	return false
}

// sessionState is the in-process state of one session.
type sessionState struct {
	key   sessionKey
	store storage.Storage // the host's, or a private one
	// leaser and watcher are the store's capabilities when it is shared
	// with other hosts; nil for a private store.
	leaser  storage.Leaser
	watcher storage.Watcher
	stale   atomic.Bool // another host may have appended to the session

	// appendMu serialises the session's appends, and the decisions that
	// must not interleave with them: whether a send queues into the run
	// in flight, whether that run may end. It is taken before mu.
	appendMu sync.Mutex

	refs int // users of the state; guarded by Host.mu

	// mu guards the session's in-memory state: the run in flight and what
	// it holds (its view of the ledger, its live item, its waiters). It is
	// never held across I/O, a model call or a tool call.
	mu sync.Mutex
	// busy is set while a run (or a resume setting one up) owns the
	// session: runs of a session never overlap.
	busy    bool
	cur     *run          // the run in flight, if any
	changed chan struct{} // closed when cur or busy changes; nil when no one waits (see changedLocked)
}

// ref returns the state of the session s names, creating it, and counts
// the user.
func (h *Host) ref(s *Session) (*sessionState, error) {
	key := sessionKey{s.id, s.private != nil}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	st := h.sessions[key]
	if st == nil {
		st = &sessionState{key: key, store: h.store, leaser: h.leaser, watcher: h.watcher}
		if s.private != nil {
			st.store, st.leaser, st.watcher = s.private, nil, nil
		}
		h.sessions[key] = st
	} else if s.private != nil && st.store != s.private {
		return nil, fmt.Errorf("%w: session %s is held by another task that is not durable", ErrInvalidInput, s.id)
	}
	st.refs++
	h.wg.Add(1)
	return st, nil
}

// adopt counts one more user of a state already in use, such as a run
// started for it, even once the host is closed.
func (h *Host) adopt(st *sessionState) {
	h.mu.Lock()
	st.refs++
	h.wg.Add(1)
	h.mu.Unlock()
}

// unref forgets the session's state when no one uses it any more.
func (h *Host) unref(st *sessionState) {
	h.mu.Lock()
	st.refs--
	if st.refs == 0 {
		delete(h.sessions, st.key)
	}
	h.mu.Unlock()
	h.wg.Done()
}

// notifyLocked wakes the goroutines waiting for the session to change.
// st.mu must be held.
func (st *sessionState) notifyLocked() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// changedLocked returns a channel closed at the session's next change.
// st.mu must be held.
func (st *sessionState) changedLocked() <-chan struct{} {
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed
}

// free gives the session back once no run owns it, and wakes the waiting
// senders.
func (st *sessionState) free() {
	st.mu.Lock()
	st.busy = false
	st.notifyLocked()
	st.mu.Unlock()
}

// snapshotLive returns a consistent copy of the run in flight of a session,
// if any: its events and the pass streaming.
func (h *Host) snapshotLive(id string) ([]ledger.Event, ledger.Live, bool) {
	h.mu.Lock()
	st := h.sessions[sessionKey{id, false}]
	h.mu.Unlock()
	if st == nil {
		return nil, ledger.Live{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.cur
	if r == nil {
		return nil, ledger.Live{}, false
	}
	// The ledger is append-only: the slice up to its length never changes.
	return r.events[:len(r.events):len(r.events)],
		ledger.Live{RunID: r.id, ResponseID: r.live.responseID, Text: string(r.live.text), Reasoning: string(r.live.reasoning)}, true
}
