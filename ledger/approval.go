package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// ApprovalState is where an approval request stands.
type ApprovalState string

// The approval states.
const (
	ApprovalPending  ApprovalState = "pending"  // waiting for a decision
	ApprovalApproved ApprovalState = "approved" // the call may run
	ApprovalDenied   ApprovalState = "denied"   // refused by a person
	ApprovalExpired  ApprovalState = "expired"  // nobody decided in time
	ApprovalVoid     ApprovalState = "void"     // withdrawn: the policy changed; asked again
	// ApprovalResponded: a person answered the call in its place; it
	// does not run.
	ApprovalResponded ApprovalState = "responded"
)

// Approval is an approval request and what became of it.
type Approval struct {
	// RunID is the run whose call the request is about.
	RunID string
	// Request is the request as recorded; RequestedAt when.
	Request     ApprovalRequest
	RequestedAt time.Time
	// State is where it stands; Decision and DecidedAt are set once it
	// was decided.
	State     ApprovalState
	Decision  *ApprovalDecision
	DecidedAt time.Time
	// Answered tells whether the call has a result.
	Answered bool
}

// ApprovalStateOf returns the state a decision puts its request in.
func ApprovalStateOf(decision string) ApprovalState {
	switch decision {
	case DecisionApprove, DecisionEdit:
		return ApprovalApproved
	case DecisionRespond:
		return ApprovalResponded
	case DecisionDeny:
		return ApprovalDenied
	case DecisionExpire:
		return ApprovalExpired
	default:
		return ApprovalVoid
	}
}

// Approvals returns the approval requests of a run (of every run when
// runID is ""), in the order they were made, each with its state. A
// decision on an unknown request is ignored; only the first decision on a
// request counts, except a void after an approval (the policy changed
// before the call ran).
func Approvals(events []Event, runID string) []Approval {
	var out []Approval
	idx := map[string]int{} // approval id → index in out
	answered := map[string]bool{}
	for _, e := range events {
		switch {
		case e.ApprovalRequest != nil && (runID == "" || e.RunID == runID):
			if _, dup := idx[e.ApprovalRequest.ApprovalID]; dup {
				continue
			}
			idx[e.ApprovalRequest.ApprovalID] = len(out)
			out = append(out, Approval{RunID: e.RunID, Request: *e.ApprovalRequest, RequestedAt: e.Time, State: ApprovalPending})
		case e.ApprovalDecision != nil:
			i, ok := idx[e.ApprovalDecision.ApprovalID]
			if !ok {
				continue
			}
			// Only the first decision counts — but the host voids an
			// approval whose policy changed before the call ran.
			if prev := out[i].Decision; prev != nil &&
				(prev.Decision != DecisionApprove && prev.Decision != DecisionEdit || e.ApprovalDecision.Decision != DecisionVoid) {
				continue
			}
			d := *e.ApprovalDecision
			out[i].Decision, out[i].DecidedAt, out[i].State = &d, e.Time, ApprovalStateOf(d.Decision)
		case e.ToolResult != nil:
			answered[e.ToolResult.CallID] = true
		}
	}
	for i := range out {
		out[i].Answered = out[i].Request.CallID != "" && answered[out[i].Request.CallID]
	}
	return out
}

// RunApproval returns the run's own approval request (one of a Kind, with
// no call: see [ApprovalRequest.Kind]) made after its last model pass, with
// its state; ok is false when the run made none since that pass. A run
// whose request is pending is parked; one whose request was decided goes
// on, or ends, by the decision.
func RunApproval(events []Event, runID string) (a Approval, ok bool) {
	var latest string
	for _, e := range events {
		switch {
		case e.RunID != runID:
		case e.Step != nil:
			latest = ""
		case e.ApprovalRequest != nil && e.ApprovalRequest.CallID == "" && e.ApprovalRequest.Kind != "":
			latest = e.ApprovalRequest.ApprovalID
		}
	}
	if latest == "" {
		return Approval{}, false
	}
	for _, x := range Approvals(events, runID) {
		if x.Request.ApprovalID == latest {
			return x, true
		}
	}
	return Approval{}, false
}

// PendingApprovals returns the session's approval requests still waiting
// for a decision, in the order they were made.
func PendingApprovals(events []Event) []Approval {
	var out []Approval
	for _, a := range Approvals(events, "") {
		if a.State == ApprovalPending && !a.Answered {
			out = append(out, a)
		}
	}
	return out
}

// Parked reports whether a run waits for people or for the world: it has
// no run-end, and either its own request since its last pass
// ([RunApproval]) is pending, or its last pass asked for tool calls and
// every one of them without a result waits — on a pending approval
// request, or in its journal (an event or a time, [OpenWaits]) — and at
// least one does. A run whose requests were all decided (or whose waits
// completed) but whose calls have no results yet is not parked: it is
// interrupted, and resuming it carries out the decisions.
func Parked(events []Event, runID string) bool {
	if a, ok := RunApproval(events, runID); ok {
		if a.State != ApprovalPending {
			return false
		}
		for _, e := range events {
			if e.RunEnd != nil && e.RunID == runID {
				return false
			}
		}
		return true
	}
	var last *Step
	answered := map[string]bool{}
	for _, e := range events {
		switch {
		case e.ToolResult != nil:
			answered[e.ToolResult.CallID] = true
		case e.RunID != runID:
		case e.RunEnd != nil:
			return false
		case e.Step != nil:
			last = e.Step
		}
	}
	if last == nil || len(last.ToolCalls) == 0 {
		return false
	}
	state := map[string]ApprovalState{} // call id → its latest request's state
	for _, a := range Approvals(events, runID) {
		state[a.Request.CallID] = a.State
	}
	for _, w := range OpenWaits(events, runID) {
		state[w.CallID] = ApprovalPending // waits as a pending request does
	}
	pending := 0
	for _, c := range last.ToolCalls {
		if answered[c.ID] {
			continue
		}
		if state[c.ID] != ApprovalPending {
			return false
		}
		pending++
	}
	return pending > 0
}

// InputDigest returns the digest an approval is bound to: "sha256:" and the
// hex SHA-256 of the arguments compacted (so that whitespace does not
// matter), or of the raw text when they are not JSON.
func InputDigest(arguments string) string {
	b := []byte(arguments)
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		b = buf.Bytes()
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
