package host

import (
	"context"
	"fmt"
	"log/slog"
)

// LogEvents returns an [Options.OnEvent] that logs each live event of the
// host's runs on l, at info: one record whose message is the event's type
// (run-start, step, retry, compaction, poke, queued-message, auto-resume,
// approval-requested, approval-decided, timeout, run-end) and whose
// attributes are [EventAttrs]. It is what `agentic-host chat --logs`
// prints, in --log-format text or json. A nil l logs on slog.Default().
func LogEvents(l *slog.Logger) func(Event) {
	return func(e Event) {
		log := l
		if log == nil {
			log = slog.Default()
		}
		log.LogAttrs(context.Background(), slog.LevelInfo, string(e.Type), EventAttrs(e)...)
	}
}

// EventAttrs renders a live event's fields as log attributes, those it
// sets only: session, run, agent, step and elapsed_ms always; resumed;
// a step's finish, model, tokens_in, tokens_out, cost and duration_ms (and
// tool_calls); a retry's class, attempt, delay_ms and reason; status,
// timeout, tool, message, attempt; an approval's id, tool and state; and
// the reason.
func EventAttrs(e Event) []slog.Attr {
	attrs := []slog.Attr{slog.String("session", e.SessionID)}
	add := func(a slog.Attr) { attrs = append(attrs, a) }
	if e.RunID != "" {
		add(slog.String("run", e.RunID))
	}
	if e.Agent != "" {
		add(slog.String("agent", e.Agent))
	}
	add(slog.Int("step", e.Step))
	add(slog.Int64("elapsed_ms", e.ElapsedMS))
	if e.Resumed {
		add(slog.Bool("resumed", true))
	}
	if e.Type == EventStep {
		add(slog.String("finish", e.FinishReason))
		add(slog.String("model", e.Model))
		if u := e.Usage; u != nil {
			add(slog.Int64("tokens_in", int64(u.PromptTokens)))
			add(slog.Int64("tokens_out", int64(u.CompletionTokens)))
		}
		add(slog.String("cost", fmt.Sprintf("%.6f", e.Cost)))
		add(slog.Int64("duration_ms", e.DurationMS))
		if e.ToolCalls > 0 {
			add(slog.Int("tool_calls", e.ToolCalls))
		}
	}
	if r := e.Retry; r != nil {
		add(slog.String("class", r.Class))
		add(slog.Int("attempt", r.Attempt))
		add(slog.Int64("delay_ms", r.DelayMS))
		add(slog.String("reason", r.Reason))
	}
	if e.Status != "" {
		add(slog.String("status", string(e.Status)))
	}
	if e.Timeout != "" {
		add(slog.String("timeout", string(e.Timeout)))
	}
	if e.Tool != "" {
		add(slog.String("tool", e.Tool))
	}
	if e.MessageID != "" {
		add(slog.String("message", e.MessageID))
	}
	if e.Attempt > 0 {
		add(slog.Int("attempt", e.Attempt))
	}
	if a := e.Approval; a != nil {
		add(slog.String("approval", a.ApprovalID))
		if a.Tool != "" {
			add(slog.String("tool", a.Tool))
		}
		add(slog.String("state", string(a.State)))
	}
	if e.Reason != "" && e.Retry == nil {
		add(slog.String("reason", e.Reason))
	}
	return attrs
}
