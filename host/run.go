package host

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/ledger"
)

// Run is a caller's handle on the run that answers its message (see
// [Session.Start]). Its methods are safe for concurrent use.
type Run struct {
	h    *Host
	sess *Session
	mu   sync.Mutex // held while the handle looks for the message's run (enter)

	msgID       string
	accepted    bool   // this call made the message durable
	acceptedRun string // the run named when it was accepted ("" when another host leads)

	// w is the message's place in a run of this host; nil while another
	// host leads the session (the outcome is then read from the ledger).
	w *waiter
	// bound is the run this caller started and whose fate its context
	// decides (see Session.Send); nil when it joined a run or only waits.
	bound *run
	// following is set while the host follows the message, queued for
	// another host's run (see Host.follow).
	following atomic.Bool
	// resumed is set once entering the session resumed its interrupted
	// run first (see leadLocked); supersede once the resume rules gave up
	// on it (or left it by policy: left), so that the message's run may
	// supersede it.
	resumed, supersede, left bool
	// unreadable is set once the message is queued in a session whose
	// ledger this host cannot read: its answer is another host's to give
	// and to show (Wait returns ErrUnreadable).
	unreadable bool

	// What (re-)entering the session needs.
	agent     Agent
	requestID string
	hooks     *runHooks
	parts     []ledger.Part      // the message's content (see newInput)
	bind      context.Context    // the context bound to a run this caller starts; nil: none
	parent    *ledger.ParentCall // the delegate call that sent the message (see Host.DelegateTool)
	// lostLeases counts the leases lost before the run's first append
	// (see enterSession), bounding the tries.
	lostLeases int
}

// MessageID returns the durable id of the message.
func (r *Run) MessageID() string { return r.msgID }

// ID returns the id of the run that answers the message: the run that Start
// started, or queued the message into. A message that run ended without
// answering (it was cancelled, or reached its bound of passes, before it
// folded the message in) is answered by a successor run, which ID then
// names. ID is "" while another host leads the session's run: the outcome
// is then read from the ledger.
func (r *Run) ID() string {
	if w := r.waiter(); w != nil {
		return w.runID()
	}
	return ""
}

// Wait waits for the run that answers the message to end and returns its
// result (see [Session.Send] for the errors). ctx bounds the waiting only:
// when it ends, Wait returns ctx.Err() and the run goes on.
func (r *Run) Wait(ctx context.Context) (RunResult, error) {
	return r.wait(ctx, nil)
}

// Cancel asks the run that answers the message to stop, with reason, as
// [Host.Cancel] does. It returns true only when this call newly requested
// the cancellation.
func (r *Run) Cancel(reason string) bool {
	w := r.waiter()
	if w == nil {
		return false
	}
	cur, _ := w.position()
	return cur != nil && cur.requestCancel(reason)
}

// Subscribe returns the progress of the run that answers the message (the
// run ID names now) after the event whose [Progress.Seq] is after (0: from
// the first): the events published already, then each one as it comes,
// until the run's end. Subscribers never hold the run up: one that falls
// too far behind is dropped ([ErrSlowSubscriber]) and may subscribe again
// after the last Seq it read, losing nothing.
//
// The subscription follows that one run: when the message moves on to a
// successor run (see ID), Next returns io.EOF at the first run's end, and a
// new subscription follows the successor. A message another host answers
// has no progress here: Next returns io.EOF at once.
func (r *Run) Subscribe(after int) *Subscription {
	w := r.waiter()
	if w == nil {
		return &Subscription{}
	}
	cur, _ := w.position()
	if cur == nil {
		return &Subscription{}
	}
	return &Subscription{run: cur, sub: cur.hub.Subscribe(after)}
}

// Subscription reads a run's progress (see [Run.Subscribe]). It is meant for
// one goroutine.
type Subscription struct {
	run *run
	sub *hub.Sub[event]
}

// RunID returns the id of the run whose progress the subscription reads;
// "" when it reads none.
func (s *Subscription) RunID() string {
	if s.run == nil {
		return ""
	}
	return s.run.id
}

// Next returns the next progress event, waiting for it. It returns io.EOF
// once the run's end (its run-end event) was read, [ErrSlowSubscriber] when
// the subscriber fell too far behind and was dropped, and ctx.Err() when
// ctx ends first.
func (s *Subscription) Next(ctx context.Context) (Progress, error) {
	if s.sub == nil {
		return Progress{}, io.EOF
	}
	e, off, err := s.sub.Next(ctx)
	if errors.Is(err, hub.ErrDropped) {
		return Progress{}, ErrSlowSubscriber
	}
	if err != nil {
		return Progress{}, err
	}
	return s.run.progress(e, off), nil
}

// Close ends the subscription.
func (s *Subscription) Close() {
	if s.sub != nil {
		s.sub.Close()
	}
}
