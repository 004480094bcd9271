package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/storage"
)

// Budgets: a tenant's billed cost per UTC day, summed over every host
// sharing the storage. A run is refused before it starts past the budget
// (admission control), and each model call reserves its cost before it is
// made and settles the reservation with the real cost after it:
//
//   - With a storage that keeps counters (storage.Counter, as every
//     built-in one does), the day's committed spend (spent + reserved) is
//     one counter every host adds to atomically. A call reserves the
//     dearest call any host has seen (kept in the storage; before any
//     was, all that is left, so that a tenant's very first calls go one
//     at a time), within what is left: it never reserves past the
//     budget. When nothing is left but other calls hold reservations, it
//     waits for them to settle (up to budgetWait); when nothing is left
//     at all, it fails with ErrBudgetExceeded. So the day's spend passes the budget by at most
//     one call's worth (a call dearer than any seen before, or the last
//     one, which reserved what was left), however many run at once, on
//     however many hosts. A host that dies holding a reservation leaves
//     it counted until the day ends.
//   - Without, each host keeps its own share of the day in the key-value
//     store (one key per host), and a check adds the shares up: calls in
//     flight at once are not counted until they end, so parallel runs may
//     pass the budget by a call each.
//
// A run in flight that crosses the budget finishes the step it is in: its
// next model call fails with ErrBudgetExceeded, ending it failed with
// reason "budget_exceeded: …".
//
// A model call whose provider reported no cost (ledger.Usage.CostUnknown:
// an endpoint that does not price its calls, a stream that ended without
// its usage) fails closed: it counts as all of the day's budget, so that
// nothing more runs on it today, and the error says which model did it —
// never as free.

// ErrBudgetExceeded is the error of a model call a tenant's budget stops.
type ErrBudgetExceeded struct {
	// Tenant is the tenant whose budget is spent.
	Tenant string
	// Spent and Limit are the day's spend and the budget, in USD.
	Spent, Limit float64
	// Unpriced names the model whose call reported no cost today, which
	// counted as all of the budget (fail closed); "" when none did.
	Unpriced string
	// Eval tells that the budget is the tenant's evaluations'
	// (eval_budget_usd_per_day), not its runs'.
	Eval bool
}

func (e *ErrBudgetExceeded) Error() string {
	what := "daily budget"
	if e.Eval {
		what = "daily evaluation budget (eval_budget_usd_per_day)"
	}
	if e.Unpriced != "" {
		return fmt.Sprintf("budget_exceeded: tenant %s: a call of model %s today reported no cost, so it counts as all of the $%.2f %s (a model whose price is unknown is never counted as free)", e.Tenant, e.Unpriced, e.Limit, what)
	}
	return fmt.Sprintf("budget_exceeded: tenant %s spent $%.4f of its $%.2f %s", e.Tenant, e.Spent, e.Limit, what)
}

// Retryable reports false: waiting does not bring the budget back today.
func (e *ErrBudgetExceeded) Retryable() bool { return false }

// budget tracks one tenant's spend.
type budget struct {
	kv      storage.KV
	counter storage.Counter // nil: no counters, each host's share instead
	tenant  string
	limit   float64
	hostID  string
	eval    bool         // the tenant's evaluations' budget (eval_budget_usd_per_day), kept apart from its runs'
	raise   *raise       // budget_ask: what an approval lets a run spend past the budget; nil: a run past it fails
	log     *slog.Logger // for the storage's failures, which let calls through; nil: none

	mu       sync.Mutex
	estimate int64 // the dearest call seen (by any host, as last read), in micro-USD; 0: none yet

	// Without counters:
	day   string  // the UTC day of own
	own   float64 // this host's spend of the day
	total float64 // the day's spend of every host, as last read
	read  time.Time
}

func newBudget(kv storage.KV, counter storage.Counter, tenant string, limit float64, hostID string) *budget {
	return &budget{kv: kv, counter: counter, tenant: tenant, limit: limit, hostID: hostID}
}

// The keys of the day's counters, in its namespace (beside the hosts'
// shares, which no counter uses), and of the tenant's dearest call, in
// estimateNamespace.
const (
	committedKey = "=committed" // spent and reserved, in micro-USD
	reservedKey  = "=reserved"  // reserved by calls in flight, in micro-USD
	estimateKey  = "dearest"    // the dearest call any host has seen, in micro-USD
	unpricedKey  = "=unpriced"  // (key-value) the model of a call that reported no cost today
)

// estimateNamespace keeps what outlives a day: the tenant's dearest call,
// so that a new host (or a new day) reserves it at once, rather than all
// that is left until it has seen a call itself.
func (b *budget) estimateNamespace() string {
	if b.eval {
		return "agentic:budget:" + b.tenant + ":eval"
	}
	return "agentic:budget:" + b.tenant
}

// budgetWait bounds how long a call waits for other calls' reservations to
// settle when nothing of the budget is left unreserved.
const budgetWait = time.Minute

// micro converts USD to micro-USD, rounding to nearest.
func micro(usd float64) int64 { return int64(math.Round(usd * 1e6)) }

// reservation is what a model call holds of the budget while it runs.
type reservation struct {
	ns     string // the day it was made on
	amount int64  // micro-USD
}

// reserve holds of the day's budget what the next call may cost (see the
// package comment). It returns an *ErrBudgetExceeded when nothing is left,
// and an error (the call then goes on: the budget fails open, logged by
// the caller) when the storage cannot tell.
func (b *budget) reserve(ctx context.Context) (reservation, *ErrBudgetExceeded, error) {
	ns := b.namespace(today())
	limit := micro(b.limit)
	deadline := time.Now().Add(budgetWait)
	for {
		committed, _, err := b.counter.AddWithin(ctx, ns, committedKey, 0, 0)
		if err != nil {
			return reservation{}, nil, err
		}
		if left := limit - committed; left > 0 {
			r := b.dearest(ctx)
			if r <= 0 || r > left {
				r = left
			}
			_, added, err := b.counter.AddWithin(ctx, ns, committedKey, r, limit)
			if err != nil {
				return reservation{}, nil, err
			}
			if !added {
				continue // another call reserved meanwhile: look again
			}
			if _, _, err := b.counter.AddWithin(ctx, ns, reservedKey, r, math.MaxInt64); err != nil {
				return reservation{ns, r}, nil, err
			}
			return reservation{ns, r}, nil, nil
		}
		reserved, _, err := b.counter.AddWithin(ctx, ns, reservedKey, 0, 0)
		if err != nil {
			return reservation{}, nil, err
		}
		spent := float64(committed-reserved) / 1e6
		if reserved <= 0 || time.Now().After(deadline) {
			return reservation{}, b.over(ctx, spent), nil
		}
		// Others hold what is left: their calls settle, dearer or
		// cheaper than reserved.
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return reservation{}, nil, ctx.Err()
		}
	}
}

// dearest returns the dearest call any host has seen, as the storage keeps
// it (or, when it cannot be read, as this host last knew it); 0 when none
// was.
func (b *budget) dearest(ctx context.Context) int64 {
	stored, _, err := b.counter.AddWithin(ctx, b.estimateNamespace(), estimateKey, 0, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.estimate = max(b.estimate, stored)
	}
	return b.estimate
}

// settle replaces a call's reservation by what it cost, and raises the
// dearest call seen (here, and in the storage for every host) when it is
// dearer.
func (b *budget) settle(ctx context.Context, res reservation, cost float64) {
	spent := micro(max(cost, 0))
	b.mu.Lock()
	dearer := spent > b.estimate
	b.estimate = max(b.estimate, spent)
	b.mu.Unlock()
	if dearer {
		// An atomic max: add the difference only if the counter has not
		// moved since it was read.
		for {
			stored, _, err := b.counter.AddWithin(ctx, b.estimateNamespace(), estimateKey, 0, 0)
			if err != nil || stored >= spent {
				break
			}
			if _, added, err := b.counter.AddWithin(ctx, b.estimateNamespace(), estimateKey, spent-stored, spent); err != nil || added {
				break
			}
		}
	}
	if res.amount == 0 && spent == 0 {
		return
	}
	// Best effort: a settle that fails leaves the reservation counted.
	b.counter.AddWithin(ctx, res.ns, committedKey, spent-res.amount, math.MaxInt64)
	if res.amount != 0 {
		b.counter.AddWithin(ctx, res.ns, reservedKey, -res.amount, math.MaxInt64)
	}
}

// over is the error of a call past the budget, spent the day's spend; it
// names the model whose unpriced call spent it, if one did.
func (b *budget) over(ctx context.Context, spent float64) *ErrBudgetExceeded {
	e := &ErrBudgetExceeded{Tenant: b.tenant, Spent: spent, Limit: b.limit, Eval: b.eval}
	if v, ok, err := b.kv.Get(ctx, b.namespace(today()), unpricedKey); err == nil && ok {
		e.Unpriced = string(v)
	}
	return e
}

// failClosed counts a call whose provider reported no cost as all of the
// day's budget, in place of its reservation, and remembers its model for
// the errors of the calls it stops.
func (b *budget) failClosed(ctx context.Context, res reservation, model string) {
	day := today()
	b.kv.Set(ctx, b.namespace(day), unpricedKey, []byte(model)) // best effort: the count below stops the calls anyway
	if b.counter == nil {
		b.add(ctx, b.limit)
		return
	}
	ns := cmp.Or(res.ns, b.namespace(day))
	b.counter.AddWithin(ctx, ns, committedKey, micro(b.limit), math.MaxInt64)
	if res.amount != 0 {
		b.counter.AddWithin(ctx, res.ns, committedKey, -res.amount, math.MaxInt64)
		b.counter.AddWithin(ctx, res.ns, reservedKey, -res.amount, math.MaxInt64)
	}
}

// today is the UTC day of now, as the budgets' namespaces name it.
func today() string { return time.Now().UTC().Format(time.DateOnly) }

// budgetRecheck is how stale the other hosts' shares may be.
const budgetRecheck = time.Second

func (b *budget) namespace(day string) string { return b.estimateNamespace() + ":" + day }

// add records cost spent by this host now.
func (b *budget) add(ctx context.Context, cost float64) {
	if cost <= 0 {
		return
	}
	b.mu.Lock()
	day := today()
	if day != b.day {
		b.day, b.own, b.total = day, 0, 0
	}
	b.own += cost
	b.total += cost
	own := b.own
	b.mu.Unlock()
	v, _ := json.Marshal(own)
	b.kv.Set(ctx, b.namespace(day), b.hostID, v) // best effort: the local share still counts here
}

// spent returns the day's spend of every host (without what calls in
// flight reserved).
func (b *budget) spent(ctx context.Context) (float64, error) {
	if b.counter != nil {
		ns := b.namespace(today())
		committed, _, err := b.counter.AddWithin(ctx, ns, committedKey, 0, 0)
		if err != nil {
			return 0, err
		}
		reserved, _, err := b.counter.AddWithin(ctx, ns, reservedKey, 0, 0)
		return float64(committed-reserved) / 1e6, err
	}
	b.mu.Lock()
	day := today()
	if day != b.day {
		b.day, b.own, b.total, b.read = day, 0, 0, time.Time{}
	}
	fresh := time.Since(b.read) < budgetRecheck
	total, own := b.total, b.own
	b.mu.Unlock()
	if fresh {
		return total, nil
	}
	ns := b.namespace(day)
	hosts, err := b.kv.Keys(ctx, ns)
	if err != nil {
		return total, err
	}
	sum := own
	for _, h := range hosts {
		if h == b.hostID {
			continue
		}
		v, ok, err := b.kv.Get(ctx, ns, h)
		if err != nil {
			return total, err
		}
		if f, err := strconv.ParseFloat(string(v), 64); ok && err == nil {
			sum += f
		}
	}
	b.mu.Lock()
	if b.day == day {
		b.total, b.read = max(sum, b.own), time.Now()
	}
	b.mu.Unlock()
	return sum, nil
}

// exceeded returns an *ErrBudgetExceeded when the day's spend reached the
// limit, nil otherwise (and when the spend cannot be read: the budget
// fails open, logged by the caller).
func (b *budget) exceeded(ctx context.Context) (*ErrBudgetExceeded, error) {
	spent, err := b.spent(ctx)
	if spent >= b.limit {
		return b.over(ctx, spent), err
	}
	return nil, err
}

// hook stops model calls past the budget, and counts what calls cost.
func (b *budget) hook() host.Hook { return budgetHook{b: b} }

// evalHook is hook for an evaluation: a call past the budget fails, and
// never asks a person for more (budget_ask), for no one would see an
// evaluation's request.
func (b *budget) evalHook() host.Hook { return budgetHook{b: b, noAsk: true} }

type budgetHook struct {
	b     *budget
	noAsk bool // a call past the budget fails, even with budget_ask
}

func (h budgetHook) ModelHook(next host.StreamFunc) host.StreamFunc {
	b := h.b
	return func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
		var held reservation
		if b.counter == nil {
			over, err := b.exceeded(ctx)
			if over != nil {
				return model.Result{}, over
			}
			b.cannotRead(err)
		} else {
			var over *ErrBudgetExceeded
			var err error
			if held, over, err = b.reserve(ctx); over != nil {
				if h.noAsk {
					return model.Result{}, over
				}
				return b.pastBudget(ctx, over, func() (model.Result, error) { return next(ctx, req, onDelta) })
			}
			if err != nil && ctx.Err() != nil {
				return model.Result{}, err
			}
			b.cannotRead(err)
		}
		res, err := next(ctx, req, onDelta)
		b.account(context.WithoutCancel(ctx), held, cmp.Or(res.Model, req.Model), res, err)
		return res, err
	}
}

// cannotRead logs a failure to read the budget's spend, which lets the
// model call it was read for through.
func (b *budget) cannotRead(err error) {
	if err != nil && b.log != nil {
		b.log.Warn("cannot read the budget's spend; letting the model call through", "tenant", b.tenant, "err", err)
	}
}

// account counts what a call cost: in place of its reservation (held),
// or in this host's share without counters; a call its provider did not
// price fails closed.
func (b *budget) account(ctx context.Context, held reservation, modelName string, res model.Result, err error) {
	switch {
	case err == nil && res.Usage.CostUnknown:
		b.failClosed(ctx, held, modelName)
	case b.counter == nil:
		b.add(ctx, res.Usage.Billed())
	default:
		b.settle(ctx, held, res.Usage.Billed())
	}
}

func (h budgetHook) ToolHook(next host.CallFunc) host.CallFunc { return next }
