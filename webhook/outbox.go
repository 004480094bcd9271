// Package webhook tells other services what happens in a host's sessions
// — a run ended, a run waits for a person, a decision, a budget reached —
// by signed HTTP POSTs, from a durable outbox.
//
// An [Outbox] is the host's [host.Outbox]: the host stages each batch of
// ledger events with it before appending the batch, and the outbox writes
// a delivery for each event a webhook tells (see [Types]) into the
// storage's key-value store, before the event is in its ledger. A
// delivery is sent only once the session's ledger holds its event; one
// whose event no ledger holds after a grace (the host died between the
// two writes, or its append was refused) is forgotten unsent. So a crash
// at any point neither loses an event nor invents one.
//
// [Outbox.Run] sends the deliveries: on a storage that several hosts share
// (a [storage.Leaser]), one host at a time, under a lease. Each is POSTed
// to every endpoint that wants its type, signed ([Sign], [Verify]),
// until one answers 2xx or [Options.RetryFor] passed, with a backoff
// doubling from [Options.MinBackoff] to [Options.MaxBackoff]. Delivery is
// at least once: a host that dies after an endpoint took a delivery but
// before it recorded that sends it again, with the same id, which the
// receiver ignores the second time. [Outbox.Deliveries] lists them, sent,
// waiting and given up, with their attempts and last failure.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Endpoint is a URL that receives deliveries.
type Endpoint struct {
	// URL is where deliveries are POSTed (http or https). Required.
	URL string
	// Events are the types it receives (see [Types]). Default: none,
	// every type.
	Events []string
}

// wants reports whether the endpoint receives events of typ.
func (e Endpoint) wants(typ string) bool { return len(e.Events) == 0 || slices.Contains(e.Events, typ) }

// Options configures an [Outbox]. The zero value of every field but
// Storage, Endpoints and Secret is its default.
type Options struct {
	// Storage keeps the ledgers the outbox confirms deliveries against,
	// and, in its key-value store, the deliveries (namespaces
	// "webhooks:outbox" and "webhooks:done"). It is the storage of the
	// host that stages into the outbox, and must implement storage.KV.
	// Required.
	Storage storage.Storage
	// Endpoints receive the deliveries. Required.
	Endpoints []Endpoint
	// Secret keys the deliveries' signatures; at least 16 bytes. Required.
	Secret []byte
	// Tenant names the tenant in the payloads. Default: "".
	Tenant string
	// Client sends the deliveries; it should reach only what the tenant
	// may (the server gives plugins.EgressClient of the tenant's sandbox).
	// Redirects are never followed: a 3xx is a failed attempt. Default:
	// a client with no timeout of its own (Timeout bounds each attempt).
	Client *http.Client
	// Leaser and LeaseID name the lease under which one host at a time
	// sends, when several share the storage. Default: the Storage itself
	// when it is a storage.Leaser, with LeaseID "webhooks.outbox" (a
	// session id no prefixed session can have, when Storage is the
	// store beneath the tenants' storage.Prefix views); none (this
	// process sends) otherwise.
	Leaser  storage.Leaser
	LeaseID string
	// LeaseTTL is the lease's time to live: how long a dead host's
	// deliveries wait for another host. Default: 0, which means 15s.
	LeaseTTL time.Duration
	// Owner names this host as the lease's owner. Default: a random id.
	Owner string
	// Poll paces the look for deliveries to send. Default: 0, which means
	// 1s.
	Poll time.Duration
	// Timeout bounds one attempt. Default: 0, which means 10s.
	Timeout time.Duration
	// MinBackoff and MaxBackoff pace a failing endpoint's attempts: the
	// wait doubles from MinBackoff, up to MaxBackoff. Default: 0, which
	// means 10s and 1h.
	MinBackoff, MaxBackoff time.Duration
	// RetryFor is how long, from its event, a delivery is tried before it
	// is given up (failed). Default: 0, which means 24h.
	RetryFor time.Duration
	// Grace is how long a delivery whose event its ledger does not hold
	// is kept, in case the append is on its way: longer than a host's
	// append may take (host.Timeouts.Append). Default: 0, which means 2m.
	Grace time.Duration
	// Keep is how long finished deliveries stay listed. Default: 0,
	// which means 168h (7 days).
	Keep time.Duration
	// Concurrency bounds the deliveries sent at once to one endpoint
	// (each endpoint has its own places: one that hangs holds no other's).
	// Default: 0, which means 8.
	Concurrency int
	// Logger receives the outbox's logs. Default: slog.Default().
	Logger *slog.Logger
}

// The defaults of [Options].
const (
	DefaultLeaseID     = "webhooks.outbox"
	DefaultPoll        = time.Second
	DefaultTimeout     = 10 * time.Second
	DefaultMinBackoff  = 10 * time.Second
	DefaultMaxBackoff  = time.Hour
	DefaultRetryFor    = 24 * time.Hour
	DefaultGrace       = 2 * time.Minute
	DefaultKeep        = 7 * 24 * time.Hour
	DefaultLeaseTTL    = 15 * time.Second
	defaultConcurrency = 8
)

// The key-value namespaces of the deliveries.
const (
	nsOutbox = "webhooks:outbox" // waiting: unconfirmed, or an endpoint not done
	nsDone   = "webhooks:done"   // finished: every endpoint delivered or given up
)

// The states of a delivery to an endpoint, and of a delivery.
const (
	StatePending   = "pending"
	StateDelivered = "delivered"
	StateFailed    = "failed"
)

var (
	// ErrSignature is returned by [Verify] for a header that is malformed
	// or carries no signature of the body under the secret.
	ErrSignature = errors.New("webhook: bad signature")
	// ErrTimestamp is returned by [Verify] for a signature whose time is
	// past the tolerance.
	ErrTimestamp = errors.New("webhook: signature time outside the tolerance")
	// ErrNotFound is returned for a delivery the outbox does not hold.
	ErrNotFound = errors.New("webhook: no such delivery")
)

// Delivery is one event told to the endpoints that want its type.
type Delivery struct {
	// ID is the event's id (Payload.ID).
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	SessionID string    `json:"session_id"`
	EventID   string    `json:"event_id"`
	StagedAt  time.Time `json:"staged_at"`
	// Confirmed tells that the session's ledger holds the event: only
	// then is it sent.
	Confirmed bool `json:"confirmed"`
	// State is pending while an endpoint waits, else failed when one gave
	// up, else delivered.
	State   string          `json:"state"`
	Targets []Target        `json:"targets"`
	Payload json.RawMessage `json:"payload"`
}

// Target is a delivery's progress at one endpoint.
type Target struct {
	URL      string `json:"url"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// NextAt is when the next attempt is due (pending).
	NextAt time.Time `json:"next_at,omitzero"`
	// LastAt, LastStatus and LastError tell the last attempt: its time,
	// the HTTP status it got (0: none) and why it failed.
	LastAt      time.Time `json:"last_at,omitzero"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
}

// Outbox stages, keeps and sends a tenant's webhook deliveries. It is safe
// for concurrent use.
//
// Each endpoint has queues of its own: its deliveries of a session go in
// the order of the session's ledger, sessions side by side (at most
// Options.Concurrency at once per endpoint), and an endpoint that hangs or
// fails holds back its own deliveries only — another endpoint's, even of
// the same delivery, go on while it hangs.
type Outbox struct {
	opts    Options
	kv      storage.KV
	client  *http.Client
	log     *slog.Logger
	flushMu sync.Mutex // one pass over the outbox at a time
	pruned  time.Time  // when the finished deliveries were last pruned; flushMu

	lanesMu sync.Mutex
	busy    map[lane]bool            // the lanes sending now
	slots   map[string]chan struct{} // per endpoint URL: Concurrency places
	lanes   sync.WaitGroup           // the lanes sending now
	records [64]sync.Mutex           // a delivery's record is rewritten under records[hash(id)%64]
	errs    []error                  // the lanes' failures, for Flush; lanesMu
}

// lane is one endpoint's queue of one session's deliveries.
type lane struct{ url, session string }

// New returns an outbox, or every problem of opts at once.
func New(opts Options) (*Outbox, error) {
	var errs []error
	kv, ok := opts.Storage.(storage.KV)
	if !ok {
		errs = append(errs, errors.New("webhook: Options.Storage must keep values (storage.KV)"))
	}
	if len(opts.Endpoints) == 0 {
		errs = append(errs, errors.New("webhook: Options.Endpoints: none"))
	}
	for i, e := range opts.Endpoints {
		if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("webhook: Options.Endpoints[%d]: want an http or https URL", i))
		}
		for _, typ := range e.Events {
			if !slices.Contains(Types(), typ) {
				errs = append(errs, fmt.Errorf("webhook: Options.Endpoints[%d]: unknown event type %q (want one of %s)", i, typ, strings.Join(Types(), ", ")))
			}
		}
	}
	if len(opts.Secret) < 16 {
		errs = append(errs, errors.New("webhook: Options.Secret: want at least 16 bytes"))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"LeaseTTL", &opts.LeaseTTL, DefaultLeaseTTL}, {"Poll", &opts.Poll, DefaultPoll}, {"Timeout", &opts.Timeout, DefaultTimeout},
		{"MinBackoff", &opts.MinBackoff, DefaultMinBackoff}, {"MaxBackoff", &opts.MaxBackoff, DefaultMaxBackoff},
		{"RetryFor", &opts.RetryFor, DefaultRetryFor}, {"Grace", &opts.Grace, DefaultGrace}, {"Keep", &opts.Keep, DefaultKeep}} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			errs = append(errs, fmt.Errorf("webhook: Options.%s %s is negative", d.name, *d.v))
		}
	}
	if opts.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("webhook: Options.Concurrency %d is negative", opts.Concurrency))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = defaultConcurrency
	}
	if opts.Leaser == nil {
		opts.Leaser, _ = opts.Storage.(storage.Leaser)
	}
	if opts.LeaseID == "" {
		opts.LeaseID = DefaultLeaseID
	}
	if opts.Owner == "" {
		opts.Owner = ledger.NewID("outbox")
	}
	opts.Endpoints = slices.Clone(opts.Endpoints)
	opts.Secret = slices.Clone(opts.Secret)
	o := &Outbox{opts: opts, kv: kv, log: opts.Logger}
	if o.log == nil {
		o.log = slog.Default()
	}
	c := http.Client{}
	if opts.Client != nil {
		c = *opts.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.client = &c
	return o, nil
}

// Stage writes a delivery for each event of events a webhook tells and an
// endpoint wants, before the host appends them to the session's ledger
// (see [host.Outbox]).
func (o *Outbox) Stage(ctx context.Context, sessionID string, events []ledger.Event) error {
	for _, ev := range events {
		for _, p := range eventsOf(o.opts.Tenant, sessionID, ev) {
			var targets []Target
			for _, e := range o.opts.Endpoints {
				if e.wants(p.Type) {
					targets = append(targets, Target{URL: e.URL, State: StatePending})
				}
			}
			if len(targets) == 0 {
				continue
			}
			body, err := json.Marshal(p)
			if err != nil {
				return fmt.Errorf("webhook: %w", err)
			}
			d := Delivery{ID: p.ID, Type: p.Type, SessionID: sessionID, EventID: ev.ID, StagedAt: time.Now().UTC(),
				State: StatePending, Targets: targets, Payload: body}
			if err := o.put(ctx, nsOutbox, d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *Outbox) put(ctx context.Context, ns string, d Delivery) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if err := o.kv.Set(ctx, ns, d.ID, b); err != nil {
		return fmt.Errorf("webhook: keep delivery %s: %w", d.ID, err)
	}
	return nil
}

func (o *Outbox) get(ctx context.Context, ns, id string) (Delivery, bool, error) {
	b, ok, err := o.kv.Get(ctx, ns, id)
	if err != nil || !ok {
		return Delivery{}, false, err
	}
	var d Delivery
	if err := json.Unmarshal(b, &d); err != nil {
		return Delivery{}, false, fmt.Errorf("webhook: delivery %s: %w", id, err)
	}
	return d, true, nil
}

// Run sends the deliveries until ctx ends, leading (under the lease, on a
// shared storage) or waiting to lead. It returns ctx.Err().
func (o *Outbox) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		lctx, release := o.lead(ctx)
		if lctx == nil {
			break
		}
		o.serve(lctx)
		release()
	}
	return ctx.Err()
}

// lead returns once this host leads the outbox: a context that ends when
// it stops leading (ctx ended, the lease was lost), and the function that
// gives the lead up. It returns nil when ctx ended first.
func (o *Outbox) lead(ctx context.Context) (context.Context, func()) {
	if o.opts.Leaser == nil {
		return ctx, func() {}
	}
	ttl := o.opts.LeaseTTL
	for {
		lease, err := o.opts.Leaser.AcquireLease(ctx, o.opts.LeaseID, o.opts.Owner, ttl)
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
							if lctx.Err() == nil {
								o.log.Warn("webhooks: lost the outbox's lease; another host sends", "err", err)
							}
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
			o.log.Warn("webhooks: cannot take the outbox's lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(ttl / 3):
		}
	}
}

// serve sends what is due, every Poll, until ctx ends: each pass starts
// the lanes that have something due and are not sending already, without
// waiting for them, so that an endpoint that hangs holds back no other.
// It returns once the lanes it started are done (their attempts bounded
// by Timeout), so that no other host sends while this one still does.
func (o *Outbox) serve(ctx context.Context) {
	t := time.NewTicker(o.opts.Poll)
	defer t.Stop()
	defer o.lanes.Wait()
	for {
		if err := o.pass(ctx, nil); err != nil && ctx.Err() == nil {
			o.log.Warn("webhooks: cannot go over the outbox", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Flush goes over the outbox once: it confirms deliveries against their
// ledgers (and forgets those never recorded), and makes the attempts that
// are due, waiting for them (an endpoint's lane still sending from a pass
// of Run is left to it). Run goes over the outbox every Poll while it
// leads, without waiting; a test or a program that sends without Run
// calls Flush itself (it is not to be called while another host leads).
func (o *Outbox) Flush(ctx context.Context) error {
	var wg sync.WaitGroup
	err := o.pass(ctx, &wg)
	wg.Wait()
	return errors.Join(err, o.takeErrs())
}

// pass goes over the outbox once and starts a lane for each endpoint's
// session with attempts due that is not sending already; wg, when not
// nil, counts the lanes it started. The lanes' failures are logged (and
// kept for Flush).
func (o *Outbox) pass(ctx context.Context, wg *sync.WaitGroup) error {
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	keys, err := o.kv.Keys(ctx, nsOutbox)
	if err != nil {
		return fmt.Errorf("webhook: list the outbox: %w", err)
	}
	ledgers := map[string][]ledger.Event{} // the sessions loaded on this pass
	due := map[lane][]Delivery{}           // what to send, by lane
	var order []lane                       // the lanes of due
	var errs []error
	now := time.Now()
	for _, id := range keys {
		if ctx.Err() != nil {
			break
		}
		d, ok, err := o.get(ctx, nsOutbox, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		// A host that died between recording the delivery finished and
		// removing it from the outbox left it in both.
		if _, done, err := o.get(ctx, nsDone, d.ID); err != nil || done {
			if done {
				err = o.kv.Delete(ctx, nsOutbox, d.ID)
			}
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if !d.Confirmed {
			evs, loaded := ledgers[d.SessionID]
			if !loaded {
				if evs, err = o.opts.Storage.Load(ctx, d.SessionID); err != nil {
					errs = append(errs, fmt.Errorf("webhook: load session %s: %w", d.SessionID, err))
					continue
				}
				ledgers[d.SessionID] = evs
			}
			switch {
			case slices.ContainsFunc(evs, func(e ledger.Event) bool { return e.ID == d.EventID }):
				if err := o.confirm(ctx, d.ID); err != nil {
					errs = append(errs, err)
					continue
				}
				d.Confirmed = true
			case now.Sub(d.StagedAt) > o.opts.Grace:
				// Its host died between the two writes, or its append
				// was refused: the event never happened.
				if err := o.kv.Delete(ctx, nsOutbox, id); err != nil {
					errs = append(errs, err)
				}
				continue
			default:
				continue // its append may be on its way
			}
		}
		for _, t := range d.Targets {
			if t.State != StatePending || t.NextAt.After(now) {
				continue
			}
			l := lane{url: t.URL, session: d.SessionID}
			if _, ok := due[l]; !ok {
				order = append(order, l)
			}
			if q := due[l]; len(q) == 0 || q[len(q)-1].ID != d.ID {
				due[l] = append(q, d)
			}
		}
	}
	// A lane's deliveries go in the order of its session's ledger (the
	// order they were staged in).
	for _, l := range order {
		if !o.startLane(l) {
			continue // still sending from an earlier pass: it goes on there
		}
		q := due[l]
		slices.SortStableFunc(q, func(a, b Delivery) int { return a.StagedAt.Compare(b.StagedAt) })
		if wg != nil {
			wg.Add(1)
		}
		o.lanes.Go(func() {
			if wg != nil {
				defer wg.Done()
			}
			defer o.endLane(l)
			o.sendLane(ctx, l, q)
		})
	}
	if err := o.prune(ctx, now); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startLane marks l sending, unless it is already.
func (o *Outbox) startLane(l lane) bool {
	o.lanesMu.Lock()
	defer o.lanesMu.Unlock()
	if o.busy == nil {
		o.busy, o.slots = map[lane]bool{}, map[string]chan struct{}{}
	}
	if o.busy[l] {
		return false
	}
	o.busy[l] = true
	return true
}

func (o *Outbox) endLane(l lane) {
	o.lanesMu.Lock()
	delete(o.busy, l)
	o.lanesMu.Unlock()
}

// slot returns the places of the endpoint at url: Concurrency of its
// lanes send at once.
func (o *Outbox) slot(url string) chan struct{} {
	o.lanesMu.Lock()
	defer o.lanesMu.Unlock()
	c, ok := o.slots[url]
	if !ok {
		c = make(chan struct{}, o.opts.Concurrency)
		o.slots[url] = c
	}
	return c
}

// sendLane makes the due attempts of l's deliveries, in order, each
// recorded as it ends.
func (o *Outbox) sendLane(ctx context.Context, l lane, q []Delivery) {
	slot := o.slot(l.url)
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-slot }()
	// An attempt begun is finished and recorded even when this host stops
	// leading meanwhile (its own Timeout bounds it): an attempt cut short
	// might have reached the endpoint, and would be sent again.
	actx := context.WithoutCancel(ctx)
	for _, d := range q {
		// Read again now that the lane is this goroutine's alone: the pass
		// read it while an earlier run of the lane may still have been
		// sending it.
		d, ok, err := o.get(ctx, nsOutbox, d.ID)
		if err != nil {
			o.keepErr(err)
			continue
		}
		if !ok {
			continue // finished meanwhile
		}
		for i, t := range d.Targets {
			if t.URL != l.url || t.State != StatePending || t.NextAt.After(time.Now()) || ctx.Err() != nil {
				continue
			}
			status, err := o.attempt(actx, t.URL, d)
			if rerr := o.record(actx, d.ID, i, t.URL, status, err); rerr != nil {
				o.keepErr(rerr)
			}
		}
	}
}

// record writes the outcome of an attempt of target i of delivery id into
// its record, read again under the delivery's lock (another endpoint's
// lane records its own target of the same delivery), and moves the
// delivery to the finished ones once no target is pending.
func (o *Outbox) record(ctx context.Context, id string, i int, url string, status int, err error) error {
	mu := &o.records[fnv32(id)%uint32(len(o.records))]
	mu.Lock()
	defer mu.Unlock()
	d, ok, gerr := o.get(ctx, nsOutbox, id)
	if gerr != nil || !ok || i >= len(d.Targets) || d.Targets[i].URL != url {
		return gerr // gone meanwhile (another host's, a prune): nothing to record
	}
	t := &d.Targets[i]
	now := time.Now().UTC()
	t.Attempts++
	t.LastAt, t.LastStatus, t.LastError = now, status, ""
	switch {
	case err == nil:
		t.State, t.DeliveredAt, t.NextAt = StateDelivered, now, time.Time{}
	default:
		t.LastError = err.Error()
		if now.Sub(d.StagedAt) >= o.opts.RetryFor {
			t.State, t.NextAt = StateFailed, time.Time{}
			o.log.Warn("webhooks: a delivery is given up", "delivery", d.ID, "url", redact(t.URL), "attempts", t.Attempts, "err", err)
		} else {
			t.NextAt = now.Add(o.backoff(t.Attempts))
		}
	}
	d.State = stateOf(d.Targets)
	if d.State == StatePending {
		return o.put(ctx, nsOutbox, d)
	}
	if err := o.put(ctx, nsDone, d); err != nil {
		return err
	}
	return o.kv.Delete(ctx, nsOutbox, d.ID)
}

// confirm records that delivery id's event is in its ledger, under the
// delivery's lock.
func (o *Outbox) confirm(ctx context.Context, id string) error {
	mu := &o.records[fnv32(id)%uint32(len(o.records))]
	mu.Lock()
	defer mu.Unlock()
	d, ok, err := o.get(ctx, nsOutbox, id)
	if err != nil || !ok || d.Confirmed {
		return err
	}
	d.Confirmed = true
	return o.put(ctx, nsOutbox, d)
}

// fnv32 is the FNV-1a hash of s.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// keepErr keeps a lane's failure for the next Flush, and logs it.
func (o *Outbox) keepErr(err error) {
	o.log.Warn("webhooks: cannot record an attempt", "err", err)
	o.lanesMu.Lock()
	o.errs = append(o.errs, err)
	o.lanesMu.Unlock()
}

// takeErrs returns the lanes' failures kept since the last call.
func (o *Outbox) takeErrs() error {
	o.lanesMu.Lock()
	defer o.lanesMu.Unlock()
	err := errors.Join(o.errs...)
	o.errs = nil
	return err
}

// stateOf is a delivery's state from its targets'.
func stateOf(ts []Target) string {
	state := StateDelivered
	for _, t := range ts {
		switch t.State {
		case StatePending:
			return StatePending
		case StateFailed:
			state = StateFailed
		}
	}
	return state
}

// backoff is the wait after the attempts-th failed attempt.
func (o *Outbox) backoff(attempts int) time.Duration {
	d := o.opts.MinBackoff
	for i := 1; i < attempts && d < o.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.opts.MaxBackoff)
}

// attempt POSTs d's payload to url, signed now, and returns the status it
// got and why the attempt failed (nil for a 2xx).
func (o *Outbox) attempt(ctx context.Context, rawURL string, d Delivery) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentic-host-webhooks/1")
	req.Header.Set("X-Agentic-Event", d.Type)
	req.Header.Set("X-Agentic-Delivery", d.ID)
	req.Header.Set(SignatureHeader, Sign(o.opts.Secret, d.Payload, time.Now()))
	res, err := o.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a token: it is the endpoint's, not the log's
		}
		return 0, err
	}
	defer res.Body.Close()
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return res.StatusCode, fmt.Errorf("the endpoint answered %s", res.Status)
	}
	return res.StatusCode, nil
}

// redact drops a URL's query and credentials, for the log.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a bad URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// prune removes finished deliveries older than Keep, once a minute.
func (o *Outbox) prune(ctx context.Context, now time.Time) error {
	if now.Sub(o.pruned) < time.Minute {
		return nil
	}
	o.pruned = now
	keys, err := o.kv.Keys(ctx, nsDone)
	if err != nil {
		return err
	}
	for _, id := range keys {
		d, ok, err := o.get(ctx, nsDone, id)
		if err != nil || !ok {
			continue
		}
		if now.Sub(d.StagedAt) > o.opts.Keep {
			if err := o.kv.Delete(ctx, nsDone, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// Query selects deliveries for [Outbox.Deliveries].
type Query struct {
	// State keeps those of one state (pending, delivered, failed).
	// Default: "", every state.
	State string
	// Limit bounds how many come. Default: 0, which means 100.
	Limit int
}

// Deliveries returns the deliveries the outbox holds, newest first:
// pending ones (those whose event a ledger holds) and finished ones for
// Options.Keep.
func (o *Outbox) Deliveries(ctx context.Context, q Query) ([]Delivery, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	var ids []struct{ ns, id string }
	for _, ns := range []string{nsOutbox, nsDone} {
		keys, err := o.kv.Keys(ctx, ns)
		if err != nil {
			return nil, fmt.Errorf("webhook: list deliveries: %w", err)
		}
		for _, k := range keys {
			ids = append(ids, struct{ ns, id string }{ns, k})
		}
	}
	// Ids are ledger ids: they sort by time. A delivery in both (its host
	// died as it moved it) is read from the finished ones.
	slices.SortFunc(ids, func(a, b struct{ ns, id string }) int {
		if c := strings.Compare(b.id, a.id); c != 0 {
			return c
		}
		return strings.Compare(a.ns, b.ns)
	})
	out := []Delivery{}
	seen := map[string]bool{}
	for _, k := range ids {
		if len(out) == q.Limit {
			break
		}
		d, ok, err := o.get(ctx, k.ns, k.id)
		if err != nil {
			return nil, err
		}
		if !ok || !d.Confirmed || seen[d.ID] || (q.State != "" && d.State != q.State) {
			continue
		}
		seen[d.ID] = true
		out = append(out, d)
	}
	// Ids sort by the millisecond: within one, the order of staging.
	slices.SortStableFunc(out, func(a, b Delivery) int { return b.StagedAt.Compare(a.StagedAt) })
	return out, nil
}

// Delivery returns one delivery, pending or finished.
func (o *Outbox) Delivery(ctx context.Context, id string) (Delivery, error) {
	for _, ns := range []string{nsDone, nsOutbox} {
		d, ok, err := o.get(ctx, ns, id)
		if err != nil {
			return Delivery{}, err
		}
		if ok && d.Confirmed {
			return d, nil
		}
	}
	return Delivery{}, ErrNotFound
}

// Waiting returns how many deliveries wait in the outbox: pending ones,
// and those whose event no ledger holds yet (not listed).
func (o *Outbox) Waiting(ctx context.Context) (int, error) {
	n, err := o.kv.Len(ctx, nsOutbox)
	if err != nil {
		return 0, fmt.Errorf("webhook: %w", err)
	}
	return n, nil
}

// Endpoints returns the outbox's endpoints.
func (o *Outbox) Endpoints() []Endpoint { return slices.Clone(o.opts.Endpoints) }

var _ host.Outbox = (*Outbox)(nil)
