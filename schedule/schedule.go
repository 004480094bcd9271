// Package schedule starts runs by themselves: a message sent into a session
// at each occurrence of a cron expression, in a time zone.
//
// A [Runner] fires a host's schedules. On a storage several hosts share (a
// [storage.Leaser]), one host at a time fires them, under a lease; each
// occurrence is sent with the request id "schedule:ID@TIME", so that a
// host that died between sending it and recording it, or two hosts that
// both thought they led, append it once (the host answers a message sent
// again with its request id as the first). The message is an ordinary
// accepted message; the request id names its schedule and occurrence. An
// occurrence found while the session's run still works is queued into it
// or refused, as the agent's overlap rule says (host.Agent.Overlap); a
// refused one is skipped. With [Options.Admit], each occurrence is
// admitted before it is sent, as a message of an API would be; one refused
// is tried again while on time, then recorded [OutcomeRefused].
//
// What was fired last is kept per schedule in the storage's key-value
// store (namespace "schedules:fired"). Occurrences that passed while no
// host ran (more than [Options.Late] ago) are missed: with [MissedRunOnce]
// the latest fires once, with [MissedSkip] none does.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// What becomes of occurrences missed while no host ran.
const (
	MissedRunOnce = "run_once" // the latest fires once (the default)
	MissedSkip    = "skip"     // none fires
)

// Schedule is a message sent into a session at each occurrence of Cron.
type Schedule struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	// Agent runs the message (Options.Agents); "": the host's.
	Agent string `json:"agent,omitempty"`
	// Cron is a standard five-field expression ("0 8 * * *").
	Cron string `json:"cron"`
	// Timezone is an IANA zone the expression is read in; "": UTC.
	Timezone string `json:"timezone,omitempty"`
	Text     string `json:"text"`
	// Missed is MissedRunOnce ("" too) or MissedSkip.
	Missed string `json:"missed,omitempty"`
}

// Next returns the schedule's first occurrence after t, or an error for
// a schedule that is not valid.
func (s Schedule) Next(t time.Time) (time.Time, error) {
	spec, loc, err := s.parse()
	if err != nil {
		return time.Time{}, err
	}
	return spec.Next(t.In(loc)).UTC(), nil
}

func (s Schedule) parse() (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if s.Timezone != "" {
		var err error
		if loc, err = time.LoadLocation(s.Timezone); err != nil {
			return nil, nil, fmt.Errorf("schedule %s: timezone: %w", s.ID, err)
		}
	}
	spec, err := cron.ParseStandard(s.Cron)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule %s: cron %q: %w", s.ID, s.Cron, err)
	}
	return spec, loc, nil
}

// Validate returns every problem of the schedule at once.
func (s Schedule) Validate() error {
	var errs []error
	if !storage.ValidSessionID(s.ID) {
		errs = append(errs, fmt.Errorf("schedule: id %q: want 1 to 128 of [A-Za-z0-9._:-]", s.ID))
	}
	if !storage.ValidSessionID(s.Session) {
		errs = append(errs, fmt.Errorf("schedule %s: session %q is not a valid session id", s.ID, s.Session))
	}
	if s.Text == "" {
		errs = append(errs, fmt.Errorf("schedule %s: text is required", s.ID))
	}
	if s.Missed != "" && s.Missed != MissedRunOnce && s.Missed != MissedSkip {
		errs = append(errs, fmt.Errorf("schedule %s: missed %q: want run_once or skip", s.ID, s.Missed))
	}
	if _, err := time.LoadLocation(s.Timezone); err != nil {
		errs = append(errs, fmt.Errorf("schedule %s: timezone: %w", s.ID, err))
	}
	if spec, err := cron.ParseStandard(s.Cron); err != nil {
		errs = append(errs, fmt.Errorf("schedule %s: cron %q: %w", s.ID, s.Cron, err))
	} else if spec.Next(time.Now()).IsZero() {
		errs = append(errs, fmt.Errorf("schedule %s: cron %q: it never occurs", s.ID, s.Cron))
	}
	return errors.Join(errs...)
}

// RequestID is the request id the occurrence at t is sent with.
func (s Schedule) RequestID(t time.Time) string {
	return "schedule:" + s.ID + "@" + t.UTC().Format(time.RFC3339)
}

// Options configures a [Runner]. The zero value of every field but Host
// and Storage is its default.
type Options struct {
	// Host sends the messages. Required.
	Host *host.Host
	// Storage keeps what was fired (storage.KV): the host's. Required.
	Storage storage.Storage
	// Schedules are fixed ones (a configuration's); [Runner.Put] adds
	// more, kept in the storage. Default: none.
	Schedules []Schedule
	// Agents are the agents schedules may name. Default: none.
	Agents map[string]host.Agent
	// Leaser and LeaseID: as webhook.Options. Default: the Storage when
	// it is a storage.Leaser, LeaseID "schedules.runner".
	Leaser   storage.Leaser
	LeaseID  string
	LeaseTTL time.Duration // default 15s
	Owner    string        // default: a random id
	// Poll paces the look for due occurrences. Default: 0, which means 1s.
	Poll time.Duration
	// Late is how late an occurrence may fire and still be on time;
	// older ones are missed. Default: 0, which means 1m.
	Late   time.Duration
	Logger *slog.Logger
	// Now is the clock the occurrences are read on (tests set one).
	// Default: time.Now.
	Now func() time.Time
	// Admit, when set, is asked before each occurrence is sent, as a
	// message of the API is admitted (its run limits, rate limits and
	// budgets): it returns the function that gives its place back once
	// the message was sent, or why the occurrence may not be sent now.
	// A refusal whose error is retryable (a Retryable() bool method that
	// reports true: runs in flight, a rate) is asked again at the next
	// Poll while the occurrence is on time (Late); past that, or for any
	// other refusal (a budget spent), the occurrence is not sent and is
	// recorded [OutcomeRefused], with the refusal's words. Default: nil,
	// every occurrence is sent.
	Admit func(ctx context.Context, s Schedule) (release func(), err error)
}

// The key-value namespaces.
const (
	nsFired = "schedules:fired" // id → the last occurrence dealt with
	nsDefs  = "schedules:defs"  // id → a schedule Put
)

var (
	// ErrNotFound is returned for a schedule the runner does not hold.
	ErrNotFound = errors.New("schedule: no such schedule")
	// ErrFixed is returned by Delete and Put of a fixed schedule.
	ErrFixed = errors.New("schedule: the schedule is in the configuration")
)

// Runner fires schedules. It is safe for concurrent use.
type Runner struct {
	opts Options
	kv   storage.KV
	log  *slog.Logger
	mu   sync.Mutex // one tick at a time
}

// New returns a runner, or every problem of opts at once.
func New(opts Options) (*Runner, error) {
	var errs []error
	kv, ok := opts.Storage.(storage.KV)
	if opts.Host == nil || !ok {
		errs = append(errs, errors.New("schedule: Options.Host and a Storage that keeps values are required"))
	}
	for _, s := range opts.Schedules {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
		if _, ok := opts.Agents[s.Agent]; s.Agent != "" && !ok {
			errs = append(errs, fmt.Errorf("schedule %s: no agent %s", s.ID, s.Agent))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Leaser == nil {
		opts.Leaser, _ = opts.Storage.(storage.Leaser)
	}
	if opts.LeaseID == "" {
		opts.LeaseID = "schedules.runner"
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 15 * time.Second
	}
	if opts.Owner == "" {
		opts.Owner = ledger.NewID("sched")
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Late <= 0 {
		opts.Late = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Runner{opts: opts, kv: kv, log: opts.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r, nil
}

// List returns the schedules, the fixed ones first.
func (r *Runner) List(ctx context.Context) ([]Schedule, error) {
	out := slices.Clone(r.opts.Schedules)
	keys, err := r.kv.Keys(ctx, nsDefs)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	for _, k := range keys {
		b, ok, err := r.kv.Get(ctx, nsDefs, k)
		if err != nil {
			return nil, fmt.Errorf("schedule: %w", err)
		}
		var s Schedule
		if ok && json.Unmarshal(b, &s) == nil && !r.fixed(s.ID) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (r *Runner) fixed(id string) bool {
	return slices.ContainsFunc(r.opts.Schedules, func(s Schedule) bool { return s.ID == id })
}

// Put adds or replaces a schedule, kept in the storage (every host sharing
// it fires it). Its first occurrence is the first after now.
func (r *Runner) Put(ctx context.Context, s Schedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if _, ok := r.opts.Agents[s.Agent]; s.Agent != "" && !ok {
		return fmt.Errorf("schedule %s: no agent %s", s.ID, s.Agent)
	}
	if r.fixed(s.ID) {
		return ErrFixed
	}
	// From now on: what fired before under this id does not count.
	if err := r.setFired(ctx, s.ID, Fired{Occurrence: r.opts.Now()}); err != nil {
		return err
	}
	b, _ := json.Marshal(s)
	if err := r.kv.Set(ctx, nsDefs, s.ID, b); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	return nil
}

// Delete removes a schedule Put.
func (r *Runner) Delete(ctx context.Context, id string) error {
	if r.fixed(id) {
		return ErrFixed
	}
	if _, ok, err := r.kv.Get(ctx, nsDefs, id); err != nil || !ok {
		if err == nil {
			err = ErrNotFound
		}
		return err
	}
	if err := r.kv.Delete(ctx, nsDefs, id); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	return r.kv.Delete(ctx, nsFired, id)
}

// What became of an occurrence (Fired.Outcome).
const (
	OutcomeSent     = "sent"     // the message was accepted
	OutcomeRejected = "rejected" // the session's run worked, and the agent rejects overlapping turns
	OutcomeSkipped  = "skipped"  // missed while no host ran, with MissedSkip
	OutcomeRefused  = "refused"  // Options.Admit refused it (Fired.Reason says why)
)

// Fired is what became of a schedule's last occurrence dealt with.
type Fired struct {
	Occurrence time.Time `json:"occurrence"`
	// Outcome is OutcomeSent, OutcomeRejected or OutcomeSkipped.
	Outcome string `json:"outcome"`
	// MessageID is the message sent; RunID the run that answers it (""
	// when another host led the session's run), or, rejected, the run
	// that worked.
	MessageID string `json:"message_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
	// Reason tells why an occurrence was refused (OutcomeRefused).
	Reason string `json:"reason,omitempty"`
}

// fired returns the last occurrence dealt with (or the time the schedule
// started from, with no outcome).
func (r *Runner) fired(ctx context.Context, id string) (Fired, bool, error) {
	b, ok, err := r.kv.Get(ctx, nsFired, id)
	if err != nil || !ok {
		return Fired{}, false, err
	}
	var f Fired
	if len(b) > 0 && b[0] == '{' {
		err = json.Unmarshal(b, &f)
	} else {
		err = f.Occurrence.UnmarshalText(b) // the first releases' record: a time
	}
	if err != nil {
		return Fired{}, false, fmt.Errorf("schedule %s: %w", id, err)
	}
	return f, true, nil
}

func (r *Runner) setFired(ctx context.Context, id string, f Fired) error {
	f.Occurrence = f.Occurrence.UTC()
	b, _ := json.Marshal(f)
	if err := r.kv.Set(ctx, nsFired, id, b); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	return nil
}

// State is a schedule with what it did last and does next.
type State struct {
	Schedule
	// Fixed: the schedule is one of Options.Schedules (Put and Delete
	// refuse it).
	Fixed bool
	// Next is its first occurrence after now.
	Next time.Time
	// Last is its last occurrence dealt with; nil: none yet.
	Last *Fired
}

// States returns the schedules with their last and next occurrences, the
// fixed ones first.
func (r *Runner) States(ctx context.Context) ([]State, error) {
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	now := r.opts.Now()
	out := make([]State, 0, len(all))
	for _, s := range all {
		st := State{Schedule: s, Fixed: r.fixed(s.ID)}
		st.Next, _ = s.Next(now)
		f, ok, err := r.fired(ctx, s.ID)
		if err != nil {
			return nil, err
		}
		if ok && f.Outcome != "" {
			st.Last = &f
		}
		out = append(out, st)
	}
	return out, nil
}

// Tick fires what is due now, once. Run calls it every Poll while it
// leads.
func (r *Runner) Tick(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	all, err := r.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range all {
		if err := r.tick(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) tick(ctx context.Context, s Schedule) error {
	now := r.opts.Now()
	last, ok, err := r.fired(ctx, s.ID)
	if err != nil {
		return err
	}
	if !ok {
		// A schedule seen for the first time starts now.
		return r.setFired(ctx, s.ID, Fired{Occurrence: now})
	}
	next, err := s.Next(last.Occurrence)
	if err != nil || next.IsZero() || next.After(now) {
		return err // (zero: no occurrence left)
	}
	// The latest occurrence due.
	due := next
	for {
		n, _ := s.Next(due)
		if n.IsZero() || n.After(now) {
			break
		}
		due = n
	}
	if now.Sub(due) > r.opts.Late && s.Missed == MissedSkip {
		r.log.Info("schedules: missed occurrences skipped", "schedule", s.ID, "latest", due)
		return r.setFired(ctx, s.ID, Fired{Occurrence: due, Outcome: OutcomeSkipped})
	}
	opts := host.StartOptions{RequestID: s.RequestID(due)}
	if a, ok := r.opts.Agents[s.Agent]; ok {
		opts.Agent = &a
	}
	f := Fired{Occurrence: due, Outcome: OutcomeSent}
	release := func() {}
	if r.opts.Admit != nil {
		var err error
		if release, err = r.opts.Admit(ctx, s); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var retry interface{ Retryable() bool }
			if errors.As(err, &retry) && retry.Retryable() && now.Sub(due) <= r.opts.Late {
				return nil // asked again at the next tick, while on time
			}
			r.log.Warn("schedules: an occurrence refused", "schedule", s.ID, "occurrence", due, "err", err)
			return r.setFired(ctx, s.ID, Fired{Occurrence: due, Outcome: OutcomeRefused, Reason: err.Error()})
		}
	}
	run, err := r.opts.Host.Session(s.Session).Start(ctx, s.Text, opts)
	release()
	var busy *host.BusyError
	switch {
	case errors.As(err, &busy):
		f.Outcome, f.RunID = OutcomeRejected, busy.RunID
		r.log.Info("schedules: an occurrence skipped: the session's run still works and its agent rejects overlapping turns", "schedule", s.ID, "occurrence", due)
	case err != nil:
		return fmt.Errorf("schedule %s: fire %s: %w", s.ID, due.Format(time.RFC3339), err)
	default:
		f.MessageID, f.RunID = run.MessageID(), run.ID()
	}
	return r.setFired(ctx, s.ID, f)
}

// Run fires the schedules until ctx ends, leading (under the lease, on a
// shared storage) or waiting to lead. It returns ctx.Err().
func (r *Runner) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		lctx, release := lead(ctx, r.opts.Leaser, r.opts.LeaseID, r.opts.Owner, r.opts.LeaseTTL, r.log)
		if lctx == nil {
			break
		}
		t := time.NewTicker(r.opts.Poll)
		for lctx.Err() == nil {
			if err := r.Tick(lctx); err != nil && lctx.Err() == nil {
				r.log.Warn("schedules: cannot fire", "err", err)
			}
			select {
			case <-lctx.Done():
			case <-t.C:
			}
		}
		t.Stop()
		release()
	}
	return ctx.Err()
}

// lead returns once this host leads: a context that ends when it stops
// leading, and the function that gives the lead up; nil when ctx ended
// first.
func lead(ctx context.Context, leaser storage.Leaser, id, owner string, ttl time.Duration, log *slog.Logger) (context.Context, func()) {
	if leaser == nil {
		return ctx, func() {}
	}
	for {
		lease, err := leaser.AcquireLease(ctx, id, owner, ttl)
		if err == nil {
			lctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				t := time.NewTicker(ttl / 3)
				defer t.Stop()
				for {
					select {
					case <-lctx.Done():
						return
					case <-t.C:
						if err := lease.Renew(lctx); err != nil {
							cancel()
							return
						}
					}
				}
			})
			return lctx, func() {
				cancel()
				wg.Wait()
				rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				lease.Release(rctx)
				stop()
			}
		}
		if !errors.Is(err, storage.ErrLeaseHeld) && ctx.Err() == nil {
			log.Warn("schedules: cannot take the lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(ttl / 3):
		}
	}
}
