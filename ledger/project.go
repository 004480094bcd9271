package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ItemKind tells a transcript item's author.
type ItemKind string

// The transcript item kinds.
const (
	ItemUser     ItemKind = "user"
	ItemResponse ItemKind = "response"
)

// ItemStatus is the state of a response item.
type ItemStatus string

// The response item statuses.
const (
	// StatusStreaming: the model is streaming into the item right now.
	StatusStreaming ItemStatus = "streaming"
	// StatusCompleted: the model pass finished and is durable.
	StatusCompleted ItemStatus = "completed"
	// StatusCancelled: the run was cancelled; Text holds what had streamed.
	StatusCancelled ItemStatus = "cancelled"
	// StatusFailed: the run failed; Reason tells why.
	StatusFailed ItemStatus = "failed"
	// StatusTimedOut: one of the run's timeouts fired; Reason tells which.
	// Text holds what had streamed.
	StatusTimedOut ItemStatus = "timed_out"
	// StatusInterrupted: the process running the pass died; the run waits
	// to be resumed.
	StatusInterrupted ItemStatus = "interrupted"
	// StatusApprovalRequired: the pass asked for tool calls that wait for
	// a person's approval; the run is parked until they are decided.
	StatusApprovalRequired ItemStatus = "approval_required"
	// StatusWaiting: the pass asked for tool calls that wait (in their
	// journals) for an event or a time; the run is parked until they come.
	StatusWaiting ItemStatus = "waiting"
)

// ToolStatus is the state of a tool call shown in a transcript.
type ToolStatus string

// The tool call statuses.
const (
	ToolRunning     ToolStatus = "running"     // no result yet, and the run is live
	ToolDone        ToolStatus = "done"        // the tool returned
	ToolError       ToolStatus = "error"       // the tool failed; Output says why
	ToolInterrupted ToolStatus = "interrupted" // no result, and the run is not live
	// ToolApprovalRequired: no result; the call waits for a person's
	// approval (Approval says more once decided).
	ToolApprovalRequired ToolStatus = "approval_required"
	// ToolWaiting: no result; the call waits for an event or a time (see
	// OpenWaits).
	ToolWaiting ToolStatus = "waiting"
)

// Transcript is what a user sees of a session: user turns and response
// items in display order.
type Transcript struct {
	SessionID string `json:"session_id"`
	// Items are in causal display order: array order is display order.
	Items []Item `json:"items"`
	// ForkedFrom is the lineage of a session made by a fork: the session
	// it was made from and the point it was made at; nil for a session
	// that is no fork. The items the fork copied keep their ids.
	ForkedFrom *Fork `json:"forked_from,omitempty"`
	// Forks are the ids of the sessions forked from this one, when the
	// reader looked them up (they are not in the session's events: see
	// host.Session.Forks); nil otherwise.
	Forks []string `json:"forks,omitempty"`
}

// Item is one entry of a [Transcript]: a user turn, or one model pass of a
// run (a response).
type Item struct {
	// ID is durable: a user message's id, or the response id minted before
	// the pass streamed.
	ID   string   `json:"id"`
	Kind ItemKind `json:"kind"`
	// RunID is the run that answered (user) or produced (response) the
	// item; empty for a user message no run has picked up yet.
	RunID string `json:"run_id,omitempty"`
	// Text is the item's text: a user message's text parts joined, or what
	// the model streamed.
	Text string `json:"text"`
	// Status is set on responses only.
	Status ItemStatus `json:"status,omitempty"`
	// Reason explains a failed, timed out, cancelled or interrupted
	// response.
	Reason string `json:"reason,omitempty"`
	// Parts is a user message's content when it has more than text.
	Parts []Part `json:"parts,omitempty"`
	// Reasoning is what the model streamed as reasoning.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the tools the response asked for, with their results.
	ToolCalls []ItemToolCall `json:"tool_calls,omitempty"`
	// Model is the model that answered.
	Model string `json:"model,omitempty"`
	// Usage is the provider-reported usage of the pass.
	Usage *Usage `json:"usage,omitempty"`
	// Cost is the billed cost of the pass (see [Usage.Billed]).
	Cost float64 `json:"cost,omitempty"`
	// Time is when the item became durable (zero for an item in flight).
	Time time.Time `json:"time,omitzero"`
	// Raw is the provider's raw payload of the pass. [WireTranscript]
	// drops it.
	Raw json.RawMessage `json:"raw,omitempty"`
	// Parent is, on a user message a sub-agent's parent sent
	// (Input.Parent), the parent's session, run and tool call.
	Parent *ParentCall `json:"parent,omitempty"`
}

// ItemToolCall is a tool call shown in a response item.
type ItemToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Input is the call's arguments: the JSON the model produced or, when
	// that was not valid JSON, a JSON string holding it.
	Input  json.RawMessage `json:"input"`
	Status ToolStatus      `json:"status"`
	// Output is the tool's result, or the error message.
	Output string `json:"output,omitempty"`
	// Source identifies the code that produced the result.
	Source string `json:"source,omitempty"`
	// ChildSession is the child session a sub-agent's call ran in (a
	// result whose Source is "agent:NAME/SESSION").
	ChildSession string `json:"child_session,omitempty"`
	// Effect is the tool's declared effect, when the ledger recorded it
	// (a tool-start or an approval request names it; a read tool's call
	// records neither).
	Effect string `json:"effect,omitempty"`
	// DurationMS is how long the call ran, in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Fuel is the work a metered tool (a Wasm plugin) did for the call
	// (for a task's submission, its validator's).
	Fuel int64 `json:"fuel,omitempty"`
	// PolicyFuel is the fuel the metered policies that decided on the
	// call used, every time they were asked.
	PolicyFuel int64 `json:"policy_fuel,omitempty"`
	// Approval is what became of the approval the call needed: pending,
	// approved, denied, expired, responded (a person answered in the
	// tool's place) (or void, while asked again); "" when it needed none.
	Approval ApprovalState `json:"approval,omitempty"`
	// ApprovalID identifies the call's latest approval request.
	ApprovalID string `json:"approval_id,omitempty"`
	// EditedInput is the input a person's edit approved the call with
	// (DecisionEdit): the call ran with it, and Input stays what the
	// model asked.
	EditedInput json.RawMessage `json:"edited_input,omitempty"`
	// DecidedBy names who decided the call's approval, when they said.
	DecidedBy string `json:"decided_by,omitempty"`
	// Traffic is what a plugin's call did through the host's functions:
	// its HTTP requests and key-value accesses (see [ToolTraffic]).
	// [WireTranscript] leaves out the response bodies and values read,
	// keeping their sizes and digests.
	Traffic *ToolTraffic `json:"traffic,omitempty"`
}

// Live describes a run in flight in this process, which the events alone
// cannot show: the pass streaming right now and its partial text.
type Live struct {
	RunID      string
	ResponseID string
	Text       string
	Reasoning  string
}

// runState follows one run through the events.
type runState struct {
	pending  string // response id minted for the next pass, not yet stepped
	created  bool   // the pending pass's item is in the transcript
	waiting  int    // tool calls of the last step still without a result
	lastItem int    // index of the run's last response item, -1 if none
	ended    bool
}

// ProjectSession builds the transcript of a session from its events. It is a
// pure function of its arguments.
//
// Items are in causal display order. A response item takes its place when
// its pass starts streaming: at the run-start for a run's first pass, and
// once every tool call of the previous pass has its result for the others.
// A user message appended with its run (the usual send) shows where it was
// appended — after the messages queued before it that its run-start lists
// first; one queued while a run worked (no run id when appended) shows
// where a run picks it up — before the pass that folded it in, or at the
// run-start that lists it — or at the end while none has.
//
// A run that has no run-end is either live (listed in live) or interrupted.
// The pass it was streaming when it stopped shows as an item of status
// "streaming" with the live partial text, or "interrupted". Pokes and
// compactions never show.
//
// A tool result answers a call of the pass before it. A call whose id an
// earlier call of the session used (as some models number their calls per
// reply, and hosts before call ids were made unique recorded them) is
// shown with a suffix, "<id>_2", so that a call's id is unique in the
// transcript.
func ProjectSession(sessionID string, events []Event, live ...Live) Transcript {
	t := Transcript{SessionID: sessionID, Items: []Item{}}
	if len(events) > 0 && events[0].Fork != nil {
		f := *events[0].Fork
		t.ForkedFrom = &f
	}
	userIdx := map[string]int{}    // message id → item index
	respIdx := map[string]int{}    // response id → item index
	callIdx := map[string][2]int{} // shown call id → item, tool call index
	answered := map[string]bool{}  // shown call ids with a result
	// The calls of the last pass, in its order: their ids as recorded
	// and as shown. A result answers the first of them with its id that
	// has none yet.
	var passIDs, passShown []string
	runs := map[string]*runState{}
	var order []string // run ids in start order
	liveRun := map[string]Live{}
	for _, l := range live {
		liveRun[l.RunID] = l
	}
	approvalOf := map[string]string{} // approval id → shown call id
	aliases := Aliases(events)        // messages appended twice: shown once
	queued := map[string]Item{}       // inputs no run has picked up yet
	var queueOrder []string
	// shownBefore tells whether an earlier call is shown with id.
	shownBefore := func(id string) bool {
		_, ok := callIdx[id]
		return ok || slices.Contains(passShown, id)
	}
	// openCall is the shown id of the last pass's first call recorded
	// with id that has no result yet, or "".
	openCall := func(id string) string {
		for j, recorded := range passIDs {
			if recorded == id && !answered[passShown[j]] {
				return passShown[j]
			}
		}
		return ""
	}
	addUser := func(it Item) {
		userIdx[it.ID] = len(t.Items)
		t.Items = append(t.Items, it)
	}

	// reindex rebuilds the index maps after items were inserted.
	reindex := func() {
		for i, it := range t.Items {
			switch it.Kind {
			case ItemUser:
				userIdx[it.ID] = i
			case ItemResponse:
				respIdx[it.ID] = i
				for j, c := range it.ToolCalls {
					callIdx[c.ID] = [2]int{i, j}
				}
			}
		}
		for _, r := range runs {
			if r.lastItem >= 0 {
				r.lastItem = -1 // recomputed below
			}
		}
		for i, it := range t.Items {
			if it.Kind == ItemResponse && it.Status != "" {
				if r := runs[it.RunID]; r != nil {
					r.lastItem = i
				}
			}
		}
	}

	// fold shows queued messages a run picked up before the item
	// beforeID, when it is in place, else at the end.
	fold := func(ids []string, runID, beforeID string) {
		var folded []Item
		for _, id := range ids {
			if it, ok := queued[id]; ok {
				delete(queued, id)
				it.RunID = runID
				folded = append(folded, it)
			}
		}
		if len(folded) == 0 {
			return
		}
		if i, ok := respIdx[beforeID]; ok && beforeID != "" {
			t.Items = append(t.Items[:i], append(folded, t.Items[i:]...)...)
			reindex()
			return
		}
		for _, it := range folded {
			addUser(it)
		}
	}

	// open puts the pending pass's item in place, still unfilled (no
	// status): a step fills it, or the run's end or the end of the events
	// closes it.
	open := func(runID string, r *runState) {
		if r.pending == "" || r.created {
			return
		}
		r.created = true
		if _, ok := respIdx[r.pending]; ok {
			return
		}
		respIdx[r.pending] = len(t.Items)
		t.Items = append(t.Items, Item{ID: r.pending, Kind: ItemResponse, RunID: runID})
	}
	// finish gives the pending pass's item, if unfilled, its final status.
	finish := func(runID string, r *runState, status ItemStatus, reason string) bool {
		if r.pending == "" {
			return false
		}
		open(runID, r)
		it := &t.Items[respIdx[r.pending]]
		if it.Status != "" {
			return false
		}
		it.Status, it.Reason = status, reason
		if l, ok := liveRun[runID]; ok && status == StatusStreaming && (l.ResponseID == it.ID || l.ResponseID == "") {
			it.Text, it.Reasoning = l.Text, l.Reasoning
		}
		r.lastItem = respIdx[r.pending]
		return true
	}

	// held is the message that starts a run, until that run's run-start
	// (appended with it) places it among the messages it lists.
	var held *Item
	flushHeld := func() {
		if held != nil {
			addUser(*held)
			held = nil
		}
	}
	for _, e := range events {
		if held != nil && (e.Kind != KindRunStart || e.RunID != held.RunID) {
			flushHeld()
		}
		switch e.Kind {
		case KindInput:
			if aliases[e.Input.MessageID] != "" {
				continue
			}
			it := Item{ID: e.Input.MessageID, Kind: ItemUser, RunID: e.RunID,
				Text: TextOf(e.Input.Parts), Time: e.Time, Parent: e.Input.Parent}
			if hasMedia(e.Input.Parts) {
				it.Parts = e.Input.Parts
			}
			if i, dup := userIdx[it.ID]; dup {
				t.Items[i] = it
				continue
			}
			if e.RunID == "" { // queued: it shows where a run picks it up
				if _, dup := queued[it.ID]; !dup {
					queueOrder = append(queueOrder, it.ID)
				}
				queued[it.ID] = it
				continue
			}
			held = &it
		case KindRunStart:
			if runs[e.RunID] != nil {
				flushHeld()
				continue
			}
			r := &runState{pending: e.RunStart.ResponseID, lastItem: -1}
			runs[e.RunID] = r
			order = append(order, e.RunID)
			for _, id := range e.RunStart.Inputs {
				if held != nil && held.ID == id {
					flushHeld()
				} else if it, ok := queued[id]; ok {
					delete(queued, id)
					it.RunID = e.RunID
					addUser(it)
				}
			}
			flushHeld() // a run-start that does not list it
			open(e.RunID, r)
		case KindStep:
			s := e.Step
			fold(s.Inputs, e.RunID, s.ResponseID) // queued messages it saw first
			it := Item{ID: s.ResponseID, Kind: ItemResponse, RunID: e.RunID, Text: s.Text,
				Status: StatusCompleted, Reasoning: s.Reasoning, Model: s.Model, Time: e.Time, Raw: s.Raw}
			if s.Partial {
				it.Status = StatusCancelled
			}
			u := s.Usage
			it.Usage, it.Cost = &u, u.Billed()
			i, seen := respIdx[s.ResponseID]
			var prevCalls []ItemToolCall // of the same pass, stepped before
			if seen {
				prevCalls = t.Items[i].ToolCalls
			}
			waiting := 0
			passIDs, passShown = passIDs[:0], passShown[:0]
			for j, c := range s.ToolCalls {
				shown := c.ID
				if j < len(prevCalls) && prevCalls[j].Name == c.Name {
					shown = prevCalls[j].ID // the pass again: its calls as shown
				} else {
					for k := 2; shownBefore(shown); k++ {
						shown = fmt.Sprintf("%s_%d", c.ID, k)
					}
				}
				passIDs, passShown = append(passIDs, c.ID), append(passShown, shown)
				tc := ItemToolCall{ID: shown, Name: c.Name, Input: argumentsJSON(c.Arguments), Status: ToolInterrupted}
				if !answered[shown] {
					waiting++
				}
				it.ToolCalls = append(it.ToolCalls, tc)
			}
			if seen {
				prev := t.Items[i]
				for j, c := range it.ToolCalls { // keep results already projected
					for _, pc := range prev.ToolCalls {
						switch {
						case pc.ID != c.ID:
						case pc.Status != ToolInterrupted:
							it.ToolCalls[j] = pc
						case pc.Effect != "":
							it.ToolCalls[j].Effect = pc.Effect
						}
					}
				}
				t.Items[i] = it
			} else {
				i = len(t.Items)
				respIdx[s.ResponseID] = i
				t.Items = append(t.Items, it)
			}
			for j, c := range it.ToolCalls {
				callIdx[c.ID] = [2]int{i, j}
			}
			if r := runs[e.RunID]; r != nil {
				r.lastItem = i
				if s.NextResponseID != "" && s.NextResponseID != r.pending {
					r.pending, r.created, r.waiting = s.NextResponseID, false, waiting
					if waiting == 0 {
						open(e.RunID, r)
					}
				} else if s.ResponseID == r.pending {
					r.pending, r.created = "", false
				}
			}
		case KindToolResult:
			res := e.ToolResult
			shown := openCall(res.CallID)
			if shown == "" {
				continue // a duplicate, or a result with no call before it
			}
			answered[shown] = true
			if at, ok := callIdx[shown]; ok {
				c := &t.Items[at[0]].ToolCalls[at[1]]
				c.Output, c.Source, c.DurationMS, c.Fuel, c.Status = res.Output, res.Source, res.DurationMS, res.Fuel, ToolDone
				c.ChildSession = ChildSessionOf(res.Source)
				c.Traffic = res.Traffic
				c.PolicyFuel += res.PolicyFuel
				if res.IsError {
					c.Status = ToolError
				}
			}
			if r := runs[e.RunID]; r != nil && r.pending != "" && !r.created {
				if r.waiting--; r.waiting <= 0 {
					open(e.RunID, r)
				}
			}
		case KindToolStart:
			if at, ok := callIdx[openCall(e.ToolStart.CallID)]; ok {
				t.Items[at[0]].ToolCalls[at[1]].Effect = e.ToolStart.Effect
			}
		case KindApprovalRequest:
			a := e.ApprovalRequest
			shown := openCall(a.CallID)
			approvalOf[a.ApprovalID] = shown
			if at, ok := callIdx[shown]; ok {
				c := &t.Items[at[0]].ToolCalls[at[1]]
				c.Approval, c.ApprovalID = ApprovalPending, a.ApprovalID
				c.PolicyFuel += a.PolicyFuel
				if a.Effect != "" {
					c.Effect = a.Effect
				}
			}
		case KindApprovalDecision:
			d := e.ApprovalDecision
			callID, ok := approvalOf[d.ApprovalID]
			if !ok {
				continue
			}
			if at, ok := callIdx[callID]; ok {
				if c := &t.Items[at[0]].ToolCalls[at[1]]; c.ApprovalID == d.ApprovalID && c.Approval == ApprovalPending {
					c.Approval, c.DecidedBy = ApprovalStateOf(d.Decision), d.By
					if d.Decision == DecisionEdit {
						c.EditedInput = d.Input
					}
				}
			}
		case KindRunEnd:
			r := runs[e.RunID]
			if r == nil || r.ended {
				continue
			}
			fold(e.RunEnd.Inputs, e.RunID, r.pending)
			r.ended = true
			status := itemStatus(e.RunEnd.Status)
			if status == StatusCompleted {
				continue
			}
			if !finish(e.RunID, r, status, e.RunEnd.Reason) && r.lastItem >= 0 {
				it := &t.Items[r.lastItem]
				if it.Status == StatusCompleted || (it.Status == StatusCancelled && status == StatusTimedOut) {
					// (A pass cut short by a timeout shows how the run
					// ended, not as cancelled.)
					it.Status = status
				}
				if it.Reason == "" {
					it.Reason = e.RunEnd.Reason
				}
			}
		}
	}
	flushHeld()
	for _, id := range order {
		r := runs[id]
		if r.ended {
			continue
		}
		_, isLive := liveRun[id]
		if !isLive && r.lastItem < 0 && Parked(events, id) {
			// Parked on its own request before its first pass: the
			// response it will stream into waits.
			finish(id, r, StatusApprovalRequired, "waiting for approval")
			continue
		}
		if !isLive && r.lastItem >= 0 && Parked(events, id) {
			// Parked: the pass that asked for the calls (or, on the run's
			// own request, the pass before it) waits for people — or,
			// when none of its calls does, for the events or times its
			// calls wait for.
			it := &t.Items[r.lastItem]
			waits := map[string]bool{}
			for _, w := range OpenWaits(events, id) {
				waits[w.CallID] = true
			}
			people := false
			for j := range it.ToolCalls {
				switch c := &it.ToolCalls[j]; {
				case c.Status == ToolInterrupted && c.Approval == ApprovalPending:
					c.Status, people = ToolApprovalRequired, true
				case c.Status == ToolInterrupted && waits[c.ID]:
					c.Status = ToolWaiting
				}
			}
			if _, own := RunApproval(events, id); people || own || len(waits) == 0 {
				it.Status, it.Reason = StatusApprovalRequired, "waiting for approval"
			} else {
				it.Status, it.Reason = StatusWaiting, "waiting for an event or a time"
			}
			continue
		}
		status, tool := StatusInterrupted, ToolInterrupted
		if isLive {
			status, tool = StatusStreaming, ToolRunning
		}
		if !finish(id, r, status, "") && !isLive && r.lastItem >= 0 {
			t.Items[r.lastItem].Reason = "the run was interrupted before it ended"
		}
		if isLive {
			for i := range t.Items {
				if t.Items[i].RunID != id {
					continue
				}
				for j := range t.Items[i].ToolCalls {
					if c := &t.Items[i].ToolCalls[j]; c.Status == ToolInterrupted {
						c.Status = tool
					}
				}
			}
		}
	}
	// Inputs still queued wait at the end, in the order they were sent.
	for _, id := range queueOrder {
		if it, ok := queued[id]; ok {
			addUser(it)
		}
	}
	// Drop the items of passes that never happened (a completed run whose
	// last step minted an id it did not use).
	kept := t.Items[:0]
	for _, it := range t.Items {
		if it.Kind == ItemResponse && it.Status == "" {
			continue
		}
		kept = append(kept, it)
	}
	t.Items = kept
	return t
}

func itemStatus(s RunStatus) ItemStatus {
	switch s {
	case RunCompleted:
		return StatusCompleted
	case RunCancelled:
		return StatusCancelled
	case RunInterrupted:
		return StatusInterrupted
	case RunTimedOut:
		return StatusTimedOut
	default: // failed
		return StatusFailed
	}
}

// WireTranscript returns a copy of t for clients: raw provider payloads are
// dropped, and so are the response bodies and values of the tool calls'
// traffic (their sizes and digests stay: the ledger keeps them, for a
// replay), leaving JSON a client renders.
func WireTranscript(t Transcript) Transcript {
	out := Transcript{SessionID: t.SessionID, Items: make([]Item, len(t.Items)), ForkedFrom: t.ForkedFrom, Forks: t.Forks}
	for i, it := range t.Items {
		it.Raw = nil
		cloned := false
		for j := range it.ToolCalls {
			if it.ToolCalls[j].Traffic == nil {
				continue
			}
			if !cloned {
				it.ToolCalls, cloned = slices.Clone(it.ToolCalls), true // t's own stays as it is
			}
			it.ToolCalls[j].Traffic = it.ToolCalls[j].Traffic.withoutBodies()
		}
		out.Items[i] = it
	}
	return out
}

// TextOf joins the text parts of a message's content.
func TextOf(parts []Part) string {
	if len(parts) == 1 && parts[0].Type == PartText {
		return parts[0].Text
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func hasMedia(parts []Part) bool {
	for _, p := range parts {
		if p.Type != PartText {
			return true
		}
	}
	return false
}

// argumentsJSON returns a model's tool arguments as JSON: verbatim when they
// are valid JSON, else as a JSON string.
func argumentsJSON(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

// Run is the projection of one run.
type Run struct {
	ID string
	// Inputs are the message ids the run answers.
	Inputs []string
	// Ended tells whether the run has a run-end; Status and Reason are set
	// only then.
	Ended  bool
	Status RunStatus
	Reason string
	// Steps are the run's model passes, in order.
	Steps []Step
	// Results are the run's tool results, in order.
	Results []ToolResult
	// Text is the answer of the run: the text of its last pass.
	Text string
	// ResponseID is the id of the run's last response item (or of the
	// pass minted and not yet stepped).
	ResponseID string
	// Usage sums the usage of the run's passes; Cost sums their billed
	// cost.
	Usage Usage
	Cost  float64
	// ResumeAttempts is the highest attempt number among the run's
	// resume-attempt events (a restarted run carries on the count of the
	// run it replaces).
	ResumeAttempts int
	// Started and Ended times.
	StartedAt, EndedAt time.Time
	// Task is the task the run works on, if it is a task's run.
	Task *TaskRun
	// Pokes counts the pokes the run sent to its model.
	Pokes int
	// Deliverable is the validated deliverable of a task run that ended
	// with an accepted submission.
	Deliverable json.RawMessage
	// Parked tells whether the run waits for approvals (see [Parked]);
	// Approvals are its approval requests, in order.
	Parked    bool
	Approvals []Approval
}

// RunItems returns the transcript items of one run, in order: the user
// messages it answered (the one that started it, those it folded in) and
// the responses it produced, as [ProjectSession] shows them (live holds
// the streaming text of a run in flight). Nil when no item is the run's.
// [ProjectRun] summarises a run instead.
func RunItems(events []Event, runID string, live ...Live) []Item {
	var items []Item
	for _, it := range ProjectSession("", events, live...).Items {
		if it.RunID == runID {
			items = append(items, it)
		}
	}
	return items
}

// ProjectRun builds the view of one run from a session's events. ok is
// false when the events hold no run-start for runID.
func ProjectRun(events []Event, runID string) (run Run, ok bool) {
	run.ID = runID
	for _, e := range events {
		if e.RunID != runID {
			continue
		}
		switch e.Kind {
		case KindRunStart:
			ok = true
			run.Inputs = append([]string(nil), e.RunStart.Inputs...)
			run.ResponseID = e.RunStart.ResponseID
			run.StartedAt = e.Time
			run.Task = e.RunStart.Task
		case KindStep:
			s := *e.Step
			replaced := false
			for i := range run.Steps {
				if run.Steps[i].ResponseID == s.ResponseID {
					run.Steps[i], replaced = s, true
				}
			}
			if !replaced {
				run.Steps = append(run.Steps, s)
			}
			run.Text = s.Text
			run.ResponseID = s.ResponseID
			if s.NextResponseID != "" {
				run.ResponseID = s.NextResponseID
			}
		case KindToolResult:
			run.Results = append(run.Results, *e.ToolResult)
		case KindResumeAttempt:
			run.ResumeAttempts = max(run.ResumeAttempts, e.ResumeAttempt.Attempt)
		case KindPoke:
			run.Pokes++
		case KindRunEnd:
			if !run.Ended {
				run.Ended = true
				run.Status, run.Reason = e.RunEnd.Status, e.RunEnd.Reason
				run.EndedAt = e.Time
				run.Deliverable = e.RunEnd.Deliverable
			}
		}
	}
	for _, s := range run.Steps {
		run.Usage = run.Usage.Add(s.Usage)
		run.Cost += s.Usage.Billed()
	}
	if ok {
		run.Approvals = Approvals(events, runID)
		run.Parked = !run.Ended && len(run.Approvals) > 0 && Parked(events, runID)
	}
	return run, ok
}

// PendingInputs returns the ids of queued messages (appended without a run
// id, while another run worked) that no run has picked up yet — neither a
// run-start nor a step lists them — in the order they were sent. The host
// folds them into the live run at its next step boundary, or starts a run
// for them.
func PendingInputs(events []Event) []string {
	aliases := Aliases(events)
	picked := map[string]bool{}
	for _, e := range events {
		switch {
		case e.RunStart != nil:
			for _, id := range e.RunStart.Inputs {
				picked[id] = true
			}
		case e.Step != nil:
			for _, id := range e.Step.Inputs {
				picked[id] = true
			}
		case e.RunEnd != nil:
			for _, id := range e.RunEnd.Inputs {
				picked[id] = true
			}
		}
	}
	var pending []string
	seen := map[string]bool{}
	for _, e := range events {
		if e.Input != nil && e.RunID == "" && !picked[e.Input.MessageID] && !seen[e.Input.MessageID] && aliases[e.Input.MessageID] == "" {
			seen[e.Input.MessageID] = true
			pending = append(pending, e.Input.MessageID)
		}
	}
	return pending
}

// OpenRuns returns the ids of runs that started and have no run-end, in the
// order they started.
func OpenRuns(events []Event) []string {
	var open []string
	ended := map[string]bool{}
	for _, e := range events {
		if e.Kind == KindRunEnd {
			ended[e.RunID] = true
		}
	}
	for _, e := range events {
		if e.Kind == KindRunStart && !ended[e.RunID] {
			open = append(open, e.RunID)
		}
	}
	return open
}
