package host

import (
	"time"

	"github.com/agentichost/agentic/ledger"
)

// A run's own approvals: a hook may stop a model call with an
// *ApprovalNeededError (a budget that asks before it stops a run). The run
// then records a request of its own — of that kind, about no tool call —
// and parks, as it parks on its tool calls' requests: no goroutine, lease
// or model request is held, and the request is in the inbox. A person's
// decision (Session.Decide, on any host) continues it: approved, the pass
// is made again, and the hooks see the approval among the run's grants
// (CallInfo.Grants); denied or expired, the run ends failed, saying so.

// ApprovalNeededError is what a model hook returns to stop a model call
// until a person says the run may go on: the run parks on a request of its
// own (ledger.ApprovalRequest.Kind) rather than fail. A run that nobody can
// reach (a task that is not durable) fails with the Reason instead.
type ApprovalNeededError struct {
	// Kind names what is asked, e.g. "budget_exceeded". Required.
	Kind string
	// Reason is why the call was stopped; Summary is what the person is
	// asked to approve.
	Reason, Summary string
}

func (e *ApprovalNeededError) Error() string {
	return "approval needed (" + e.Kind + "): " + e.Reason
}

// Retryable reports false: the call waits for a person, not for time.
func (e *ApprovalNeededError) Retryable() bool { return false }

// Grant is a run's own request that a person approved (see
// [ApprovalNeededError]): the hooks see a run's grants in
// [CallInfo].Grants, oldest first, and decide by them what the approval
// allows (a budget: how much more the run may spend).
type Grant struct {
	ApprovalID, Kind string
}

// parkRun records the run's own request for need and parks the run.
func (r *run) parkRun(need *ApprovalNeededError) outcome {
	if r.st.key.private {
		return outcome{status: ledger.RunFailed, reason: need.Reason + " (going on needs a person's approval, and this task is not durable, so nobody can give it)"}
	}
	e := r.newEvent(ledger.KindApprovalRequest)
	e.ApprovalRequest = &ledger.ApprovalRequest{ApprovalID: ledger.NewID("appr"), Kind: need.Kind,
		Summary: truncate(need.Summary, 4000), Reason: truncate(need.Reason, 4000), ExpiresAt: e.Time.Add(r.agent.ApprovalTTL)}
	p := r.h.pendingOf(r.sessionID, r.id, e.Time, *e.ApprovalRequest)
	r.h.indexApproval(p) // before the ledger, as a tool call's (requestApproval)
	if err := r.append(e); err != nil {
		r.h.unindexApproval(r.sessionID, p.ApprovalID)
		return outcome{err: err}
	}
	r.publish(Progress{Type: ProgressApprovalRequested, Approval: p.info(ledger.ApprovalPending)})
	return outcome{status: ledger.RunApprovalRequired, parked: true}
}

// grantsOf returns the run's own approved requests, oldest first.
func grantsOf(events []ledger.Event, runID string) []Grant {
	var out []Grant
	for _, a := range ledger.Approvals(events, runID) {
		if a.Request.CallID == "" && a.Request.Kind != "" && a.State == ledger.ApprovalApproved {
			out = append(out, Grant{ApprovalID: a.Request.ApprovalID, Kind: a.Request.Kind})
		}
	}
	return out
}

// afterRunApproval is how a continued run starts: with the grants of its
// ledger, and, when its own request since its last pass was decided, by
// that decision — approved, the run goes on; denied or expired, it ends.
func (r *run) afterRunApproval() (o outcome, stop bool) {
	events := r.view()
	r.grants = grantsOf(events, r.id)
	a, ok := ledger.RunApproval(events, r.id)
	if !ok || a.State == ledger.ApprovalPending {
		return outcome{}, false
	}
	info := r.h.pendingOf(r.sessionID, r.id, a.RequestedAt, a.Request).info(a.State)
	info.Token = ""
	r.publish(Progress{Type: ProgressApprovalDecided, Approval: info})
	switch a.State {
	case ledger.ApprovalApproved:
		return outcome{}, false
	case ledger.ApprovalExpired:
		return outcome{status: ledger.RunFailed, reason: a.Request.Reason + "; nobody approved going on before " + a.Request.ExpiresAt.Format(time.RFC3339)}, true
	}
	reason := a.Request.Reason + "; a person stopped the run"
	if d := a.Decision; d != nil && d.By != "" {
		reason += " (" + d.By + ")"
	}
	if d := a.Decision; d != nil && d.Reason != "" {
		reason += ": " + d.Reason
	}
	return outcome{status: ledger.RunFailed, reason: reason}, true
}
