package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/storage"
)

// Budgets that ask (budget_ask): a run in flight that reaches its tenant's
// daily budget parks for a person instead of failing. The hooks stop its
// next model pass with a *host.ApprovalNeededError — of kind
// "budget_exceeded" for budget_usd_per_day, "plugin_budget_exceeded" for
// plugin_fuel_per_day — so the run records a request of its own (in the
// inbox, decided with POST /v1/approvals/{id}) and parks. Approved, the run
// goes on, and each approval (a host.Grant the hooks see in the run's
// CallInfo) lets it spend raise_usd, or its plugins use raise_fuel, past
// the budget: a counter per approval in the storage, which every host's
// calls of the run add to; once it is spent, the run asks again. Denied or
// expired, the run ends failed, saying so. New runs past a budget are still
// refused (402).
//
// A plugin call past the plugin budget is refused as without budget_ask
// (the model reads why), and the run parks before its next pass; a call of
// a run granted more fuel runs on the grant.

// The kinds of a budget's approval requests.
const (
	kindBudget       = "budget_exceeded"
	kindPluginBudget = "plugin_budget_exceeded"
)

// latestGrant returns the run's latest grant of kind, as the hook's call
// info tells.
func latestGrant(ctx context.Context, kind string) (host.Grant, bool) {
	ci, _ := host.CallInfoFrom(ctx)
	for i := len(ci.Grants) - 1; i >= 0; i-- {
		if ci.Grants[i].Kind == kind {
			return ci.Grants[i], true
		}
	}
	return host.Grant{}, false
}

// raise counts what each approval of kind lets a run spend past a budget,
// in the budget's unit (micro-USD, fuel), in the storage.
type raise struct {
	counter storage.Counter
	ns      string
	amount  int64
}

func newRaise(counter storage.Counter, tenant, kind string, amount int64) *raise {
	return &raise{counter: counter, ns: "agentic:budget-raise:" + tenant + ":" + kind, amount: amount}
}

// room reports whether grant g has some of its raise left. When the
// storage cannot tell, it has (budgets fail open).
func (r *raise) room(ctx context.Context, g host.Grant) bool {
	used, _, err := r.counter.AddWithin(ctx, r.ns, g.ApprovalID, 0, 0)
	return err != nil || used < r.amount
}

// spend counts n against grant g.
func (r *raise) spend(ctx context.Context, g host.Grant, n int64) {
	if n > 0 {
		r.counter.AddWithin(ctx, r.ns, g.ApprovalID, n, math.MaxInt64) // best effort, as the budget's own counts
	}
}

// pastBudget is what budgetHook does with a call past the USD budget:
// without budget_ask it is refused; with it, it runs on the run's latest
// grant while that has room (a call its provider did not price spending
// all of it: fail closed), or the run is asked to park for one.
func (b *budget) pastBudget(ctx context.Context, over *ErrBudgetExceeded, call func() (model.Result, error)) (model.Result, error) {
	if b.raise == nil {
		return model.Result{}, over
	}
	g, ok := latestGrant(ctx, kindBudget)
	if !ok || !b.raise.room(ctx, g) {
		return model.Result{}, &host.ApprovalNeededError{Kind: kindBudget, Reason: over.Error(),
			Summary: fmt.Sprintf("The run reached tenant %s's daily budget of $%.2f. Approve to let it spend $%.2f more; deny to stop it.", b.tenant, b.limit, float64(b.raise.amount)/1e6)}
	}
	res, err := call()
	spent := micro(res.Usage.Billed())
	if err == nil && res.Usage.CostUnknown {
		spent = b.raise.amount
	}
	ctx = context.WithoutCancel(ctx)
	b.raise.spend(ctx, g, spent)
	// The day's spend stays the truth: what runs on grants counts in it
	// too.
	b.counter.AddWithin(ctx, b.namespace(today()), committedKey, spent, math.MaxInt64)
	return res, err
}

// fuelAsk holds what the plugin budget's hooks need under budget_ask: the
// raise, and the runs a refused plugin call asks to park.
type fuelAsk struct {
	raise *raise

	mu    sync.Mutex
	asked map[string]time.Time // run id → when a plugin call of it was refused
}

// askedTTL bounds how long a run's mark waits for its next pass (a run
// that ended after the refusal makes none).
const askedTTL = time.Hour

// mark notes that the run's plugin call was refused: its next pass parks.
func (a *fuelAsk) mark(runID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.asked == nil {
		a.asked = map[string]time.Time{}
	}
	for id, at := range a.asked {
		if now.Sub(at) > askedTTL {
			delete(a.asked, id)
		}
	}
	a.asked[runID] = now
}

// take reports, and forgets, whether the run was marked.
func (a *fuelAsk) take(runID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.asked[runID]
	delete(a.asked, runID)
	return ok
}
