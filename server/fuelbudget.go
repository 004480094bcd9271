package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/storage"
)

// Plugin budgets: a tenant's plugin fuel per UTC day (plugin_fuel_per_day),
// summed over every host sharing the storage in one counter. Before a
// plugin's tool call runs, the day's fuel so far is read: past the budget,
// the call is refused with a tool error the model reads
// (ErrPluginBudgetExceeded); after it, the fuel it used is added. The
// day's fuel passes the budget by at most the calls in flight when it
// crossed it (each bounded by the plugin's Limits.Fuel). With
// plugin_fuel_refuses_runs, a run does not start past it either.
// Calls of tools that are not metered (Go tools of the program) are not
// counted, nor refused.

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

// metered reports whether tool's calls are metered (a plugin's).
func metered(tool host.Tool) bool {
	m, ok := tool.(interface{ Metered() bool })
	return ok && m.Metered()
}

// hook refuses plugin calls past the budget and counts their fuel.
func (b *fuelBudget) hook() host.Hook { return fuelHook{b} }

type fuelHook struct{ b *fuelBudget }

func (h fuelHook) ModelHook(next host.StreamFunc) host.StreamFunc { return next }

func (h fuelHook) ToolHook(next host.CallFunc) host.CallFunc {
	b := h.b
	return func(ctx context.Context, tool host.Tool, call host.ToolCall) (host.ToolResult, error) {
		if !metered(tool) {
			return next(ctx, tool, call)
		}
		over, err := b.exceeded(ctx)
		if err != nil {
			// The count cannot be read (the storage fails over): the
			// call runs, and is counted once it can be.
			b.log.Warn("cannot read the plugin budget; the call runs", "tenant", b.tenant, "err", err)
		}
		if over != nil {
			return host.ToolResult{}, over
		}
		res, err := next(ctx, tool, call)
		if res.Fuel > 0 {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if _, _, aerr := b.counter.AddWithin(actx, b.namespace(time.Now()), fuelKey, res.Fuel, math.MaxInt64); aerr != nil {
				b.log.Warn("cannot count a plugin call's fuel", "tenant", b.tenant, "fuel", res.Fuel, "err", aerr)
			}
			cancel()
		}
		return res, err
	}
}
