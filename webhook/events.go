package webhook

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// The types of the events a webhook tells, each read off one ledger event.
const (
	// RunEnded: a run ended (its run-end): completed, cancelled, failed,
	// timed_out or interrupted. A run that parks for approvals has not
	// ended.
	RunEnded = "run.ended"
	// ApprovalRequested: a run waits for a person (an approval-request):
	// a tool call, or the run itself past a budget.
	ApprovalRequested = "approval.requested"
	// ApprovalDecided: a request was decided (an approval-decision):
	// approved, denied, expired or voided.
	ApprovalDecided = "approval.decided"
	// BudgetExceeded: a budget stopped something: a run ended failed past
	// the tenant's budget, a run asks a person to go past it (its
	// approval.requested comes too), or a plugin's call was refused past
	// the plugin budget.
	BudgetExceeded = "budget.exceeded"
)

// Types lists every event type, in a fixed order.
func Types() []string { return []string{RunEnded, ApprovalRequested, ApprovalDecided, BudgetExceeded} }

// Payload is the JSON body of a delivery. ID identifies the event: a
// receiver that got it before (a delivery is retried until it is
// acknowledged, so it may come twice) ignores it.
type Payload struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Created is when the ledger event it tells was minted.
	Created   time.Time `json:"created"`
	Tenant    string    `json:"tenant,omitempty"`
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id,omitempty"`
	// EventID is the ledger event it tells.
	EventID string `json:"event_id"`
	// Data is the type's: [RunEndedData], [ApprovalRequestedData],
	// [ApprovalDecidedData] or [BudgetExceededData].
	Data json.RawMessage `json:"data"`
}

// RunEndedData is the data of a run.ended event.
type RunEndedData struct {
	Status  ledger.RunStatus `json:"status"`
	Reason  string           `json:"reason,omitempty"`
	Timeout string           `json:"timeout,omitempty"`
}

// ApprovalRequestedData is the data of an approval.requested event.
type ApprovalRequestedData struct {
	ApprovalID string `json:"approval_id"`
	// Kind is "" for a tool call, else what the run asks ("budget_exceeded").
	Kind      string          `json:"kind,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Summary   string          `json:"summary,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	ExpiresAt time.Time       `json:"expires_at,omitzero"`
}

// ApprovalDecidedData is the data of an approval.decided event.
type ApprovalDecidedData struct {
	ApprovalID string `json:"approval_id"`
	// Decision is approve, deny, expire or void.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	By       string `json:"by,omitempty"`
}

// BudgetExceededData is the data of a budget.exceeded event.
type BudgetExceededData struct {
	// Kind is "budget_exceeded" (the tenant's daily spend) or
	// "plugin_budget_exceeded" (its plugins' fuel).
	Kind string `json:"kind"`
	// What happened: "run_failed", "approval_requested" or "tool_refused".
	Outcome    string `json:"outcome"`
	ApprovalID string `json:"approval_id,omitempty"`
	CallID     string `json:"call_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// The kinds of budget, as the server names them in reasons and requests.
const (
	budgetKind       = "budget_exceeded"
	pluginBudgetKind = "plugin_budget_exceeded"
)

// budgetSuffix makes the id of a budget.exceeded event distinct from the
// other event its ledger event tells.
const budgetSuffix = ".budget"

// eventsOf returns the webhook events the ledger event ev of the session
// tells (none for most).
func eventsOf(tenant, sessionID string, ev ledger.Event) []Payload {
	p := Payload{ID: ev.ID, Created: ev.Time, Tenant: tenant, SessionID: sessionID, RunID: ev.RunID, EventID: ev.ID}
	with := func(typ string, data any) Payload {
		q := p
		q.Type = typ
		q.Data, _ = json.Marshal(data)
		if typ == BudgetExceeded {
			q.ID += budgetSuffix
		}
		return q
	}
	var out []Payload
	switch {
	case ev.RunEnd != nil:
		e := ev.RunEnd
		out = append(out, with(RunEnded, RunEndedData{Status: e.Status, Reason: e.Reason, Timeout: e.Timeout}))
		if kind := budgetOf(e.Reason); kind != "" && e.Status == ledger.RunFailed {
			out = append(out, with(BudgetExceeded, BudgetExceededData{Kind: kind, Outcome: "run_failed", Reason: e.Reason}))
		}
	case ev.ApprovalRequest != nil:
		a := ev.ApprovalRequest
		out = append(out, with(ApprovalRequested, ApprovalRequestedData{ApprovalID: a.ApprovalID, Kind: a.Kind, CallID: a.CallID,
			Tool: a.Name, Input: a.Input, Summary: a.Summary, Reason: a.Reason, ExpiresAt: a.ExpiresAt}))
		if a.Kind == budgetKind || a.Kind == pluginBudgetKind {
			out = append(out, with(BudgetExceeded, BudgetExceededData{Kind: a.Kind, Outcome: "approval_requested", ApprovalID: a.ApprovalID, Reason: a.Reason}))
		}
	case ev.ApprovalDecision != nil:
		d := ev.ApprovalDecision
		out = append(out, with(ApprovalDecided, ApprovalDecidedData{ApprovalID: d.ApprovalID, Decision: d.Decision, Reason: d.Reason, By: d.By}))
	case ev.ToolResult != nil && ev.ToolResult.IsError && budgetOf(ev.ToolResult.Output) == pluginBudgetKind:
		r := ev.ToolResult
		out = append(out, with(BudgetExceeded, BudgetExceededData{Kind: pluginBudgetKind, Outcome: "tool_refused", CallID: r.CallID, Reason: r.Output}))
	}
	return out
}

// budgetOf returns the kind of budget a reason names at its start, or "":
// a run's reason as the host writes it ("model: budget_exceeded: …"), a
// refused call's output ("error: plugin_budget_exceeded: …"), or the code
// alone.
func budgetOf(reason string) string {
	for _, prefix := range []string{"model: ", "error: "} {
		reason = strings.TrimPrefix(reason, prefix)
	}
	for _, k := range []string{budgetKind, pluginBudgetKind} {
		if strings.HasPrefix(reason, k+":") {
			return k
		}
	}
	return ""
}

// EventIDs returns the ids of the webhook events that the ledger event ev
// of the session tells, of every type: what a receiver of every type
// gets for it.
func EventIDs(sessionID string, ev ledger.Event) []string {
	var ids []string
	for _, p := range eventsOf("", sessionID, ev) {
		ids = append(ids, p.ID)
	}
	return ids
}
