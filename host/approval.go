package host

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/host/schema"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Approvals: a tool call a policy does not allow at once waits for a
// person. Its run records an approval-request and parks — no goroutine,
// lease or model request is held — and continues, on whichever host, once
// every such call of the pass is decided (Session.Decide).

// ApprovalDecision is a person's decision on an approval request.
type ApprovalDecision struct {
	// Approve lets the call run; false denies it.
	Approve bool
	// Reason explains the decision (the model is told a denial's).
	Reason string
	// By names who decided.
	By string
	// Input, with Approve, lets the call run with this input instead of
	// the model's (an edit): a JSON object, checked against the tool's
	// schema when the decision is made, recorded beside the original, and
	// decided by the agent's policies again when the call runs (a deny
	// stands; a policy that asks for approval is answered by this one).
	// The model's call stays recorded as it asked; its result is the
	// edited call's. Default: nil, the model's input.
	Input json.RawMessage
	// Response answers the call with this text instead of running it:
	// the model reads it as the tool's result, and the tool never runs.
	// Not with Input. Default: "", the call is approved or denied.
	Response string
}

// decision returns the ledger's record of d on the request a, or why it
// cannot be made. spec is the tool's, when the host knows it.
func (d ApprovalDecision) decision(a ledger.ApprovalRequest, spec *ToolSpec) (*ledger.ApprovalDecision, error) {
	out := &ledger.ApprovalDecision{ApprovalID: a.ApprovalID, Decision: ledger.DecisionDeny, Reason: truncate(d.Reason, 4000), By: truncate(d.By, 200)}
	switch {
	case d.Input != nil && d.Response != "":
		return nil, fmt.Errorf("%w: an edit and a response at once: give one", ErrInvalidDecision)
	case (d.Input != nil || d.Response != "") && a.CallID == "":
		return nil, fmt.Errorf("%w: approval request %s is the run's own (%s), not a tool call's: approve or deny it", ErrInvalidDecision, a.ApprovalID, a.Kind)
	case d.Response != "":
		out.Decision, out.Response = ledger.DecisionRespond, d.Response
	case d.Input != nil:
		if !d.Approve {
			return nil, fmt.Errorf("%w: an edit approves the call with its input: set Approve", ErrInvalidDecision)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.Input, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%w: the edited input is not a JSON object", ErrInvalidDecision)
		}
		if spec != nil && len(spec.InputSchema) > 0 {
			sch, err := schema.Compile(spec.InputSchema)
			if err == nil {
				if problems := sch.Problems(d.Input, schema.Limits{}); len(problems) > 0 {
					return nil, fmt.Errorf("%w: the edited input does not match tool %s's schema: %s", ErrInvalidDecision, a.Name, strings.Join(problems, "; "))
				}
			}
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, d.Input)
		out.Decision, out.Input = ledger.DecisionEdit, json.RawMessage(compact.Bytes())
		out.InputDigest = ledger.InputDigest(compact.String())
	case d.Approve:
		out.Decision = ledger.DecisionApprove
	}
	return out, nil
}

// PendingApproval is an approval request waiting for a decision.
type PendingApproval struct {
	SessionID  string `json:"session_id"`
	RunID      string `json:"run_id"`
	ApprovalID string `json:"approval_id"`
	// Kind is "" for a request about a tool call; else the request is the
	// run's own, of that kind (see [ApprovalNeededError]), with no call.
	Kind   string `json:"kind,omitempty"`
	CallID string `json:"call_id"`
	// Tool is the tool the call is for, Effect its declared effect.
	Tool   string `json:"tool"`
	Effect string `json:"effect,omitempty"`
	// Input is the call's arguments.
	Input json.RawMessage `json:"input,omitempty"`
	// Summary describes the call for a person; Reason is the policy's.
	Summary string `json:"summary,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Policy names the policy that asked.
	Policy string `json:"policy,omitempty"`
	// RequestedAt and ExpiresAt bound the request's life.
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	// Token decides the request with [Session.DecideWithToken].
	Token string `json:"token,omitempty"`
}

// verdictOf is what became of one call: the policies' combined decision,
// the name of the policy that made it, and the fuel all of them used.
type verdictOf struct {
	Decision
	policy string
	fuel   int64
}

// decideCall asks the agent's policies about a call (DefaultPolicy when
// it names none), combines their verdicts — deny beats require_approval
// beats allow — and applies the tool's ApprovalMode. A policy that fails,
// panics or runs out of time denies the call, saying so.
func (r *run) decideCall(spec ToolSpec, c ledger.ToolCall, input json.RawMessage) verdictOf {
	policies := r.agent.Policies
	if len(policies) == 0 {
		policies = []Policy{DefaultPolicy}
	}
	req := PolicyRequest{Tool: spec, CallID: c.ID, Input: input, SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name}
	best := verdictOf{Decision: Decision{Verdict: Allow}}
	var fuel int64
	for i, p := range policies {
		d := r.askPolicy(p, req)
		fuel += max(d.Fuel, 0)
		if i == 0 || d.Verdict.rank() > best.Verdict.rank() {
			best = d
		}
	}
	switch r.agent.ToolApprovals[spec.Name] {
	case ApproveNever:
		best = verdictOf{Decision: Decision{Verdict: Deny, Reason: "the tool is never allowed for this agent"}, policy: "tool-approvals"}
	case ApproveAlways:
		if best.Verdict != Deny {
			best = verdictOf{Decision: Decision{Verdict: Allow, Reason: "the tool is always allowed for this agent"}, policy: "tool-approvals"}
		}
	case ApproveAsk:
		if best.Verdict == Allow {
			best = verdictOf{Decision: Decision{Verdict: RequireApproval, Reason: "the agent asks a person for every call of the tool"}, policy: "tool-approvals"}
		}
	}
	if best.Verdict == RequireApproval && best.Summary == "" {
		best.Summary = fmt.Sprintf("%s %s", spec.Name, compactInput(input, 200))
	}
	best.fuel = fuel
	return best
}

// askPolicy runs one policy, through the policy hooks, within the agent's
// PolicyTimeout. Anything but a verdict denies. The decision's Fuel is
// the policy's, whatever it decided.
func (r *run) askPolicy(p Policy, req PolicyRequest) (v verdictOf) {
	name := p.Name()
	v.policy = name
	ctx, cancel := context.WithTimeout(r.ctx, r.agent.PolicyTimeout)
	defer cancel()
	defer func() {
		if rec := recover(); rec != nil {
			r.h.log.Error("policy panicked", "session", r.sessionID, "run", r.id, "policy", name, "panic", rec, "stack", string(debug.Stack()))
			v.Decision = Decision{Verdict: Deny, Reason: fmt.Sprintf("policy %s failed: it panicked: %v", name, rec)}
		}
	}()
	chain := r.h.hooks.Load()
	ctx = chain.withCallInfo(ctx, CallInfo{SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name, Purpose: PurposePolicy, Grants: r.grants})
	d, err := chain.decide(ctx, p, req)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("it did not decide within %s", r.agent.PolicyTimeout)
	}
	r.policyFuel(name, d)
	switch {
	case err != nil:
		return verdictOf{Decision: Decision{Verdict: Deny, Reason: fmt.Sprintf("policy %s failed: %s", name, truncate(err.Error(), 1000)), Source: d.Source, Fuel: d.Fuel}, policy: name}
	case d.Verdict != Allow && d.Verdict != RequireApproval && d.Verdict != Deny:
		return verdictOf{Decision: Decision{Verdict: Deny, Reason: fmt.Sprintf("policy %s answered %q, which is no verdict", name, d.Verdict), Source: d.Source, Fuel: d.Fuel}, policy: name}
	}
	d.Reason, d.Summary = truncate(d.Reason, 4000), truncate(d.Summary, 4000)
	return verdictOf{Decision: d, policy: name}
}

// pendingOf describes a request, with its token.
func (h *Host) pendingOf(sessionID, runID string, at time.Time, a ledger.ApprovalRequest) PendingApproval {
	return PendingApproval{SessionID: sessionID, RunID: runID, ApprovalID: a.ApprovalID, Kind: a.Kind, CallID: a.CallID,
		Tool: a.Name, Effect: a.Effect, Input: a.Input, Summary: a.Summary, Reason: a.Reason, Policy: a.Policy,
		RequestedAt: at, ExpiresAt: a.ExpiresAt, Token: mintToken(h.secret, h.tenant, sessionID, runID, a)}
}

// info is the request as a progress event carries it.
func (p PendingApproval) info(state ledger.ApprovalState) *ApprovalInfo {
	return &ApprovalInfo{ApprovalID: p.ApprovalID, Kind: p.Kind, CallID: p.CallID, Tool: p.Tool, Input: p.Input, Summary: p.Summary,
		Reason: p.Reason, State: state, ExpiresAt: p.ExpiresAt, Token: p.Token}
}

// approvalIndex is the storage.KV namespace of the inbox: one key per
// pending request, "session/approval", whose value is the request
// (without its token). The ledgers are the truth: PendingApprovals checks
// each entry against its session's ledger and drops stale ones. An entry
// is written before its request is appended to the ledger (see
// requestApproval), and removed after its decision is.
func (h *Host) approvalIndex() string { return "approvals:" + h.tenant }

// indexGrace is how long an inbox entry whose request is not in its ledger
// is kept: its request may still be on its way (the entry is written
// first, and an append may take up to Timeouts.Append), and hosts' clocks
// differ. Past it, the request was never recorded (its host died between
// the two writes, or the append failed).
func (h *Host) indexGrace() time.Duration { return 2*h.timeouts.Append + time.Minute }

func approvalKey(sessionID, approvalID string) string { return sessionID + "/" + approvalID }

// approvalSessions is the storage.KV namespace that names the session of
// every approval request made (approval id → session id), pending or
// decided, written with its inbox entry and never removed (a few bytes a
// request): a decision that comes after another, or after the request
// left the inbox, finds its session (see ApprovalSession).
const approvalSessions = "agentic:approval-sessions"

// indexApproval adds a pending request to the inbox, and its session to
// approvalSessions. A failure is logged: the ledger holds the request, and
// the next sweep indexes it again.
func (h *Host) indexApproval(p PendingApproval) {
	if h.approvalKV == nil {
		return
	}
	p.Token = ""
	b, _ := json.Marshal(p)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
	defer cancel()
	err := h.approvalKV.Set(ctx, approvalSessions, p.ApprovalID, []byte(p.SessionID))
	if err == nil {
		err = h.approvalKV.Set(ctx, h.approvalIndex(), approvalKey(p.SessionID, p.ApprovalID), b)
	}
	if err != nil {
		h.log.Warn("cannot index the approval request", "session", p.SessionID, "approval", p.ApprovalID, "err", err)
	}
}

// ApprovalSession returns the session of the approval request approvalID,
// pending or decided, from the index the host keeps of every request's
// session (the namespace the server wrote before, so earlier requests are
// there too); "" for an id it does not name. It needs a storage that keeps
// values (storage.KV).
func (h *Host) ApprovalSession(ctx context.Context, approvalID string) (string, error) {
	if h.approvalKV == nil {
		return "", errors.New("host: ApprovalSession needs a storage that keeps values (storage.KV)")
	}
	if storage.CheckKV(approvalSessions, approvalID, nil) != nil {
		return "", nil
	}
	b, ok, err := h.approvalKV.Get(ctx, approvalSessions, approvalID)
	if err != nil || !ok {
		return "", err
	}
	return string(b), nil
}

// unindexApproval removes a request from the inbox.
func (h *Host) unindexApproval(sessionID, approvalID string) {
	if h.approvalKV == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
	defer cancel()
	if err := h.approvalKV.Delete(ctx, h.approvalIndex(), approvalKey(sessionID, approvalID)); err != nil {
		h.log.Warn("cannot remove the approval request from the inbox", "session", sessionID, "approval", approvalID, "err", err)
	}
}

// PendingApprovals returns the approval requests waiting for a decision
// in every session of the host's storage, oldest first, each with its
// token. It reads the inbox the host keeps in its storage (which must
// implement storage.KV, as every built-in one does), not every ledger, and
// checks each entry against its session's ledger. A request enters the
// inbox before its ledger records it, so that whoever sees a run waiting
// for approval finds the request here; an entry whose request the ledger
// does not hold yet is not listed, and is kept while it may still be on
// its way.
func (h *Host) PendingApprovals(ctx context.Context) ([]PendingApproval, error) {
	if h.approvalKV == nil {
		return nil, errors.New("host: PendingApprovals needs a storage that keeps values (storage.KV)")
	}
	keys, err := h.approvalKV.Keys(ctx, h.approvalIndex())
	if err != nil {
		return nil, fmt.Errorf("host: read the inbox: %w", err)
	}
	// Every request of each session named, pending or decided.
	sessions := map[string]map[string]ledger.Approval{}
	var out []PendingApproval
	for _, k := range keys {
		sessionID, approvalID, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		known, seen := sessions[sessionID]
		if !seen {
			events, err := h.Session(sessionID).Events(ctx)
			if err != nil {
				return nil, err
			}
			known = map[string]ledger.Approval{}
			for _, a := range ledger.Approvals(events, "") {
				known[a.Request.ApprovalID] = a
			}
			sessions[sessionID] = known
		}
		a, ok := known[approvalID]
		switch {
		case !ok:
			if h.indexedLongAgo(ctx, k) {
				h.unindexApproval(sessionID, approvalID) // never recorded
			}
		case a.State != ledger.ApprovalPending || a.Answered:
			h.unindexApproval(sessionID, approvalID) // decided meanwhile
		default:
			out = append(out, h.pendingOf(sessionID, a.RunID, a.RequestedAt, a.Request))
		}
	}
	slices.SortStableFunc(out, func(a, b PendingApproval) int { return a.RequestedAt.Compare(b.RequestedAt) })
	return out, nil
}

// indexedLongAgo reports whether the inbox entry key was written longer
// than indexGrace ago, so that a request its ledger does not hold was
// never recorded; false when that cannot be told.
func (h *Host) indexedLongAgo(ctx context.Context, key string) bool {
	b, ok, err := h.approvalKV.Get(ctx, h.approvalIndex(), key)
	if err != nil || !ok {
		return false
	}
	var p PendingApproval
	if json.Unmarshal(b, &p) != nil || p.RequestedAt.IsZero() {
		return true // not an entry this host writes
	}
	return time.Since(p.RequestedAt) > h.indexGrace()
}

// Decide records a person's decision on the session's approval request
// approvalID, and then, once no other request of its run is pending,
// continues the run — in this host, which takes the session's lease (on a
// shared storage, whichever host decides continues the run). Approved,
// the call runs (after the policy is asked again: if its code changed
// since it asked, the approval is void and the call asked about again);
// denied, the model is told, and the run goes on. The returned Run
// follows the continued run (Wait, Subscribe); while other requests of the
// run are pending, its Wait answers at once with status
// approval_required. A request reaches the ledger (and the inbox) before
// its run parks, while the rest of the pass runs: a decision then waits
// for the park (bounded by ctx), and counts.
//
// A request decided already fails with [ErrApprovalDecided], an unknown
// one with [ErrApprovalNotFound]; these change nothing. A request that
// expired fails with [ErrApprovalExpired]: the decision does not count,
// so the person learns that the call did not run. What Decide records
// then is not that decision but the expiry the host records anyway once a
// request lapsed (as the sweep does): the call is refused as expired, the
// model is told, and the run goes on — the returned Run follows it.
func (s *Session) Decide(ctx context.Context, approvalID string, d ApprovalDecision) (*Run, error) {
	return s.decide(ctx, approvalID, d, nil)
}

// DecideWithToken is Decide for a holder of the request's token (see
// [PendingApproval.Token]) rather than a caller the application trusts:
// the token must be one this host's secret signed, for this tenant, this
// session and a request recorded exactly as it was when the token was
// minted (the run, the call, the tool, its input's digest, the policy's
// code, the expiry). It is refused, and nothing changes — nothing is
// recorded, no run continues — when it is not a token, or does not match
// the request it names ([ErrApprovalTokenInvalid]); when it is a token of
// another tenant, session or approval request, even of the same run
// ([ErrApprovalTokenMismatch]); when its request was decided already
// ([ErrApprovalDecided]); and when its request expired
// ([ErrApprovalExpired]): unlike Decide, an expired token records not even
// the expiry, which the host's sweep (or a Decide) records.
func (s *Session) DecideWithToken(ctx context.Context, token string, d ApprovalDecision) (*Run, error) {
	claims, mac, err := parseToken(token)
	if err != nil {
		return nil, err
	}
	if claims.Tenant != s.h.tenant || claims.SessionID != s.id {
		return nil, fmt.Errorf("%w: it is for tenant %q, session %q", ErrApprovalTokenMismatch, claims.Tenant, claims.SessionID)
	}
	check := func(events []ledger.Event, found ledger.Approval) error {
		if !hmac.Equal(mac, approvalMAC(s.h.secret, s.h.tenant, s.id, found.RunID, found.Request)) {
			// A genuine token of another request of the session, its
			// claims edited to name this one, is a mismatch, not a forgery.
			for _, a := range ledger.Approvals(events, "") {
				if a.Request.ApprovalID != found.Request.ApprovalID && hmac.Equal(mac, approvalMAC(s.h.secret, s.h.tenant, s.id, a.RunID, a.Request)) {
					return fmt.Errorf("%w: it is the token of approval request %s, not of %s", ErrApprovalTokenMismatch, a.Request.ApprovalID, found.Request.ApprovalID)
				}
			}
			return fmt.Errorf("%w: its signature does not match approval request %s as recorded", ErrApprovalTokenInvalid, found.Request.ApprovalID)
		}
		if found.State != ledger.ApprovalPending || found.Answered {
			return fmt.Errorf("%w: %s is %s", ErrApprovalDecided, found.Request.ApprovalID, found.State)
		}
		if exp := found.Request.ExpiresAt; !exp.IsZero() && time.Now().After(exp) {
			return fmt.Errorf("%w: at %s; the token no longer decides it", ErrApprovalExpired, exp.Format(time.RFC3339))
		}
		return nil
	}
	return s.decide(ctx, claims.ApprovalID, d, check)
}

// decide is Decide, checking the request with check (when set) before
// anything is recorded: an error of check refuses the decision.
func (s *Session) decide(ctx context.Context, approvalID string, d ApprovalDecision, check func(events []ledger.Event, found ledger.Approval) error) (*Run, error) {
	h := s.h
	var refused error
	prepare := func(events []ledger.Event) ([]ledger.Event, error) {
		var found *ledger.Approval
		for _, a := range ledger.Approvals(events, "") {
			if a.Request.ApprovalID == approvalID {
				found = &a
				break
			}
		}
		if found == nil {
			return nil, fmt.Errorf("%w: %s in session %s", ErrApprovalNotFound, approvalID, s.id)
		}
		if check != nil {
			if err := check(events, *found); err != nil {
				return nil, err
			}
		}
		if found.State != ledger.ApprovalPending || found.Answered {
			return nil, fmt.Errorf("%w: %s is %s", ErrApprovalDecided, approvalID, found.State)
		}
		now := time.Now().UTC()
		var spec *ToolSpec
		if d.Input != nil {
			spec = h.toolSpec(ctx, s.id, found.Request.Name)
		}
		decision, err := d.decision(found.Request, spec)
		if err != nil {
			return nil, err
		}
		if exp := found.Request.ExpiresAt; !exp.IsZero() && now.After(exp) {
			// The decision does not count: what is recorded is the
			// host's expiry, as the sweep records it.
			decision = &ledger.ApprovalDecision{ApprovalID: approvalID, Decision: ledger.DecisionExpire, Reason: "nobody decided before " + exp.Format(time.RFC3339)}
			refused = fmt.Errorf("%w: at %s; the decision did not count, and the call was refused as expired", ErrApprovalExpired, exp.Format(time.RFC3339))
		}
		e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindApprovalDecision, Time: now, RunID: found.RunID,
			ApprovalDecision: decision}
		return []ledger.Event{e}, nil
	}
	r, err := h.continueParked(ctx, s.id, prepare)
	if refused != nil && err == nil {
		err = refused
	}
	return r, err
}

// continueParked records what prepare returns (decisions on approval
// requests; an error refuses, and nothing is recorded) under the session's
// claim and lease, then continues its parked run when no request of it is
// pending any more. It returns a handle on the run that continues, or one
// that answers at once with status approval_required when the run still
// waits.
func (h *Host) continueParked(ctx context.Context, id string, prepare func([]ledger.Event) ([]ledger.Event, error)) (*Run, error) {
	agent := h.parkedAgent(ctx, id)
	r, res, err := h.resumeDecided(ctx, id, agent, prepare)
	// Another host may hold the session's lease for a moment (it queues
	// a message, or looks for one it follows): wait for it, up to a
	// lease's ttl and a half (a lease taken just before the decision
	// lapses a ttl after the store took it, which the wait must outlast
	// on a loaded machine too). One that holds it longer continues the
	// run itself (another decision): the caller learns it from the error.
	for deadline := time.Now().Add(h.leaseTTL * 3 / 2); errors.Is(err, ErrLeadElsewhere) && time.Now().Before(deadline); {
		wait := 20 * time.Millisecond
		if held, ok := errors.AsType[*storage.LeaseHeldError](err); ok && held.Left > 0 {
			wait = min(held.Left+10*time.Millisecond, time.Until(deadline))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		r, res, err = h.resumeDecided(ctx, id, agent, prepare)
	}
	switch {
	case r != nil:
		return r, nil
	case errors.Is(err, errParked):
		return &Run{h: h, sess: h.Session(id), msgID: res.MessageID, w: answeredWaiter(res)}, nil
	case err != nil && !errors.Is(err, errReconciled):
		return nil, err
	}
	return &Run{h: h, sess: h.Session(id), msgID: res.MessageID, w: answeredWaiter(res)}, nil
}

// resumeDecided is continueParked's resume. A run of the session working
// in this host may be the one that asked (its request reaches the ledger,
// and the inbox, before the run parks): when the ledger says the decision
// would count, it waits for that run to leave, then records the decision
// and continues the parked run. (Answering "nothing to resume" there
// would lose the decision, and leave the run waiting for one.)
func (h *Host) resumeDecided(ctx context.Context, id string, agent Agent, prepare func([]ledger.Event) ([]ledger.Event, error)) (*Run, RunResult, error) {
	for {
		r, res, err := h.resume(ctx, id, agent, nil, nil, func(Interrupted) ResumeAction { return ActionResume }, prepare)
		working, ok := errors.AsType[*workingHereError](err)
		if !ok {
			return r, res, err
		}
		events, err := working.st.store.Load(ctx, id)
		if err != nil {
			return nil, RunResult{}, fmt.Errorf("host: load session %s: %w", id, err)
		}
		if _, err := prepare(events); err != nil {
			return nil, RunResult{}, err // decided already, unknown, a bad token: nothing to wait for
		}
		if err := working.st.waitGone(ctx, working.run); err != nil {
			return nil, RunResult{}, err
		}
	}
}

// parkedAgent is the agent that continues the session's parked run: the
// child's agent of a delegate call in flight here (see NewDelegateTool),
// else the one bound to the session (SessionWith), else
// AutoResume.AgentFor's, else the host's.
func (h *Host) parkedAgent(ctx context.Context, id string) Agent {
	if d, ok := h.delegated.Load(id); ok {
		return d.(delegation).agent
	}
	if a, ok := h.boundAgent(id); ok {
		return a
	}
	if h.rules.AgentFor != nil {
		a, err := h.rules.AgentFor(ctx, id)
		if err == nil {
			a, err = normalizeAgent(a)
		}
		if err == nil {
			return a
		}
		h.log.Error("approvals: no agent for session; its parked run continues with the host's", "session", id, "err", err)
	}
	return h.agent
}

// toolSpec returns the spec of the tool named name that the session's
// parked run would call, or nil when its agent offers none of that name
// now.
func (h *Host) toolSpec(ctx context.Context, sessionID, name string) *ToolSpec {
	a := h.parkedAgent(ctx, sessionID)
	for _, t := range a.Tools {
		if sp := t.Spec(); sp.Name == name {
			return &sp
		}
	}
	for _, ts := range a.Toolsets {
		for _, t := range ts.Tools() {
			if t == nil {
				continue
			}
			if sp := t.Spec(); sp.Name == name {
				return &sp
			}
		}
	}
	return nil
}

// parkedResult is what a parked run's callers get: status
// approval_required, and the requests it waits on — or status waiting, and
// the waits of its calls, when no request is pending.
func (h *Host) parkedResult(sessionID string, events []ledger.Event, runID string) RunResult {
	view, _ := ledger.ProjectRun(events, runID)
	res := RunResult{Status: ledger.RunApprovalRequired, Reason: "waiting for approval", Text: view.Text, RunID: runID,
		ResponseID: view.ResponseID, Usage: view.Usage, Cost: view.Cost}
	if n := len(view.Inputs); n > 0 {
		res.MessageID = view.Inputs[n-1]
	}
	for _, a := range view.Approvals {
		if a.State == ledger.ApprovalPending && !a.Answered {
			res.Approvals = append(res.Approvals, h.pendingOf(sessionID, runID, a.RequestedAt, a.Request))
		}
	}
	res.Waits = waitingOf(events, runID)
	if len(res.Approvals) == 0 && len(res.Waits) > 0 {
		// Waiting for the world, not for people.
		res.Status, res.Reason = ledger.RunWaiting, "waiting for "+waitWhat(ledger.OpenWaits(events, runID)[0])
	}
	return res
}

// parkedRun returns the session's parked run, if its last open run is one.
func parkedRun(events []ledger.Event) (string, bool) {
	open := ledger.OpenRuns(events)
	if len(open) == 0 {
		return "", false
	}
	id := open[len(open)-1]
	return id, ledger.Parked(events, id)
}

// announceDecisions takes the requests decided by events out of the inbox.
// (The run that continues announces them to its subscribers.)
func (h *Host) announceDecisions(sessionID string, events []ledger.Event) {
	for _, e := range events {
		if d := e.ApprovalDecision; d != nil {
			h.unindexApproval(sessionID, d.ApprovalID)
		}
	}
}

// announceDecided publishes, as a run continues, the decisions on its
// calls that are not answered yet.
func (r *run) announceDecided() {
	answered := map[string]bool{}
	events := r.view()
	for _, e := range events {
		if e.ToolResult != nil {
			answered[e.ToolResult.CallID] = true
		}
	}
	for _, a := range ledger.Approvals(events, r.id) {
		if a.State == ledger.ApprovalPending || answered[a.Request.CallID] || a.Request.CallID == "" {
			continue // (the run's own requests are announced as it goes on: continueRun)
		}
		info := r.h.pendingOf(r.sessionID, r.id, a.RequestedAt, a.Request).info(a.State)
		info.Token = ""
		r.publish(Progress{Type: ProgressApprovalDecided, Approval: info})
	}
}

// cancelParked ends the session's parked run as cancelled: its pending
// requests denied, its calls without a result answered so, then its end.
// It reports whether it did.
func (h *Host) cancelParked(sessionID, reason string) bool {
	if reason == "" {
		reason = "cancelled"
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeouts.Append)
	defer cancel()
	did := false
	prepare := func(events []ledger.Event) ([]ledger.Event, error) {
		runID, parked := parkedRun(events)
		if !parked {
			return nil, ErrNothingToResume
		}
		did = true
		return parkedCancelEvents(events, runID, reason, false), nil
	}
	_, _, err := h.resume(ctx, sessionID, h.agent, nil, nil, func(Interrupted) ResumeAction { return ActionResume }, prepare)
	if err != nil && !errors.Is(err, ErrNothingToResume) {
		h.log.Warn("cannot cancel the parked run", "session", sessionID, "err", err)
		if errors.Is(err, errNotRecorded) {
			return false
		}
	}
	return did
}

// parkedCancelEvents are the events that end runID, a parked run, as
// cancelled with reason: its pending requests denied, its unanswered calls
// answered as cancelled, its run-end (rolled back when rolledBack).
func parkedCancelEvents(events []ledger.Event, runID, reason string, rolledBack bool) []ledger.Event {
	now := time.Now().UTC()
	ev := func(kind ledger.Kind) ledger.Event {
		return ledger.Event{ID: ledger.NewID("evt"), Kind: kind, Time: now, RunID: runID}
	}
	var out []ledger.Event
	for _, a := range ledger.PendingApprovals(events) {
		if a.RunID != runID {
			continue
		}
		e := ev(ledger.KindApprovalDecision)
		e.ApprovalDecision = &ledger.ApprovalDecision{ApprovalID: a.Request.ApprovalID, Decision: ledger.DecisionDeny, Reason: "the run was cancelled: " + reason}
		out = append(out, e)
	}
	view, _ := ledger.ProjectRun(events, runID)
	answered := map[string]bool{}
	for _, res := range view.Results {
		answered[res.CallID] = true
	}
	waits := map[string]ledger.JournalWait{}
	for _, w := range ledger.OpenWaits(events, runID) {
		waits[w.CallID] = w
	}
	if n := len(view.Steps); n > 0 {
		for _, c := range view.Steps[n-1].ToolCalls {
			if !answered[c.ID] {
				msg := "error: the run was cancelled before this tool call ran"
				if w, ok := waits[c.ID]; ok {
					msg = "error: the run was cancelled while this call waited for " + waitWhat(w)
				}
				e := ev(ledger.KindToolResult)
				e.ToolResult = &ledger.ToolResult{CallID: c.ID, Name: c.Name, IsError: true, Synthetic: true, Output: msg}
				out = append(out, e)
			}
		}
	}
	end := ev(ledger.KindRunEnd)
	end.RunEnd = &ledger.RunEnd{Status: ledger.RunCancelled, Reason: reason, RolledBack: rolledBack}
	return append(out, end)
}
