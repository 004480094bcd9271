package ledger

import (
	"reflect"
	"testing"
)

// foldScenario: m2 is queued while run1's first pass streams, and folded
// into its second pass; m3 is queued during that pass and never picked up.
func foldScenario() []Event {
	return newBuilder().
		input("m1", "run1", "go").runStart("run1", "resp1", "m1").
		input("m2", "", "and also this").
		calls("run1", "resp1", "resp2", 0, call("c1", "clock", `{}`)).
		result("run1", "c1", "clock", "12:00").
		step("run1", Step{ResponseID: "resp2", Index: 1, Text: "noon, and noted", Inputs: []string{"m2"}}).
		input("m3", "", "one more").
		build()
}

func TestFoldedInputs(t *testing.T) {
	evs := foldScenario()
	if got := PendingInputs(evs); !reflect.DeepEqual(got, []string{"m3"}) {
		t.Errorf("PendingInputs = %v, want [m3]", got)
	}
	tr := ProjectSession("s", evs, Live{RunID: "run1"})
	var ids []string
	for _, it := range tr.Items {
		ids = append(ids, it.ID)
	}
	// m2 was appended while resp1 streamed, but resp2 saw it first: it
	// shows before resp2. m3 waits at the end.
	if want := []string{"m1", "resp1", "m2", "resp2", "m3"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("transcript = %v, want %v", ids, want)
	}
	if tr.Items[2].RunID != "run1" || tr.Items[4].RunID != "" {
		t.Errorf("run ids: m2 %q, m3 %q", tr.Items[2].RunID, tr.Items[4].RunID)
	}
	var got []string
	for _, m := range ReplayMessages(evs) {
		got = append(got, string(m.Role)+":"+m.Text())
	}
	want := []string{"user:go", "assistant:", "tool:12:00", "user:and also this", "assistant:noon, and noted", "user:one more"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replay = %q, want %q", got, want)
	}
}

func TestPendingInputsPickedByRunStart(t *testing.T) {
	evs := newBuilder().input("m1", "", "a").input("m2", "", "b").input("m1", "", "a").build()
	if got := PendingInputs(evs); !reflect.DeepEqual(got, []string{"m1", "m2"}) {
		t.Errorf("PendingInputs = %v", got)
	}
	evs = append(evs, newBuilder().runStart("run2", "resp9", "m1", "m2").build()...)
	if got := PendingInputs(evs); len(got) != 0 {
		t.Errorf("PendingInputs after the run-start = %v", got)
	}
}
