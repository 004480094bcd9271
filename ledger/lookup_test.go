package ledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestActiveTime: a run's working time counts from its run-start, stops
// while it waits for approval decisions (from its last event before them
// to the decision that leaves none pending), and counts again after.
func TestActiveTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	ev := func(sec int, run string, set func(*Event)) Event {
		e := Event{ID: NewID("evt"), Time: at(sec), RunID: run}
		set(&e)
		return e
	}
	start := func(sec int) Event {
		return ev(sec, "r1", func(e *Event) { e.Kind, e.RunStart = KindRunStart, &RunStart{ResponseID: "resp1"} })
	}
	step := func(sec int) Event {
		return ev(sec, "r1", func(e *Event) { e.Kind, e.Step = KindStep, &Step{ResponseID: "resp1", FinishReason: "tool_calls"} })
	}
	request := func(sec int, id string) Event {
		return ev(sec, "r1", func(e *Event) {
			e.Kind, e.ApprovalRequest = KindApprovalRequest, &ApprovalRequest{ApprovalID: id, CallID: "c-" + id, Name: "pay"}
		})
	}
	decide := func(sec int, id string) Event {
		return ev(sec, "r1", func(e *Event) {
			e.Kind, e.ApprovalDecision = KindApprovalDecision, &ApprovalDecision{ApprovalID: id, Decision: DecisionApprove}
		})
	}
	end := func(sec int) Event {
		return ev(sec, "r1", func(e *Event) { e.Kind, e.RunEnd = KindRunEnd, &RunEnd{Status: RunCompleted} })
	}
	other := ev(5, "r2", func(e *Event) { e.Kind, e.RunStart = KindRunStart, &RunStart{ResponseID: "resp9"} })
	for _, c := range []struct {
		name   string
		events []Event
		now    int
		want   int
	}{
		{"not started", []Event{other}, 100, 0},
		{"open", []Event{start(10), other, step(15)}, 40, 30},
		{"ended", []Event{start(10), step(15), end(25)}, 1000, 15},
		{"parked now", []Event{start(10), step(12), request(13, "a")}, 5000, 3},
		{"parked, then decided", []Event{start(10), step(12), request(13, "a"), decide(600, "a")}, 610, 13},
		{"two requests, decided one by one", []Event{start(10), step(12), request(13, "a"), request(14, "b"),
			decide(300, "a"), decide(900, "b"), end(905)}, 2000, 9},
		{"parked twice", []Event{start(0), request(10, "a"), decide(100, "a"), step(105), request(110, "b"),
			decide(1000, "b"), end(1010)}, 5000, 30},
	} {
		if got := ActiveTime(c.events, "r1", at(c.now)); got != time.Duration(c.want)*time.Second {
			t.Errorf("%s: ActiveTime = %s, want %ds", c.name, got, c.want)
		}
	}
}

// TestAliases: a message appended twice under one request id (two hosts
// took it at once) is one message: the one a run picked up answers for
// the other (else the first appended), which is neither pending nor shown,
// and whose run is that one's; a ledger without repeats has no aliases,
// with few inputs or many.
func TestAliases(t *testing.T) {
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	in := func(msg, req, run string) Event {
		return Event{Kind: KindInput, Time: at, RunID: run, Input: &Input{MessageID: msg, RequestID: req, Parts: []Part{{Type: PartText, Text: "hi"}}}}
	}
	start := Event{Kind: KindRunStart, Time: at, RunID: "run_1", RunStart: &RunStart{Inputs: []string{"msg_lead"}, ResponseID: "resp_1"}}
	// The other host's queued copy came first; the leader's, with its run,
	// second: the leader's answers.
	events := []Event{in("msg_queued", "req-1", ""), in("msg_lead", "req-1", "run_1"), start}
	if a := Aliases(events); len(a) != 1 || a["msg_queued"] != "msg_lead" {
		t.Errorf("aliases %v", a)
	}
	if p := PendingInputs(events); len(p) != 0 {
		t.Errorf("pending %v, want none: the copy is answered by the leader's run", p)
	}
	if got := RunOfMessage(events, "msg_queued"); got != "run_1" {
		t.Errorf("the copy's run %q", got)
	}
	if got := MessageOfRequest(events, "req-1"); got != "msg_lead" {
		t.Errorf("the request's message %q", got)
	}
	users := 0
	for _, it := range ProjectSession("s", events).Items {
		if it.Kind == ItemUser {
			users++
			if it.ID != "msg_lead" {
				t.Errorf("shown %s", it.ID)
			}
		}
	}
	if users != 1 {
		t.Errorf("%d user messages shown", users)
	}
	// Nor is the copy sent to the model: the leader's message once, with
	// the copy appended after the run's pass (as a retry on another host
	// appends it while the run works).
	step := Event{Kind: KindStep, Time: at, RunID: "run_1", Step: &Step{ResponseID: "resp_1", Text: "answered"}}
	late := []Event{in("msg_lead", "req-1", "run_1"), start, step, in("msg_copy", "req-1", "")}
	var sent []string
	for _, m := range ReplayMessages(late) {
		sent = append(sent, string(m.Role)+":"+m.Text())
	}
	if got := strings.Join(sent, " "); got != "user:hi assistant:answered" {
		t.Errorf("sent to the model: %q, want the message once", got)
	}
	if p := PendingInputs(late); len(p) != 0 {
		t.Errorf("pending %v, want none", p)
	}
	// Two queued copies, no run yet: the first is pending, once.
	queued := []Event{in("msg_a", "req-2", ""), in("msg_b", "req-2", "")}
	if p := PendingInputs(queued); len(p) != 1 || p[0] != "msg_a" {
		t.Errorf("pending %v, want msg_a alone", p)
	}
	// No repeats: no aliases, with few inputs or many.
	var many []Event
	for i := range 40 {
		many = append(many, in(fmt.Sprint("msg_", i), fmt.Sprint("req_", i), ""))
		if a := Aliases(many); a != nil {
			t.Fatalf("%d distinct requests: aliases %v", i+1, a)
		}
	}
	many = append(many, in("msg_again", "req_33", ""))
	if a := Aliases(many); a["msg_again"] != "msg_33" {
		t.Errorf("a repeat among many: %v", a)
	}
}
