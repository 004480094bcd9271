package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// Compaction: when a session nears the model's context window, the older
// turns are summarised into a hand-off note that stands for them.

// compactionMarker starts the system prompt of a compaction request, so
// that a model (or a test's fake one) can tell it from a turn.
const compactionMarker = "[compaction] "

// contextWindower is implemented by models that know their context window
// (provider.Client does, from the provider's model list).
type contextWindower interface {
	ContextWindow(ctx context.Context, model string) (int, error)
}

// compaction is the run's compaction: its agent's (Agent.Compaction),
// else the host's (Options.Compaction); nil when neither is set, which
// compacts only on a context overflow.
func (r *run) compaction() *Compaction {
	if c := r.agent.Compaction; c != nil {
		return c
	}
	return r.h.compaction
}

// window returns the context window of the agent's model, 0 when unknown.
func (r *run) window(ctx context.Context, cfg *Compaction) int {
	if cw, ok := r.h.model.(contextWindower); ok {
		if w, err := cw.ContextWindow(ctx, r.agent.Model); err == nil && w > 0 {
			return w
		}
	}
	return cfg.ContextWindow
}

// needsCompaction reports whether the last pass's tokens reached the limit.
func (r *run) needsCompaction(ctx context.Context) bool {
	cfg := r.compaction()
	if cfg == nil {
		return false
	}
	events := r.view()
	var last *ledger.Usage
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Compaction != nil {
			return false // nothing measured since the last compaction
		}
		if e.Step != nil && e.Step.Usage.PromptTokens > 0 {
			last = &e.Step.Usage
			break
		}
	}
	if last == nil {
		return false
	}
	w := r.window(ctx, cfg)
	if w <= 0 {
		return false
	}
	return float64(last.PromptTokens+last.CompletionTokens) >= cfg.Limit*float64(w)
}

// compact summarises the events before the last KeepRecent user messages
// and passes (at a boundary where no tool call is open) and appends the
// compaction event. It returns false, with no error, when there is nothing
// old enough to compact.
func (r *run) compact(ctx context.Context) (bool, error) {
	cfg := r.compaction()
	if cfg == nil {
		c, _ := Compaction{}.normalized("Compaction")
		cfg = &c
	}
	events := r.view()
	cut := compactionCut(events, cfg.KeepRecent)
	if r.snap != nil && (cut <= len(r.snap.Carry) || !replayable(events[:cut], len(r.snap.Carry))) {
		// The cut, or the replay up to it, reaches before the run's view
		// of a snapshot (an agent that keeps more turns than the last
		// compaction kept): this compaction reads the whole ledger.
		all, err := r.h.wholeOf(ctx, r.sessionID, events, r.snap)
		if err != nil {
			return false, err
		}
		events = all
		cut = compactionCut(events, cfg.KeepRecent)
	}
	if cut <= 0 {
		return false, nil
	}
	// Nothing new since the last compaction: compacting again would only
	// summarise the summary.
	for i := len(events) - 1; i >= 0; i-- {
		if c := events[i].Compaction; c != nil {
			for j := cut - 1; j >= 0; j-- {
				if events[j].ID == c.Through {
					return false, nil
				}
				if events[j].Input != nil || events[j].Step != nil {
					break // a message or pass after the last note
				}
			}
			break
		}
	}
	older, err := r.replay(events[:cut])
	if err != nil {
		return false, err
	}
	if len(older) == 0 {
		return false, nil
	}
	// The request to summarise may itself overflow the window (it holds
	// most of what overflowed): then its oldest messages are dropped,
	// half at a time, at a user message so no tool result loses its call.
	// The first message (a previous note, or the opening message) stays.
	var res model.Result
	for dropped := 0; ; {
		msgs := append(append([]ledger.Message(nil), older...),
			ledger.Message{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart(cfg.Instructions)}})
		req := model.Request{System: compactionMarker + cfg.Instructions, Messages: msgs, Extra: r.agent.ExtraBody}
		res, err = model.WithFallback(ctx, r.retryPolicy(), r.models(), func(ctx context.Context, m string, _ int) (model.Result, error) {
			req := req
			req.Model = m
			chain := r.h.hooks.Load()
			ctx = chain.withCallInfo(ctx, CallInfo{SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name, Purpose: PurposeCompaction, Grants: r.grants})
			return chain.stream(ctx, req, nil)
		}, nil)
		if err == nil || model.Classify(err).Kind != model.ContextOverflow || dropped >= 4 {
			break
		}
		trimmed, ok := dropOldest(older)
		if !ok {
			break
		}
		older, dropped = trimmed, dropped+1
		r.h.log.Warn("compaction: the summary request overflowed too; dropping its oldest half", "session", r.sessionID)
	}
	if err != nil {
		return false, fmt.Errorf("compaction: %w", err)
	}
	summary := strings.TrimSpace(res.Text)
	if summary == "" {
		return false, errors.New("compaction: the model wrote an empty note")
	}
	var prompt int64
	for i := len(events) - 1; i >= 0; i-- {
		if s := events[i].Step; s != nil {
			prompt = s.Usage.PromptTokens
			break
		}
	}
	e := r.newEvent(ledger.KindCompaction)
	e.Compaction = &ledger.Compaction{Summary: summary, Through: events[cut-1].ID, PromptTokens: prompt, Usage: res.Usage}
	if err := r.append(e); err != nil {
		return false, err
	}
	r.h.log.Info("session compacted", "session", r.sessionID, "run", r.id, "prompt_tokens", prompt,
		"through", e.Compaction.Through)
	// What precedes this compaction's Through is behind the model's
	// replay now: a snapshot may stand for it.
	r.h.snapshotFrom(ctx, r.st, r.view(), r.snap)
	return true, nil
}

// replayable reports whether the model's replay of events, whose first
// base events a snapshot carried, starts after them: at a compaction whose
// Through event is among the others.
func replayable(events []ledger.Event, base int) bool {
	for i := len(events) - 1; i >= base; i-- {
		if c := events[i].Compaction; c != nil {
			return slices.ContainsFunc(events[base:i], func(e ledger.Event) bool { return e.ID == c.Through })
		}
	}
	return false
}

// compactionCut returns the index of the first event kept verbatim: the
// latest boundary (before an input or a step, with every earlier tool call
// answered) that leaves at least keep user messages and passes after it.
// It returns 0 when there is none.
func compactionCut(events []ledger.Event, keep int) int {
	open := map[string]bool{}
	boundary := make([]bool, len(events)+1)
	for i, e := range events {
		if (e.Input != nil || e.Step != nil) && len(open) == 0 {
			boundary[i] = true
		}
		switch {
		case e.Step != nil:
			for _, c := range e.Step.ToolCalls {
				open[c.ID] = true
			}
		case e.ToolResult != nil:
			delete(open, e.ToolResult.CallID)
		case e.Input != nil && len(open) > 0:
			// A queued message amid tool calls: not a boundary.
		}
	}
	kept := 0
	for i := len(events) - 1; i > 0; i-- {
		if events[i].Input != nil || events[i].Step != nil {
			kept++
		}
		if kept >= keep && boundary[i] {
			return i
		}
	}
	return 0
}

// dropOldest removes about the older half of msgs, cutting at a user
// message, and keeps the first message when it is a user's: the previous
// note, or the message that opened the conversation. ok is false when
// nothing can be dropped.
func dropOldest(msgs []ledger.Message) ([]ledger.Message, bool) {
	keepFirst := 0
	if len(msgs) > 0 && msgs[0].Role == ledger.RoleUser {
		keepFirst = 1 // the previous note (or the first message) stays
	}
	for i := max(len(msgs)/2, keepFirst+1); i < len(msgs); i++ {
		if msgs[i].Role == ledger.RoleUser {
			return append(append([]ledger.Message(nil), msgs[:keepFirst]...), msgs[i:]...), true
		}
	}
	return msgs, false
}
