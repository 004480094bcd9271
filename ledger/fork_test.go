package ledger

import (
	"errors"
	"testing"
)

// forkScenario is two runs: a chat turn, then a turn whose first pass
// called two tools.
func forkScenario() []Event {
	return newBuilder().
		input("m1", "run1", "hello").
		runStart("run1", "resp1", "m1").
		text("run1", "resp1", 0, "hi there").
		runEnd("run1", RunCompleted, "").
		input("m2", "run2", "look it up").
		runStart("run2", "resp2", "m2").
		calls("run2", "resp2", "resp3", 0, call("c1", "lookup", `{"q":"a"}`), call("c2", "publish", `{}`)).
		toolStart("run2", "c2", "publish").
		result("run2", "c1", "lookup", "found a").
		result("run2", "c2", "publish", "published").
		text("run2", "resp3", 1, "done").
		runEnd("run2", RunCompleted, "").
		build()
}

func TestForkEvents(t *testing.T) {
	events := forkScenario()
	for _, at := range []string{"m2", events[4].ID} {
		prefix, p, err := ForkEvents(events, at)
		if err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
		if len(prefix) != 4 || p.Message == nil || p.Message.MessageID != "m2" || p.Item != "m2" || p.EventID != events[4].ID || p.RunID != "" {
			t.Fatalf("at %s: %d events, point %+v", at, len(prefix), p)
		}
	}
	for _, at := range []string{"resp2", events[6].ID} {
		prefix, p, err := ForkEvents(events, at)
		if err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
		if len(prefix) != 10 || p.Message != nil || p.RunID != "run2" || p.Item != "resp2" {
			t.Fatalf("at %s: %d events, point %+v", at, len(prefix), p)
		}
		if prefix[9].ToolResult == nil || prefix[9].ToolResult.CallID != "c2" || len(OpenRuns(prefix)) != 1 {
			t.Fatalf("at %s: the prefix does not end with the step's results: %+v", at, prefix[9])
		}
	}
	// A final step: the fork ends its run there.
	if prefix, p, err := ForkEvents(events, "resp3"); err != nil || len(prefix) != 11 || p.RunID != "run2" {
		t.Fatalf("at resp3: %d events, %+v, %v", len(prefix), p, err)
	}
}

func TestForkEventsRefuses(t *testing.T) {
	events := forkScenario()
	unfinished := append([]Event(nil), events[:8]...) // c1 answered, c2 started only
	unfinished = append(unfinished, events[8])
	queued := newBuilder().
		input("m1", "run1", "hello").
		runStart("run1", "resp1", "m1").
		calls("run1", "resp1", "resp2", 0, call("c1", "lookup", `{}`)).
		input("mq", "", "and also").
		result("run1", "c1", "lookup", "ok").
		text("run1", "resp2", 1, "done").
		runEnd("run1", RunCompleted, "").
		build()
	partial := newBuilder().
		input("m1", "run1", "hello").
		runStart("run1", "resp1", "m1").
		step("run1", Step{ResponseID: "resp1", Text: "hal", Partial: true}).
		runEnd("run1", RunCancelled, "").
		build()
	for _, c := range []struct {
		name   string
		events []Event
		at     string
		want   error
	}{
		{"missing", events, "resp9", ErrForkPointNotFound},
		{"empty", events, "", ErrForkPointNotFound},
		{"no session", nil, "m1", ErrForkPointNotFound},
		{"a tool result", events, events[8].ID, ErrForkPointUnfinished},
		{"a run end", events, events[3].ID, ErrForkPointUnfinished},
		{"unfinished step", unfinished, "resp2", ErrForkPointUnfinished},
		{"queued into a working run", queued, "mq", ErrForkPointUnfinished},
		{"cut short", partial, "resp1", ErrForkPointUnfinished},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := ForkEvents(c.events, c.at); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestForkUsageAndLineage(t *testing.T) {
	src := forkScenario()
	prefix, p, err := ForkEvents(src, "resp2")
	if err != nil {
		t.Fatal(err)
	}
	fork := Event{ID: "ev-fork", Kind: KindFork, Time: t0, Fork: &Fork{Source: "src", At: p.EventID, Item: p.Item, Copied: len(prefix), Model: "other/model"}}
	if _, err := Encode(fork); err != nil {
		t.Fatalf("a fork record (of no run) does not encode: %v", err)
	}
	events := append([]Event{fork}, prefix...)
	own := newBuilder().text("run2", "resp3", 1, "done again").runEnd("run2", RunCompleted, "").build()
	own[0].ID, own[1].ID = "ev-own1", "ev-own2"
	events = append(events, own...)
	u := UsageOf(events)
	if u.Total.PromptTokens != 10 || u.Cost != 0.001 {
		t.Fatalf("the fork's usage counts the copies: %+v", u.Total)
	}
	tr := ProjectSession("fork", events)
	if tr.ForkedFrom == nil || tr.ForkedFrom.Source != "src" || tr.ForkedFrom.Item != "resp2" {
		t.Fatalf("no lineage: %+v", tr.ForkedFrom)
	}
	if w := WireTranscript(tr); w.ForkedFrom == nil {
		t.Fatal("the wire transcript drops the lineage")
	}
	if ids := []string{tr.Items[0].ID, tr.Items[2].ID}; ids[0] != "m1" || ids[1] != "m2" {
		t.Fatalf("the copies changed ids: %v", ids)
	}
	// A fork of the fork copies no fork record.
	again, _, err := ForkEvents(events, "resp3")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range again {
		if e.Fork != nil {
			t.Fatal("a fork record was copied")
		}
	}
}

// TestForkEventsClosesSupersededRuns: at a message whose run closed an
// interrupted run before it, the fork copies that run's end with it, so
// that the fork holds no open run but the one it starts.
func TestForkEventsClosesSupersededRuns(t *testing.T) {
	events := newBuilder().
		input("m1", "run1", "hello").
		runStart("run1", "resp1", "m1").
		calls("run1", "resp1", "resp2", 0, call("c1", "lookup", `{}`)).
		input("m2", "run2", "are you there?").
		runEnd("run1", RunInterrupted, "superseded by a later run").
		runStart("run2", "resp3", "m2").
		text("run2", "resp3", 0, "yes").
		runEnd("run2", RunCompleted, "").
		build()
	prefix, p, err := ForkEvents(events, "m2")
	if err != nil {
		t.Fatal(err)
	}
	if len(prefix) != 4 || prefix[3].RunEnd == nil || prefix[3].RunID != "run1" || len(OpenRuns(prefix)) != 0 || p.Item != "m2" {
		t.Fatalf("prefix %s, point %+v", kindsOf(prefix), p)
	}
	// At the unfinished step of the interrupted run: refused.
	if _, _, err := ForkEvents(events, "resp1"); !errors.Is(err, ErrForkPointUnfinished) {
		t.Fatalf("at the interrupted step: %v", err)
	}
}

func kindsOf(events []Event) []Kind {
	out := make([]Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}
