package hosttest

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// History returns a session's ledger of about n events, as a long chat
// leaves it: completed turns of input, run-start, step and run-end (texts of
// a few hundred bytes, usage on every step), and every 250 turns a
// compaction at the start of the turn's run, as a long session keeps
// within its model's window. Its events are an hour old; ids are unique
// within it.
func History(n int) []ledger.Event {
	para := strings.Repeat("The quick brown fox jumps over the lazy dog; ", 6)
	now := time.Now().UTC().Add(-time.Hour)
	events := make([]ledger.Event, 0, n+n/1000+4)
	for turn := 0; len(events) < n; turn++ {
		run, msg, resp := fmt.Sprintf("run_%06d", turn), fmt.Sprintf("msg_%06d", turn), fmt.Sprintf("resp_%06d", turn)
		ev := func(kind ledger.Kind) ledger.Event {
			return ledger.Event{ID: fmt.Sprintf("evt_%06d_%s", turn, kind), Kind: kind, Time: now, RunID: run}
		}
		in := ev(ledger.KindInput)
		in.Input = &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart(fmt.Sprintf("question %d: %s", turn, para))}}
		start := ev(ledger.KindRunStart)
		start.RunStart = &ledger.RunStart{Inputs: []string{msg}, ResponseID: resp, Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}
		events = append(events, in, start)
		if turn > 0 && turn%250 == 0 {
			c := ev(ledger.KindCompaction)
			c.Compaction = &ledger.Compaction{Summary: fmt.Sprintf("NOTE: %d turns about foxes and dogs.", turn),
				Through: fmt.Sprintf("evt_%06d_%s", turn-1, ledger.KindRunEnd), Usage: ledger.Usage{PromptTokens: 100000, CompletionTokens: 500, TotalTokens: 100500}}
			events = append(events, c)
		}
		step := ev(ledger.KindStep)
		step.Step = &ledger.Step{ResponseID: resp, Text: "answer: " + para, FinishReason: "stop", Model: "fake/echo",
			Usage: ledger.Usage{PromptTokens: 400, CompletionTokens: 60, TotalTokens: 460}}
		end := ev(ledger.KindRunEnd)
		end.RunEnd = &ledger.RunEnd{Status: ledger.RunCompleted}
		events = append(events, step, end)
	}
	return events
}
