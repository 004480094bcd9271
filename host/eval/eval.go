// Package eval replays recorded sessions against a candidate model or agent
// configuration: every recorded user turn is sent again, in order, to a
// scratch host (a memory store: nothing is written where the sessions came
// from) whose tools are answered from the recorded results — no tool,
// plugin or policy runs, and nothing but the candidate model is called —
// and the outcome, cost, tokens and steps of each turn are set beside the
// recording's, with the first turn where the two diverge.
//
// Matching a candidate's tool call to a recorded result: a recorded call of
// the same turn with the same tool name and the same arguments (compared as
// JSON, so key order and white space do not matter) that no candidate call
// took yet; else one of another turn of the session; else, for a call made
// again, the result the same call got before. A call that matches nothing
// is answered with an error result ("error: no recorded result …", see
// [NoRecordedResult]) and counts as a
// divergence (Unmatched).
package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// NoRecordedResult is what the error result a candidate's tool call gets
// when the recording holds no call of that tool with those arguments
// begins with, after the host's "error: ".
const NoRecordedResult = "no recorded result"

// Options configures [Run].
type Options struct {
	// Source is the storage the recorded sessions are read from; it is
	// only read. Required.
	Source storage.Storage
	// Model streams the candidate's model passes. Required.
	Model host.Model
	// Agent is the candidate: its model, system prompt, bounds. Its tools
	// (Tools, and the current tools of its Toolsets) give the specs the
	// model is offered, but are never called; a tool the recording used
	// that the agent lacks is offered with the recorded name and a
	// permissive schema. Its Policies are not asked (every call is
	// answered from the recording). Agent.Model is required.
	Agent host.Agent
	// Sessions are the ids of the sessions to replay, in the report's
	// order. Required: at least one.
	Sessions []string
	// Hooks wrap the candidate's model calls, as host.Options.Hooks do a
	// host's (a budget that counts and stops what the evaluation spends).
	// A model call a hook fails ends its turn failed, with the hook's
	// error as the reason, and the replay goes on to the next session.
	// Default: none.
	Hooks []host.Hook
}

// Report is what [Run] found: per session, and in total.
type Report struct {
	// Model is the candidate's model.
	Model string `json:"model"`
	// Sessions are the sessions in the order asked.
	Sessions []SessionReport `json:"sessions"`
	// Total sums the sessions.
	Total Total `json:"total"`
}

// Figures are what one side (the recording, or the candidate) did over a
// turn or a session.
type Figures struct {
	// Status is how the turn's run ended; over a session, "completed"
	// when every turn completed, else the first other status.
	Status ledger.RunStatus `json:"status"`
	// Steps counts the model passes.
	Steps int `json:"steps"`
	// PromptTokens and CompletionTokens are the provider's counts.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// Cost is the billed cost, in USD.
	Cost float64 `json:"cost"`
	// ToolCalls counts the tool calls.
	ToolCalls int `json:"tool_calls"`
}

func (f *Figures) add(g Figures) {
	if f.Status == "" || (f.Status == ledger.RunCompleted && g.Status != "") {
		f.Status = g.Status
	}
	f.Steps += g.Steps
	f.PromptTokens += g.PromptTokens
	f.CompletionTokens += g.CompletionTokens
	f.Cost += g.Cost
	f.ToolCalls += g.ToolCalls
}

// Turn compares one recorded turn (a run, and the messages it answered)
// with the candidate's answer to the same messages.
type Turn struct {
	// Index is the turn's place in the session, from 0.
	Index int `json:"index"`
	// Message is the text the turn sent.
	Message string `json:"message"`
	// Recorded and Candidate are what each side did.
	Recorded  Figures `json:"recorded"`
	Candidate Figures `json:"candidate"`
	// RecordedText and CandidateText are the answers.
	RecordedText  string `json:"recorded_text"`
	CandidateText string `json:"candidate_text"`
	// CandidateReason says why the candidate's turn did not complete (a
	// budget a hook enforces, a timeout, the model's failure); "" when
	// it completed.
	CandidateReason string `json:"candidate_reason,omitempty"`
	// RecordedCalls and CandidateCalls are the tool calls, as
	// "name {arguments}", in order.
	RecordedCalls  []string `json:"recorded_calls,omitempty"`
	CandidateCalls []string `json:"candidate_calls,omitempty"`
	// SameText and SameCalls tell whether the answers and the tool calls
	// (names and arguments, in order) are the same.
	SameText  bool `json:"same_text"`
	SameCalls bool `json:"same_calls"`
	// Unmatched counts the candidate's calls the recording had no result
	// for.
	Unmatched int `json:"unmatched,omitempty"`
}

// SessionReport is one session's replay.
type SessionReport struct {
	SessionID string `json:"session_id"`
	// Error tells why the session could not be replayed (no such session,
	// no user turn, a storage failure); the other fields are then empty.
	Error string `json:"error,omitempty"`
	// Recorded and Candidate sum the turns.
	Recorded  Figures `json:"recorded"`
	Candidate Figures `json:"candidate"`
	// Diverged tells whether some turn's answer or tool calls differ;
	// DivergedAt is the first such turn (-1 when none), and Divergence
	// says how it differs.
	Diverged   bool   `json:"diverged"`
	DivergedAt int    `json:"diverged_at"`
	Divergence string `json:"divergence,omitempty"`
	// Unmatched counts the candidate's tool calls without a recorded
	// result.
	Unmatched int `json:"unmatched"`
	// Turns are the turns, in order.
	Turns []Turn `json:"turns"`
}

// Total sums a report's sessions.
type Total struct {
	// Sessions counts the sessions replayed (Errors those that could not
	// be).
	Sessions int `json:"sessions"`
	Errors   int `json:"errors"`
	// Completed counts the sessions whose candidate turns all completed;
	// Failed the others.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Diverged counts the sessions that diverged.
	Diverged int `json:"diverged"`
	// Unmatched sums the candidate's tool calls without a recorded
	// result.
	Unmatched int `json:"unmatched"`
	// Recorded and Candidate sum the sessions' figures.
	Recorded  Figures `json:"recorded"`
	Candidate Figures `json:"candidate"`
}

// ErrInvalidOptions is returned by [Run] for options it cannot use.
var ErrInvalidOptions = errors.New("eval: invalid options")

// Run replays opts.Sessions against the candidate and reports. It fails
// only on bad options or a cancelled ctx; a session that cannot be
// replayed is reported with its Error.
func Run(ctx context.Context, opts Options) (Report, error) {
	var errs []error
	if opts.Source == nil {
		errs = append(errs, errors.New("Options.Source is required"))
	}
	if opts.Model == nil {
		errs = append(errs, errors.New("Options.Model is required"))
	}
	if opts.Agent.Model == "" {
		errs = append(errs, errors.New("Options.Agent.Model is required"))
	}
	if len(opts.Sessions) == 0 {
		errs = append(errs, errors.New("Options.Sessions: no session"))
	}
	for _, id := range opts.Sessions {
		if !storage.ValidSessionID(id) {
			errs = append(errs, fmt.Errorf("Options.Sessions: invalid session id %q", id))
		}
	}
	if len(errs) > 0 {
		return Report{}, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	rep := Report{Model: opts.Agent.Model, Sessions: make([]SessionReport, 0, len(opts.Sessions))}
	for _, id := range opts.Sessions {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		sr := replay(ctx, opts, id)
		if err := ctx.Err(); err != nil {
			// ctx ended during the replay: its failure is ctx's, not the
			// session's; the report holds the sessions replayed before.
			return rep, err
		}
		rep.Sessions = append(rep.Sessions, sr)
		t := &rep.Total
		if sr.Error != "" {
			t.Errors++
			continue
		}
		t.Sessions++
		if sr.Candidate.Status == ledger.RunCompleted {
			t.Completed++
		} else {
			t.Failed++
		}
		if sr.Diverged {
			t.Diverged++
		}
		t.Unmatched += sr.Unmatched
		t.Recorded.add(sr.Recorded)
		t.Candidate.add(sr.Candidate)
	}
	return rep, nil
}

// recordedTurn is one run of a recording.
type recordedTurn struct {
	parts   []ledger.Part
	figures Figures
	text    string
	calls   []call
}

// call is a recorded tool call with its result.
type call struct {
	turn    int
	name    string
	args    string // canonical JSON, or the arguments as given
	output  string
	isError bool
	used    bool
}

// recording reads a session's turns: its runs in order, each with the
// messages it answered, its figures and its tool calls with their results.
func recording(events []ledger.Event) []recordedTurn {
	inputs := map[string][]ledger.Part{}
	for _, e := range events {
		if e.Input != nil {
			inputs[e.Input.MessageID] = e.Input.Parts
		}
	}
	restarted := map[string]bool{} // runs a restart replaced: their inputs are the next run's turn
	for _, e := range events {
		if e.RunEnd != nil && e.RunEnd.RestartedBy != "" {
			restarted[e.RunID] = true
		}
	}
	var turns []recordedTurn
	for _, e := range events {
		if e.RunStart == nil || restarted[e.RunID] {
			continue
		}
		run, ok := ledger.ProjectRun(events, e.RunID)
		if !ok {
			continue
		}
		var t recordedTurn
		for _, m := range run.Inputs {
			if len(t.parts) > 0 {
				t.parts = append(t.parts, ledger.TextPart("\n\n"))
			}
			t.parts = append(t.parts, inputs[m]...)
		}
		if len(t.parts) == 0 {
			continue // a run of no message (none is known): nothing to send
		}
		t.text = run.Text
		t.figures = Figures{Status: run.Status, Steps: len(run.Steps), PromptTokens: run.Usage.PromptTokens,
			CompletionTokens: run.Usage.CompletionTokens, Cost: run.Cost}
		if !run.Ended {
			t.figures.Status = ledger.RunInterrupted
		}
		results := map[string]ledger.ToolResult{}
		for _, r := range run.Results {
			results[r.CallID] = r
		}
		for _, s := range run.Steps {
			for _, c := range s.ToolCalls {
				r, ok := results[c.ID]
				if !ok {
					r = ledger.ToolResult{Output: ledger.MissingResult, IsError: true}
				}
				t.calls = append(t.calls, call{turn: len(turns), name: c.Name, args: canonical(c.Arguments), output: r.Output, isError: r.IsError})
			}
		}
		t.figures.ToolCalls = len(t.calls)
		turns = append(turns, t)
	}
	return turns
}

// canonical compacts JSON arguments with their object keys sorted, so that
// two calls with the same arguments compare equal; other text is kept.
func canonical(args string) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return args
	}
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return args
	}
	return string(b)
}

// answers answers a session's candidate tool calls from its recording.
type answers struct {
	mu        sync.Mutex
	calls     []call
	turn      int
	last      map[string]call // name+args → the last result a call got
	unmatched int
}

func (a *answers) answer(name string, input json.RawMessage) (ledger.ToolResult, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	args := canonical(string(input))
	key := name + " " + args
	pick := -1
	for i, c := range a.calls {
		if !c.used && c.name == name && c.args == args && (pick < 0 || (c.turn == a.turn && a.calls[pick].turn != a.turn)) {
			pick = i
			if c.turn == a.turn {
				break
			}
		}
	}
	if pick >= 0 {
		a.calls[pick].used = true
		c := a.calls[pick]
		a.last[key] = c
		return ledger.ToolResult{Output: c.output, IsError: c.isError}, true
	}
	if c, ok := a.last[key]; ok {
		return ledger.ToolResult{Output: c.output, IsError: c.isError}, true
	}
	a.unmatched++
	return ledger.ToolResult{}, false
}

// replay replays one session.
func replay(ctx context.Context, opts Options, id string) SessionReport {
	sr := SessionReport{SessionID: id, DivergedAt: -1, Turns: []Turn{}}
	events, err := opts.Source.Load(ctx, id)
	if err != nil {
		sr.Error = fmt.Sprintf("eval: load session %s: %v", id, err)
		return sr
	}
	if len(events) == 0 {
		sr.Error = fmt.Sprintf("eval: no session %s", id)
		return sr
	}
	turns := recording(events)
	if len(turns) == 0 {
		sr.Error = fmt.Sprintf("eval: session %s has no user turn to replay", id)
		return sr
	}
	ans := &answers{last: map[string]call{}}
	for _, t := range turns {
		ans.calls = append(ans.calls, t.calls...)
	}
	h, err := host.New(host.Options{Storage: memory.New(), Model: opts.Model, Agent: candidate(opts.Agent, ans), Hooks: opts.Hooks})
	if err != nil {
		sr.Error = fmt.Sprintf("eval: %v", err)
		return sr
	}
	defer h.Close(context.WithoutCancel(ctx))
	sess := h.Session(id)
	for i, rt := range turns {
		ans.mu.Lock()
		ans.turn, ans.unmatched = i, 0
		ans.mu.Unlock()
		text, rest := splitParts(rt.parts)
		res, err := sess.Send(ctx, text, host.SendOptions{Parts: rest})
		turn := Turn{Index: i, Message: ledger.TextOf(rt.parts), Recorded: rt.figures, RecordedText: rt.text}
		for _, c := range rt.calls {
			turn.RecordedCalls = append(turn.RecordedCalls, c.name+" "+c.args)
		}
		if err != nil && res.RunID == "" {
			turn.Candidate = Figures{Status: ledger.RunFailed}
			turn.CandidateText = "eval: " + err.Error()
		} else {
			evs, lerr := sess.Events(ctx)
			if lerr != nil {
				sr.Error = fmt.Sprintf("eval: read the candidate's session: %v", lerr)
				return sr
			}
			run, _ := ledger.ProjectRun(evs, res.RunID)
			turn.CandidateText, turn.CandidateReason = res.Text, res.Reason
			turn.Candidate = Figures{Status: res.Status, Steps: len(run.Steps), PromptTokens: res.Usage.PromptTokens,
				CompletionTokens: res.Usage.CompletionTokens, Cost: res.Cost}
			for _, s := range run.Steps {
				for _, c := range s.ToolCalls {
					turn.CandidateCalls = append(turn.CandidateCalls, c.Name+" "+canonical(c.Arguments))
				}
			}
			turn.Candidate.ToolCalls = len(turn.CandidateCalls)
		}
		ans.mu.Lock()
		turn.Unmatched = ans.unmatched
		ans.mu.Unlock()
		turn.SameText = strings.TrimSpace(turn.CandidateText) == strings.TrimSpace(turn.RecordedText)
		turn.SameCalls = equal(turn.CandidateCalls, turn.RecordedCalls)
		if !sr.Diverged && (!turn.SameText || !turn.SameCalls || turn.Unmatched > 0) {
			sr.Diverged, sr.DivergedAt, sr.Divergence = true, i, divergence(turn)
		}
		sr.Unmatched += turn.Unmatched
		sr.Recorded.add(turn.Recorded)
		sr.Candidate.add(turn.Candidate)
		sr.Turns = append(sr.Turns, turn)
	}
	return sr
}

// divergence says how a turn differs.
func divergence(t Turn) string {
	var why []string
	if !t.SameCalls {
		why = append(why, fmt.Sprintf("tool calls differ (recorded %d, candidate %d)", len(t.RecordedCalls), len(t.CandidateCalls)))
	}
	if t.Unmatched > 0 {
		why = append(why, fmt.Sprintf("%d tool call(s) without a recorded result", t.Unmatched))
	}
	if !t.SameText {
		why = append(why, "the answer differs")
	}
	return fmt.Sprintf("turn %d: %s", t.Index, strings.Join(why, "; "))
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// splitParts returns the first text part's text and the other parts.
func splitParts(parts []ledger.Part) (string, []ledger.Part) {
	for i, p := range parts {
		if p.Type == ledger.PartText {
			rest := append(append([]ledger.Part(nil), parts[:i]...), parts[i+1:]...)
			return p.Text, rest
		}
	}
	return "", parts
}

// candidate returns the agent the scratch host runs: opts' agent with its
// tools' specs answered from the recording, and every other recorded tool
// offered with a permissive schema; no policy, no toolset.
func candidate(a host.Agent, ans *answers) host.Agent {
	var specs []host.ToolSpec
	seen := map[string]bool{}
	addSpec := func(s host.ToolSpec) {
		if !seen[s.Name] {
			seen[s.Name] = true
			specs = append(specs, s)
		}
	}
	for _, t := range a.Tools {
		addSpec(t.Spec())
	}
	for _, ts := range a.Toolsets {
		for _, t := range ts.Tools() {
			addSpec(t.Spec())
		}
	}
	for _, c := range ans.calls {
		if host.ValidToolName(c.name) {
			addSpec(host.ToolSpec{Name: c.name, Description: "A tool of the recorded session.", InputSchema: json.RawMessage(`{"type":"object"}`)})
		}
	}
	a.Tools, a.Toolsets, a.Policies = nil, nil, nil
	a.ToolApprovals = map[string]host.ApprovalMode{}
	for _, s := range specs {
		s.Effect, s.Timeout = host.EffectRead, 0 // answered here: nothing to guard
		a.ToolApprovals[s.Name] = host.ApproveAlways
		name := s.Name
		a.Tools = append(a.Tools, host.NewTool(s, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			r, ok := ans.answer(name, c.Input)
			if !ok {
				return host.ToolResult{}, fmt.Errorf("%s: the recording has no call of %s with these arguments (%s)", NoRecordedResult, name, compact(c.Input))
			}
			if r.IsError {
				return host.ToolResult{}, errors.New(strings.TrimPrefix(r.Output, "error: "))
			}
			return host.ToolResult{Output: r.Output, Source: "eval:recorded"}, nil
		}))
	}
	return a
}

func compact(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
