package host

import (
	"context"
	"crypto/rand"
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

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Model streams one model pass (see package host/model for the request, the
// result and the errors). *provider.Client implements it; so does
// hosttest.Model; wrappers that add telemetry or metering implement it
// around another Model (or use a [Hook]).
//
// Stream may call onDelta from any goroutine, even concurrently: the host
// takes deltas one at a time, in the order they come, until Stream
// returns, and drops any that come after (an abandoned attempt's).
type Model interface {
	Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error)
}

// Host runs agents over durable session ledgers. It is safe for concurrent
// use; different sessions run independently, and runs of one session never
// overlap.
type Host struct {
	// delegated holds the child sessions whose delegate calls are in
	// flight here (session id → delegation): a decision that continues a
	// parked child runs the child's agent, and the child's run span links
	// the call's.
	delegated sync.Map
	// bound holds the agents bound to session ids (SessionWith): session
	// id → Agent.
	bound sync.Map

	store storage.Storage
	// blobThreshold is Options.BlobThreshold normalised (0: off);
	// blobQuota and maxBlob are Options.BlobQuota and MaxBlobBytes.
	blobThreshold int64
	blobQuota     int64
	maxBlob       int64
	delegation    DelegateLimits // Options.Delegation normalised (0: no bound)
	// blobReserved holds the new blobs that sends of this host are
	// putting, by digest, counted against blobQuota until they are
	// stored (reserveBlobs).
	blobMu       sync.Mutex
	blobReserved map[string]blobReservation
	model        Model
	agent        Agent
	toolTimeout  time.Duration
	log          *slog.Logger
	retry        model.RetryPolicy
	hostID       string
	validators   map[string]Validator
	auto         *AutoResume // the sweeps: nil when off
	// rules are how an interrupted run is taken over, by a sweep or by a
	// message that finds it (see leadLocked): Options.AutoResume, else
	// its defaults.
	rules      AutoResume
	compaction *Compaction
	leaser     storage.Leaser  // nil: one host per store
	watcher    storage.Watcher // nil: no cross-host wake-ups
	leaseTTL   time.Duration
	leaseOwner string // this host's lease token
	// agreement is Options.Agreement, or the host's own (ownAgreement)
	// on a shared store; nil on a store of one host, which writes the
	// features it reads (reads: Options.Features, or all).
	agreement    *Agreement
	ownAgreement bool
	reads        []ledger.Feature
	noSnapshots  bool       // Options.NoSnapshots
	events       *eventBus  // the live events' queue; nil without Options.OnEvent
	tel          *telemetry // spans and metrics; nil without Options.Telemetry
	timeouts     Timeouts
	tenant       string
	secret       []byte     // approval tokens' HMAC key
	approvalKV   storage.KV // the inbox of pending approvals; nil: none
	outbox       Outbox     // nil: none

	// hooks is the chain of hooks around the model and the tools, swapped
	// whole (under hookMu) when hooks are added.
	hooks  atomic.Pointer[hookChain]
	hookMu sync.Mutex

	bg       context.Context // the host's own work (the boot sweep); cancelled by Close
	stopBg   context.CancelFunc
	sweep    chan struct{} // closed when the boot sweep is over
	sweepRep SweepReport
	// unrecorded maps a run to the number of the resume attempt this
	// host failed to record (see attemptNumber).
	unrecorded sync.Map
	// resumeSlots holds a token per resumed run in flight: at most
	// AutoResume.MaxConcurrent, over every sweep.
	resumeSlots chan struct{}
	// jobs hands runs to the idle goroutines that worked runs before (see
	// spawn).
	jobs        chan *run
	idleDrivers atomic.Int32

	mu       sync.Mutex
	sessions map[sessionKey]*sessionState
	closed   bool         // Close was called: no new work
	draining atomic.Bool  // Drain was called: runs stop at their next step boundary
	stopping atomic.Bool  // Close's context ended: runs in flight stop
	running  atomic.Int64 // sessions whose run is in flight here (Running)
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
	switch {
	case opts.BlobThreshold < -1:
		errs = append(errs, fmt.Errorf("host: Options.BlobThreshold %d is negative (use -1 to keep every byte inline)", opts.BlobThreshold))
	case opts.BlobQuota < 0:
		errs = append(errs, fmt.Errorf("host: Options.BlobQuota %d is negative", opts.BlobQuota))
	case opts.MaxBlobBytes < 0:
		errs = append(errs, fmt.Errorf("host: Options.MaxBlobBytes %d is negative", opts.MaxBlobBytes))
	}
	if opts.Model == nil {
		errs = append(errs, errors.New("host: Options.Model is required"))
	}
	for _, f := range opts.Features {
		if !ledger.KnownFeature(f) {
			errs = append(errs, fmt.Errorf("host: Options.Features: %q is not a ledger feature of this build (want some of %v)", f, ledger.Features()))
		}
	}
	if err := opts.Retry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("host: Options.Retry: %w", err))
	}
	if n := len(opts.ApprovalSecret); n > 0 && n < 32 {
		errs = append(errs, fmt.Errorf("host: Options.ApprovalSecret has %d bytes, want at least 32", n))
	}
	var auto *AutoResume
	rules, _ := AutoResume{}.normalized()
	if opts.AutoResume != nil {
		a, err := opts.AutoResume.normalized()
		if err != nil {
			errs = append(errs, err)
		}
		auto, rules = &a, a
	}
	timeouts, err := opts.Timeouts.normalized()
	if err != nil {
		errs = append(errs, err)
	}
	var compaction *Compaction
	if opts.Compaction != nil {
		c, err := opts.Compaction.normalized("Compaction")
		if err != nil {
			errs = append(errs, err)
		}
		compaction = &c
	}
	tel, err := newTelemetry(opts.Telemetry)
	if err != nil {
		errs = append(errs, fmt.Errorf("host: Options.Telemetry: %w", err))
	}
	delegation, err := opts.Delegation.normalized()
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &Host{
		tel:         tel,
		compaction:  compaction,
		store:       opts.Storage,
		model:       opts.Model,
		agent:       agent,
		toolTimeout: opts.ToolTimeout,
		log:         opts.Logger,
		retry:       opts.Retry,
		hostID:      opts.HostID,
		validators:  maps.Clone(opts.Validators),
		auto:        auto,
		rules:       rules,
		sessions:    map[sessionKey]*sessionState{},
		jobs:        make(chan *run),
		sweep:       make(chan struct{}),
		timeouts:    timeouts,
		tenant:      opts.Tenant,
		secret:      slices.Clone(opts.ApprovalSecret),
		outbox:      opts.Outbox,
		blobQuota:   opts.BlobQuota,
		maxBlob:     opts.MaxBlobBytes,
		delegation:  delegation,
	}
	switch h.blobThreshold = opts.BlobThreshold; h.blobThreshold {
	case 0:
		h.blobThreshold = DefaultBlobThreshold
	case -1:
		h.blobThreshold = 0
	}
	if len(h.secret) == 0 {
		h.secret = make([]byte, 32)
		if _, err := rand.Read(h.secret); err != nil {
			return nil, fmt.Errorf("host: an approval secret: %w", err)
		}
	}
	h.approvalKV, _ = opts.Storage.(storage.KV)
	h.hooks.Store(newHookChain(opts.Model, slices.DeleteFunc(slices.Clone(opts.Hooks), func(k Hook) bool { return k == nil })))
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
	h.noSnapshots = opts.NoSnapshots
	h.reads = opts.Features
	if h.reads == nil {
		h.reads = ledger.Features()
	}
	h.agreement = opts.Agreement
	if _, kv := opts.Storage.(storage.KV); h.agreement == nil && h.leaser != nil && kv {
		ctx, cancel := context.WithTimeout(context.Background(), h.leaseTTL)
		h.agreement, err = NewAgreement(ctx, AgreementOptions{Storage: opts.Storage, Host: h.hostID, Features: h.reads, TTL: h.leaseTTL, Logger: h.log})
		cancel()
		if err != nil {
			return nil, err
		}
		h.ownAgreement = true
	}
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
	if opts.OnEvent != nil {
		log := h.log
		h.events = newEventBus(opts.OnEvent, eventQueueSize, func(msg string, args ...any) { log.Warn(msg, args...) })
	}
	h.startSweeps()
	if kv, ok := opts.Storage.(storage.KV); ok {
		h.wg.Add(1)
		go h.watchWaitTimers(kv, min(time.Second, h.leaseTTL))
	}
	return h, nil
}

// Close shuts the host down. It refuses new work at once ([ErrClosed]),
// stops the sweeps, and waits for the runs in flight to end as they would
// have: when they finish, are cancelled ([Host.Cancel]), or their callers'
// contexts end — or, after [Host.Drain], when they reach their next step
// boundary. Close cancels nothing itself.
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
		h.events.close(ctx)
		return h.closeAgreement(ctx)
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
	h.events.close(ctx)
	h.closeAgreement(context.WithoutCancel(ctx))
	return ctx.Err()
}

// SessionWith returns the session id, bound to agent in this host: every
// send, start and resume of the session that names no agent of its own
// runs agent, and so do the runs the sweeps resume and the decisions
// continue (ahead of AutoResume.AgentFor) — the session-level agent of
// other runtimes' session(id, {model, system, tools}). The binding lasts
// as long as the host, or until SessionWith binds the id again; the boot
// sweep, which runs within New, uses AutoResume.AgentFor (or the host's
// agent) for sessions bound only later. ErrInvalidInput for an agent
// that is not valid (see Options.Agent).
func (h *Host) SessionWith(id string, agent Agent) (*Session, error) {
	if !storage.ValidSessionID(id) {
		return nil, fmt.Errorf("%w: session id %q", ErrInvalidInput, id)
	}
	a, err := normalizeAgent(agent)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	h.bound.Store(id, a)
	return h.Session(id), nil
}

// boundAgent returns the agent bound to the session (SessionWith), if any.
func (h *Host) boundAgent(id string) (Agent, bool) {
	a, ok := h.bound.Load(id)
	if !ok {
		return Agent{}, false
	}
	return a.(Agent), true
}

// closeAgreement withdraws the host's own announcement, once its runs
// stopped.
func (h *Host) closeAgreement(ctx context.Context) error {
	if !h.ownAgreement {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.leaseTTL)
	defer cancel()
	return h.agreement.Close(ctx)
}

// Drain begins a graceful shutdown: the host refuses new work at once
// ([ErrClosed]), stops the sweeps and the viewers ([Session.Attach]), and
// each run in flight stops at its next step boundary — once the model pass
// it is in, and the tool calls that pass asked for, are recorded. Nothing
// more is recorded for such a run (no run-end): it stays interrupted in
// the ledger, its lease is released, and the next host resumes it from
// that step, with no pass made twice. A run whose pass in flight ends it
// (the model's final answer, with no message queued meanwhile) ends as it
// would have; a run parked for approvals is not in flight, and stays
// parked. Messages queued into a stopped run wait in the ledger for the
// run that resumes it.
//
// Drain does not wait: call [Host.Close] next, which waits for the runs
// to stop, and stops those still in a step when its context ends (their
// pass in flight then restarts on resume).
func (h *Host) Drain() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.draining.Store(true)
	h.stopBg()
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

// Cancel asks the run in flight of the session to stop, with reason. It
// returns true only when this call newly requested the cancellation: false
// when no run of the session is in flight in this host, or one was already
// asked to stop. The run ends cancelled, durably (see [Session.Send]). A
// run parked for approvals (in any host's storage, this host taking the
// session's lease) ends cancelled too, its waiting calls answered as
// cancelled and their requests denied; so does a run cancelled after its
// pass recorded a request and before it parked (a later call of the pass
// still ran): a stopped run never parks.
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
	if !cancelled {
		cancelled = h.cancelParked(sessionID, reason)
	}
	return cancelled
}

// Running returns the number of runs in flight in this host, one at most
// a session (a run parked for approvals is not in flight; the messages
// queued into a run do not count apart).
func (h *Host) Running() int { return int(h.running.Load()) }

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
