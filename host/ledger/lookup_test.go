package ledger

import (
	"slices"
	"testing"
)

func TestLookups(t *testing.T) {
	// m1 starts run1; m2 is queued and folded into run1's second pass; m3
	// is folded into a pass that failed without a step (its run-end lists
	// it); m4 is pending.
	b := newBuilder().
		add("run1", KindInput, func(e *Event) { e.Input = &Input{MessageID: "m1", RequestID: "req-1", Parts: []Part{TextPart("one")}} }).
		runStart("run1", "resp1", "m1").
		add("", KindInput, func(e *Event) { e.Input = &Input{MessageID: "m2", RequestID: "req-2", Parts: []Part{TextPart("two")}} }).
		calls("run1", "resp1", "resp2", 0, call("c1", "lookup", `{}`)).
		result("run1", "c1", "lookup", "ok").
		step("run1", Step{ResponseID: "resp2", Index: 1, Inputs: []string{"m2"}, Text: "done", FinishReason: "stop"}).
		runEnd("run1", RunCompleted, "").
		input("m3", "", "three").
		runStart("run2", "resp3").
		add("run2", KindRunEnd, func(e *Event) {
			e.RunEnd = &RunEnd{Status: RunFailed, Reason: "model: 402", Inputs: []string{"m3"}}
		}).
		input("m4", "", "four")
	events := b.build()
	for _, tc := range []struct {
		request, msg, run string
	}{
		{"req-1", "m1", "run1"},
		{"req-2", "m2", "run1"},
		{"", "m3", "run2"},
		{"", "m4", ""},
		{"req-unknown", "", ""},
	} {
		if tc.request != "" {
			if got := MessageOfRequest(events, tc.request); got != tc.msg {
				t.Errorf("MessageOfRequest(%q) = %q, want %q", tc.request, got, tc.msg)
			}
		}
		if tc.msg != "" {
			if got := RunOfMessage(events, tc.msg); got != tc.run {
				t.Errorf("RunOfMessage(%q) = %q, want %q", tc.msg, got, tc.run)
			}
		}
	}
	if got := MessageOfRequest(events, ""); got != "" {
		t.Errorf("MessageOfRequest(\"\") = %q", got)
	}
	if got := RunInputs(events, "run1"); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("RunInputs(run1) = %v", got)
	}
	if got := RunInputs(events, "run2"); !slices.Equal(got, []string{"m3"}) {
		t.Errorf("RunInputs(run2) = %v", got)
	}
	if got := PendingInputs(events); !slices.Equal(got, []string{"m4"}) {
		t.Errorf("PendingInputs = %v", got)
	}
}
