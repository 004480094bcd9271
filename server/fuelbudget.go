package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/storage"
)

// Plugin budgets: a tenant's plugin fuel per UTC day (plugin_fuel_per_day),
// summed over every host sharing the storage in one counter. Before a
// plugin's call runs — a tool's, a policy's deciding on a tool call, a
// validator's checking a task's submission — the day's fuel so far is
// read: past the budget, the call is refused with an error the model
// reads (ErrPluginBudgetExceeded: the tool's error; a policy's refusal
// denies the call it was asked about, saying why; a submission is neither
// accepted nor rejected). After it, the fuel it used is added. The day's
// fuel passes the budget by at most the calls in flight when it crossed
// it (each bounded by the plugin's Limits.Fuel). With
// plugin_fuel_refuses_runs, a run does not start past it either. Calls of
// code that is not metered (Go tools and policies of the program, schema
// validators) are not counted, nor refused.

// ErrPluginBudgetExceeded is the error of a plugin call a tenant's daily
// plugin budget refuses.
type ErrPluginBudgetExceeded struct {
	// Tenant is the tenant whose plugin budget is spent.
	Tenant string
	// Used and Limit are the day's fuel and the budget.
	Used, Limit int64
}

func (e *ErrPluginBudgetExceeded) Error() string {
	return fmt.Sprintf("plugin_budget_exceeded: tenant %s used %d of its %d plugin fuel today (plugin_fuel_per_day); the tool did not run", e.Tenant, e.Used, e.Limit)
}

// Retryable reports false: waiting does not bring the budget back today.
func (e *ErrPluginBudgetExceeded) Retryable() bool { return false }

// fuelBudget tracks one tenant's plugin fuel.
type fuelBudget struct {
	counter storage.Counter
	tenant  string
	limit   int64
	log     *slog.Logger
	ask     *fuelAsk // budget_ask; nil: a run past the budget is not parked
}

const fuelKey = "fuel"

func (b *fuelBudget) namespace(now time.Time) string {
	return "agentic:plugin-fuel:" + b.tenant + ":" + now.UTC().Format(time.DateOnly)
}

// used returns the day's fuel so far.
func (b *fuelBudget) used(ctx context.Context) (int64, error) {
	v, _, err := b.counter.AddWithin(ctx, b.namespace(time.Now()), fuelKey, 0, math.MaxInt64)
	return v, err
}

// exceeded returns the error of a call past the budget, nil within it.
func (b *fuelBudget) exceeded(ctx context.Context) (*ErrPluginBudgetExceeded, error) {
	used, err := b.used(ctx)
	if err != nil || used < b.limit {
		return nil, err
	}
	return &ErrPluginBudgetExceeded{Tenant: b.tenant, Used: used, Limit: b.limit}, nil
}

// hook refuses plugin calls past the budget and counts their fuel.
func (b *fuelBudget) hook() host.PolicyHook { return fuelHook{b} }

type fuelHook struct{ b *fuelBudget }

// ModelHook parks, under budget_ask, a run whose plugin call the budget
// refused, before its next pass.
func (h fuelHook) ModelHook(next host.StreamFunc) host.StreamFunc {
	b := h.b
	if b.ask == nil {
		return next
	}
	return func(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
		ci, _ := host.CallInfoFrom(ctx)
		if ci.RunID != "" {
			if b.ask.take(ci.RunID) {
				if over, _ := b.exceeded(ctx); over != nil {
					return model.Result{}, &host.ApprovalNeededError{Kind: kindPluginBudget, Reason: over.Error(),
						Summary: fmt.Sprintf("The run reached tenant %s's daily plugin budget of %d fuel. Approve to let its plugins use %d fuel more; deny to stop it.", b.tenant, b.limit, b.ask.raise.amount)}
				}
			}
		}
		return next(ctx, req, onDelta)
	}
}

func (h fuelHook) ToolHook(next host.CallFunc) host.CallFunc {
	return func(ctx context.Context, tool host.Tool, call host.ToolCall) (host.ToolResult, error) {
		if !host.IsMetered(tool) {
			return next(ctx, tool, call)
		}
		return withinFuel(ctx, h.b, func() (host.ToolResult, int64, error) {
			res, err := next(ctx, tool, call)
			return res, res.Fuel, err
		})
	}
}

func (h fuelHook) PolicyHook(next host.DecideFunc) host.DecideFunc {
	return func(ctx context.Context, p host.Policy, req host.PolicyRequest) (host.Decision, error) {
		if !host.IsMetered(p) {
			return next(ctx, p, req)
		}
		return withinFuel(ctx, h.b, func() (host.Decision, int64, error) {
			d, err := next(ctx, p, req)
			return d, d.Fuel, err
		})
	}
}

// withinFuel makes a metered call, call, within the budget: refused past
// it (see admitOrGrant), its fuel counted after it.
func withinFuel[R any](ctx context.Context, b *fuelBudget, call func() (R, int64, error)) (R, error) {
	g, over := b.admitOrGrant(ctx)
	if over != nil {
		var none R
		return none, over
	}
	res, fuel, err := call()
	b.spent(ctx, g, fuel)
	return res, err
}

// admitOrGrant returns the error of a call past the budget, nil within
// it; under budget_ask, a call of a run granted more fuel runs on its
// latest grant (g) while that has room, and a refused one marks its run to
// park before its next pass. When the count cannot be read (the storage
// fails over) the call runs, and is counted once it can be.
func (b *fuelBudget) admitOrGrant(ctx context.Context) (g *host.Grant, over error) {
	e, err := b.exceeded(ctx)
	if err != nil {
		b.log.Warn("cannot read the plugin budget; the call runs", "tenant", b.tenant, "err", err)
	}
	if e == nil {
		return nil, nil
	}
	if b.ask == nil {
		return nil, e
	}
	if grant, ok := latestGrant(ctx, kindPluginBudget); ok && b.ask.raise.room(ctx, grant) {
		return &grant, nil
	}
	if ci, _ := host.CallInfoFrom(ctx); ci.RunID != "" {
		b.ask.mark(ci.RunID)
	}
	return nil, e
}

// spent adds a call's fuel to the day's, and to its grant's when it ran on
// one.
func (b *fuelBudget) spent(ctx context.Context, g *host.Grant, fuel int64) {
	if fuel <= 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, _, err := b.counter.AddWithin(actx, b.namespace(time.Now()), fuelKey, fuel, math.MaxInt64); err != nil {
		b.log.Warn("cannot count a plugin call's fuel", "tenant", b.tenant, "fuel", fuel, "err", err)
	}
	if g != nil {
		b.ask.raise.spend(actx, *g, fuel)
	}
}
