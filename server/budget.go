package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/storage"
)

// Budgets: a tenant's billed cost per UTC day, summed over every host
// sharing the storage. Each host keeps its own share of the day in the
// key-value store (one key per host, written only by it, so no two hosts
// race on a value), and a check adds the shares up. A run is refused
// before it starts past the budget (admission control), and a run in
// flight that crosses it finishes the step it is in: its next model call
// fails with ErrBudgetExceeded, ending it failed with reason
// "budget_exceeded: …".

// ErrBudgetExceeded is the error of a model call a tenant's budget stops.
type ErrBudgetExceeded struct {
	// Tenant is the tenant whose budget is spent.
	Tenant string
	// Spent and Limit are the day's spend and the budget, in USD.
	Spent, Limit float64
}

func (e *ErrBudgetExceeded) Error() string {
	return fmt.Sprintf("budget_exceeded: tenant %s spent $%.4f of its $%.2f daily budget", e.Tenant, e.Spent, e.Limit)
}

// Retryable reports false: waiting does not bring the budget back today.
func (e *ErrBudgetExceeded) Retryable() bool { return false }

// budget tracks one tenant's spend.
type budget struct {
	kv     storage.KV
	tenant string
	limit  float64
	hostID string

	mu    sync.Mutex
	day   string  // the UTC day of own
	own   float64 // this host's spend of the day
	total float64 // the day's spend of every host, as last read
	read  time.Time
}

func newBudget(kv storage.KV, tenant string, limit float64, hostID string) *budget {
	return &budget{kv: kv, tenant: tenant, limit: limit, hostID: hostID}
}

// budgetRecheck is how stale the other hosts' shares may be.
const budgetRecheck = time.Second

func (b *budget) namespace(day string) string { return "agentic:budget:" + b.tenant + ":" + day }

// add records cost spent by this host now.
func (b *budget) add(ctx context.Context, cost float64) {
	if cost <= 0 {
		return
	}
	b.mu.Lock()
	day := time.Now().UTC().Format(time.DateOnly)
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

// spent returns the day's spend of every host.
func (b *budget) spent(ctx context.Context) (float64, error) {
	b.mu.Lock()
	day := time.Now().UTC().Format(time.DateOnly)
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
		return &ErrBudgetExceeded{Tenant: b.tenant, Spent: spent, Limit: b.limit}, err
	}
	return nil, err
}

// hook stops model calls past the budget, and counts what calls cost.
func (b *budget) hook() host.Hook { return budgetHook{b} }

type budgetHook struct{ b *budget }

func (h budgetHook) ModelHook(next host.StreamFunc) host.StreamFunc {
	return func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
		if over, _ := h.b.exceeded(ctx); over != nil {
			return model.Result{}, over
		}
		res, err := next(ctx, req, onDelta)
		h.b.add(context.WithoutCancel(ctx), res.Usage.Billed())
		return res, err
	}
}

func (h budgetHook) ToolHook(next host.CallFunc) host.CallFunc { return next }
