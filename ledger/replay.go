package ledger

import (
	"fmt"
	"slices"
)

// Message is one message of the conversation as the model sees it.
type Message struct {
	Role Role `json:"role"`
	// Parts is the content (user, assistant, tool and system messages).
	Parts []Part `json:"parts,omitempty"`
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID pairs a tool message with the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message.
	Name string `json:"name,omitempty"`
}

// Text joins the message's text parts.
func (m Message) Text() string { return TextOf(m.Parts) }

// MissingResult is the tool output that replay gives a tool call which has
// no recorded result (its run was interrupted or cancelled), so that every
// call the model made is answered and the conversation replays safely.
const MissingResult = "error: this tool call was interrupted before it produced a result; its outcome is unknown"

// ReplayMessages builds the messages to send to the model from a session's
// events (the system prompt, which is configuration, not history, is not
// among them). It is a pure function of the events:
//
//   - an input or a poke is a user message; an input queued while a run
//     worked (appended without a run id) is placed where a run picks it
//     up — before the pass that folded it in, or at the run-start that
//     lists it — or last while none has; the input that starts a run is
//     placed among the messages its run-start lists, in their order (it
//     may list messages queued before it);
//   - a step is an assistant message with its text and tool calls;
//   - a tool result is a tool message;
//   - a tool call with no result is answered with [MissingResult] right
//     after the step's other results;
//   - a user message that arrived while a step's tool calls ran follows
//     their results (a tool group is never split);
//   - a step replayed twice (same response id) counts once;
//   - a result answers a call of the pass before it; a call whose id an
//     earlier call of the session used (as some models number their calls
//     per reply) is shown with a suffix, "<id>_2", so that ids are unique
//     in the conversation;
//   - the passes, tool results and pokes of a run restarted from scratch
//     (its run-end names RestartedBy) are left out, and so are those of a
//     run rolled back (RunEnd.RolledBack) with its messages;
//   - the last compaction stands, as a user message holding its summary, for
//     every event up to the one it names in Through;
//   - a message appended again under the request id of another (an alias,
//     see [Aliases]) is left out.
func ReplayMessages(events []Event) []Message {
	start := 0
	var msgs []Message
	for i := len(events) - 1; i >= 0; i-- {
		if c := events[i].Compaction; c != nil {
			through := -1
			for j := i - 1; j >= 0; j-- {
				if events[j].ID == c.Through {
					through = j
					break
				}
			}
			msgs = append(msgs, Message{Role: RoleUser, Parts: []Part{TextPart(c.Summary)}})
			start = through + 1
			break
		}
	}

	var open []ToolCall            // calls of the last step
	var deferred []Message         // user messages that arrived while calls ran
	answered := map[string]bool{}  // calls of the open pass with a result (by the id shown)
	pairs := map[string][]string{} // the open pass's unanswered calls: their ids as recorded, and as shown
	used := map[string]bool{}      // every id shown so far
	stepped := map[string]bool{}
	queued := map[string]Message{} // inputs no run has picked up yet
	var queueOrder []string
	unanswered := func() int {
		n := 0
		for _, c := range open {
			if !answered[c.ID] {
				n++
			}
		}
		return n
	}
	flush := func() {
		msgs = append(msgs, deferred...)
		deferred = nil
	}
	// closeOpen answers the open calls that have no result, then lets the
	// user messages that waited for them through.
	closeOpen := func() {
		for _, c := range open {
			if !answered[c.ID] {
				answered[c.ID] = true
				msgs = append(msgs, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name,
					Parts: []Part{TextPart(MissingResult)}})
			}
		}
		open = nil
		flush()
	}
	user := func(m Message) {
		if unanswered() > 0 {
			deferred = append(deferred, m) // never split a tool group
			return
		}
		msgs = append(msgs, m)
	}
	restarted := map[string]bool{} // runs whose passes a restart discarded
	var rolled map[string]bool     // the messages of runs rolled back
	for _, e := range events[start:] {
		if e.RunEnd != nil && e.RunEnd.RestartedBy != "" {
			restarted[e.RunID] = true
		}
		if e.RunEnd != nil && e.RunEnd.RolledBack {
			// The run's passes go as a restart's do, and its messages
			// with them.
			restarted[e.RunID] = true
			if rolled == nil {
				rolled = map[string]bool{}
			}
			for _, id := range RunInputs(events, e.RunID) {
				rolled[id] = true
			}
		}
	}
	// A message appended twice under one request id (two hosts took it at
	// once) is sent once: its aliases — queued copies — are left out (see
	// Aliases), looked for only when a queued message names a request.
	var aliases map[string]string
	for _, e := range events[start:] {
		if e.Input != nil && e.RunID == "" && e.Input.RequestID != "" {
			aliases = Aliases(events)
			break
		}
	}
	// held is the message that starts a run, until that run's run-start
	// (appended with it) places it among the messages it lists.
	var held *Event
	flushHeld := func() {
		if held != nil {
			user(Message{Role: RoleUser, Parts: held.Input.Parts})
			held = nil
		}
	}
	for i := range events[start:] {
		e := events[start+i]
		if held != nil && (e.Kind != KindRunStart || e.RunID != held.RunID) {
			flushHeld()
		}
		if restarted[e.RunID] && (e.Kind == KindStep || e.Kind == KindToolResult || e.Kind == KindPoke) {
			continue
		}
		switch e.Kind {
		case KindInput:
			if rolled[e.Input.MessageID] || aliases[e.Input.MessageID] != "" {
				continue // (an alias is the same message appended again: never sent)
			}
			m := Message{Role: RoleUser, Parts: e.Input.Parts}
			if e.RunID == "" { // queued: the model sees it when a run picks it up
				if _, dup := queued[e.Input.MessageID]; !dup {
					queueOrder = append(queueOrder, e.Input.MessageID)
				}
				queued[e.Input.MessageID] = m
				continue
			}
			held = &events[start+i]
		case KindRunEnd:
			for _, id := range e.RunEnd.Inputs {
				if m, ok := queued[id]; ok {
					delete(queued, id)
					user(m)
				}
			}
		case KindRunStart:
			for _, id := range e.RunStart.Inputs {
				if held != nil && held.RunID == e.RunID && held.Input.MessageID == id {
					flushHeld()
				} else if m, ok := queued[id]; ok {
					delete(queued, id)
					user(m)
				}
			}
			flushHeld() // a run-start that does not list it
		case KindPoke:
			user(Message{Role: RoleUser, Parts: []Part{TextPart(e.Poke.Text)}})
		case KindStep:
			s := e.Step
			if stepped[s.ResponseID] {
				continue // a duplicate of a pass already replayed
			}
			stepped[s.ResponseID] = true
			closeOpen()
			for _, id := range s.Inputs { // queued messages this pass saw first
				if m, ok := queued[id]; ok {
					delete(queued, id)
					msgs = append(msgs, m)
				}
			}
			if s.Text == "" && len(s.ToolCalls) == 0 {
				continue // an empty pass says nothing to replay
			}
			// Results pair with the calls of the open pass only, and an
			// id an earlier call used is shown renamed: hosts before
			// this one recorded the ids a model reused as they came.
			calls, cloned := s.ToolCalls, false
			answered, pairs = map[string]bool{}, map[string][]string{}
			for i, c := range s.ToolCalls {
				shown := c.ID
				for k := 2; used[shown]; k++ {
					shown = fmt.Sprintf("%s_%d", c.ID, k)
				}
				if shown != c.ID {
					if !cloned { // the event is not ours to change
						calls, cloned = slices.Clone(s.ToolCalls), true
					}
					calls[i].ID = shown
				}
				used[shown] = true
				pairs[c.ID] = append(pairs[c.ID], shown)
			}
			m := Message{Role: RoleAssistant, ToolCalls: calls}
			if s.Text != "" {
				m.Parts = []Part{TextPart(s.Text)}
			}
			msgs = append(msgs, m)
			open = calls
		case KindToolResult:
			r := e.ToolResult
			ids := pairs[r.CallID]
			if len(ids) == 0 {
				continue // a duplicate, or a result whose call was compacted away
			}
			shown := ids[0]
			pairs[r.CallID] = ids[1:]
			answered[shown] = true
			msgs = append(msgs, Message{Role: RoleTool, ToolCallID: shown, Name: r.Name,
				Parts: []Part{TextPart(r.Output)}})
			if unanswered() == 0 {
				flush()
			}
		}
	}
	flushHeld()
	closeOpen()
	for _, id := range queueOrder {
		if m, ok := queued[id]; ok {
			msgs = append(msgs, m)
		}
	}
	return msgs
}
