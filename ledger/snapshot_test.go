package ledger

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// snapshotHistory returns a random ledger as the host writes one over many
// turns: messages with and without request ids, messages queued while a
// run worked and picked up by its next step or by the next run, tool
// calls, a compaction every few turns (its Through a few turns back, as
// compactionCut leaves the last messages and passes), a run a crash left
// open and a later resume of it, a message appended twice under one
// request id, a run that ends parked on an approval, and, at the start, a
// fork record and a message that stays pending.
func snapshotHistory(seed uint64, turns int) []Event {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := newBuilder()
	b.add("", KindFork, func(e *Event) {
		e.Fork = &Fork{Source: "parent", At: "parent-ev-9", Copied: 0}
	})
	// A message queued that no run picks up (the host that would have
	// run it gone): pending throughout.
	b.input("lonely", "", "still waiting")
	var (
		queued   []string // messages queued, not yet picked
		starts   []string // the ids of the events that begin each turn
		requests []string
		openRun  string // a run a crash left open
	)
	for turn := 1; turn <= turns; turn++ {
		run := fmt.Sprintf("run-%d", turn)
		msg := fmt.Sprintf("m-%d", turn)
		starts = append(starts, fmt.Sprintf("ev-%03d", len(b.events)+1))
		b.input(msg, run, fmt.Sprintf("turn %d", turn))
		if rng.IntN(2) == 0 {
			req := fmt.Sprintf("req-%d", turn)
			b.events[len(b.events)-1].Input.RequestID = req
			requests = append(requests, req)
		}
		inputs := append([]string{msg}, queued...)
		queued = nil
		b.runStart(run, "resp-"+run, inputs...)
		if turn%5 == 0 && len(starts) > 3 {
			// A compaction at the run's start, keeping the last turns.
			b.compaction(run, fmt.Sprintf("note %d", turn), b.events[indexOf(b.events, starts[len(starts)-3])-1].ID)
		}
		if openRun != "" && rng.IntN(3) == 0 {
			// The crashed run resumed and ended.
			b.resume(openRun, 1)
			b.runEnd(openRun, RunInterrupted, "resumed and stopped")
			openRun = ""
		}
		passes := rng.IntN(3)
		for p := range passes {
			callID := fmt.Sprintf("call-%d-%d", turn, p)
			b.calls(run, fmt.Sprintf("resp-%s-%d", run, p), fmt.Sprintf("resp-%s-%d", run, p+1), p, call(callID, "lookup", `{"q":1}`))
			b.toolStart(run, callID, "lookup")
			if rng.IntN(4) == 0 {
				// A message queued while the call ran, picked up by the
				// next step.
				q := fmt.Sprintf("q-%d-%d", turn, p)
				b.input(q, "", "while you work")
				b.result(run, callID, "lookup", "found")
				b.text(run, fmt.Sprintf("resp-%s-%d", run, p+1), p+1, "with the message")
				b.events[len(b.events)-1].Step.Inputs = []string{q}
				b.events[len(b.events)-1].Step.FinishReason = "tool_calls"
				continue
			}
			b.result(run, callID, "lookup", "found")
		}
		switch r := rng.IntN(10); {
		case r == 0 && openRun == "" && turn < turns:
			openRun = run // a crash: no run-end
			continue
		case r == 1 && len(requests) > 1:
			// A message appended again under an earlier request id.
			b.text(run, "resp-final-"+run, passes, "done")
			b.runEnd(run, RunCompleted, "")
			b.input("dup-"+msg, "", "again")
			b.events[len(b.events)-1].Input.RequestID = requests[rng.IntN(len(requests))]
			continue
		case r == 2 || turn%5 == 2:
			// Two messages queued after the run, for the next run
			// (always three turns before a compaction: the first just
			// before its Through, so that a snapshot cut there keeps it
			// pending).
			b.text(run, "resp-final-"+run, passes, "done")
			b.runEnd(run, RunCompleted, "")
			for _, q := range []string{"next-" + msg, "next2-" + msg} {
				b.input(q, "", "later")
				queued = append(queued, q)
			}
			continue
		}
		b.text(run, "resp-final-"+run, passes, "done")
		b.runEnd(run, RunCompleted, "")
	}
	// The last run parks on an approval.
	run := "run-parked"
	b.input("m-parked", run, "send it")
	b.runStart(run, "resp-parked", "m-parked")
	b.calls(run, "resp-parked-0", "resp-parked-1", 0, call("call-parked", "send", `{}`))
	b.add(run, KindApprovalRequest, func(e *Event) {
		e.ApprovalRequest = &ApprovalRequest{ApprovalID: "appr-1", CallID: "call-parked", Name: "send", Effect: "external"}
	})
	return b.build()
}

func indexOf(events []Event, id string) int {
	return slices.IndexFunc(events, func(e Event) bool { return e.ID == id })
}

// checkView compares what the host's hot paths read of view with what
// they read of the whole ledger full.
func checkView(t *testing.T, what string, s *Snapshot, view, full []Event, from int) {
	t.Helper()
	if !s.Suffices(view) {
		// A pending message whose request id the snapshot may hold:
		// the host reads the whole ledger. Not a view of one it holds
		// for sure, though: that the test would not be checking.
		for _, id := range PendingInputs(view) {
			if !slices.Contains(PendingInputs(full), id) {
				return
			}
		}
	}
	eq := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %s of the view = %v, of the ledger %v", what, name, got, want)
		}
	}
	eq("PendingInputs", PendingInputs(view), PendingInputs(full))
	eq("OpenRuns", OpenRuns(view), OpenRuns(full))
	eq("ReplayMessages", ReplayMessages(view), ReplayMessages(full))
	for _, run := range OpenRuns(full) {
		v, _ := ProjectRun(view, run)
		f, _ := ProjectRun(full, run)
		eq("ProjectRun("+run+")", v, f)
		eq("Parked("+run+")", Parked(view, run), Parked(full, run))
		eq("RunInputs("+run+")", RunInputs(view, run), RunInputs(full, run))
	}
	if len(full) > 0 && full[0].Kind == KindFork && (len(view) == 0 || view[0].Kind != KindFork) {
		t.Fatalf("%s: the fork record is not the view's first event", what)
	}
	// A replay of the events up to any event after from — the last
	// compaction when the snapshot was taken — is the same.
	first := indexOf(full, s.Through) + 1 // the ledger's index of view[len(s.Carry)]
	base := len(s.Carry) - first          // view[base+k] is full[k] for k >= first
	for k := from + 1; k <= len(full); k += 3 {
		if k < first {
			t.Fatalf("%s: the view starts at event %d of the ledger, after the last compaction's Through (%d)", what, first, from)
		}
		eq(fmt.Sprintf("ReplayMessages(events[:%d])", k), ReplayMessages(view[:base+k]), ReplayMessages(full[:k]))
	}
	// What the view does not hold, the sets answer maybe to.
	cutAt := indexOf(full, s.Through) + 1
	for _, e := range full[:cutAt] {
		if in := e.Input; in != nil {
			if !s.MayHoldMessage(in.MessageID) {
				t.Fatalf("%s: message %s before the cut: MayHoldMessage = false", what, in.MessageID)
			}
			if in.RequestID != "" && !s.MayHoldRequest(in.RequestID) {
				t.Fatalf("%s: request %s before the cut: MayHoldRequest = false", what, in.RequestID)
			}
		}
		if st := e.Step; st != nil {
			for _, c := range st.ToolCalls {
				if !s.MayHoldCall(c.ID) {
					t.Fatalf("%s: call %s before the cut: MayHoldCall = false", what, c.ID)
				}
			}
		}
		for _, f := range e.Features() {
			if !slices.Contains(s.Features(), f) {
				t.Fatalf("%s: feature %s before the cut is not among the snapshot's %v", what, f, s.Features())
			}
		}
	}
	for _, e := range full {
		if in := e.Input; in != nil && in.RequestID != "" {
			got, want := MessageOfRequest(view, in.RequestID), MessageOfRequest(full, in.RequestID)
			if got != want && !s.MayHoldRequest(in.RequestID) {
				t.Fatalf("%s: MessageOfRequest(%s) of the view = %q, of the ledger %q, and the snapshot says it holds no such request", what, in.RequestID, got, want)
			}
		}
	}
	if s.Events != cutAt {
		t.Fatalf("%s: the snapshot stands for %d events, want %d", what, s.Events, cutAt)
	}
}

// lastCompaction returns the index of the last compaction among events, -1
// when there is none.
func lastCompaction(events []Event) int {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Compaction != nil {
			return i
		}
	}
	return -1
}

// TestSnapshotView: for random ledgers, at every length, a snapshot cut
// where SnapshotCut says — and a second one taken from the first's view
// later on, as a host that loaded the view takes it — gives views that
// answer the host's reads as the whole ledger does, and survives its
// encoding.
func TestSnapshotView(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 6
	}
	// later returns from, the end, and a length between them.
	later := func(from, end int) []int { return slices.Compact([]int{from, (from + end) / 2, end}) }
	for seed := range uint64(seeds) {
		full := snapshotHistory(seed, 30)
		var snaps int
		for p := 1; p <= len(full); p++ {
			cut := SnapshotCut(full[:p])
			if cut <= 0 || (p < len(full) && seed%5 != uint64(p)%5) {
				continue // a fifth of the lengths, a different fifth for each seed
			}
			s, err := NewSnapshot(nil, full[:p], 0, cut)
			if err != nil {
				t.Fatalf("seed %d, %d events: %v", seed, p, err)
			}
			b, err := EncodeSnapshot(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeSnapshot(b)
			if err != nil {
				t.Fatalf("seed %d: DecodeSnapshot: %v", seed, err)
			}
			if !reflect.DeepEqual(back, s) {
				t.Fatalf("seed %d: the snapshot does not survive its encoding", seed)
			}
			snaps++
			// Later lengths, read through this snapshot; and the next
			// snapshot, taken from its view.
			for _, q := range later(p, len(full)) {
				view := s.View(full[cut:q])
				checkView(t, fmt.Sprintf("seed %d, cut at %d of %d, read at %d", seed, cut, p, q), s, view, full[:q], lastCompaction(full[:p]))
				cut2 := SnapshotCut(view)
				if cut2 <= len(s.Carry) {
					continue
				}
				s2, err := NewSnapshot(s, view, len(s.Carry), cut2)
				if err != nil {
					t.Fatalf("seed %d: a snapshot of a view: %v", seed, err)
				}
				at := indexOf(full, s2.Through) + 1
				if want := SnapshotCut(full[:q]); at != want {
					t.Fatalf("seed %d: the view's cut is at event %d of the ledger, the ledger's at %d", seed, at, want)
				}
				for _, r := range later(q, len(full)) {
					checkView(t, fmt.Sprintf("seed %d, cut at %d then %d, read at %d", seed, cut, at, r), s2, s2.View(full[at:r]), full[:r], lastCompaction(full[:q]))
				}
			}
		}
		if snaps == 0 {
			t.Fatalf("seed %d: no length had a cut", seed)
		}
	}
}

// TestSnapshotRefusals: a cut that leaves nothing new, or falls among the
// carried events, is refused; a snapshot of another version, an unknown
// feature or filters of a size this build does not write does not decode.
func TestSnapshotRefusals(t *testing.T) {
	full := snapshotHistory(1, 30)
	cut := SnapshotCut(full)
	s, err := NewSnapshot(nil, full, 0, cut)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSnapshot(s, s.View(full[cut:]), len(s.Carry), len(s.Carry)); err == nil {
		t.Error("a snapshot cut at the carried events' end succeeded")
	}
	if _, err := NewSnapshot(s, s.View(full[cut:]), 0, 5); err == nil {
		t.Error("a snapshot given the wrong base succeeded")
	}
	if _, err := NewSnapshot(nil, full, 0, 0); err == nil {
		t.Error("a snapshot of no events succeeded")
	}
	for name, data := range map[string]string{
		"version":  `{"v":2,"through":"ev-1","events":1,"requests":null,"messages":null,"calls":null}`,
		"feature":  `{"v":1,"through":"ev-1","events":1,"features":["teleport"],"requests":null,"messages":null,"calls":null}`,
		"filter":   `{"v":1,"through":"ev-1","events":1,"requests":[{"b":"AAAA","n":1}],"messages":null,"calls":null}`,
		"no json":  `{"v":1,`,
		"carry":    `{"v":1,"through":"ev-1","events":1,"requests":null,"messages":null,"calls":null,"carry":[{"v":1}]}`,
		"no count": `{"v":1,"through":"ev-1","events":0,"requests":null,"messages":null,"calls":null}`,
	} {
		if _, err := DecodeSnapshot([]byte(data)); err == nil {
			t.Errorf("DecodeSnapshot of a snapshot with a bad %s succeeded", name)
		}
	}
}

// TestIDSetFalsePositives: the sets never say no to an id they hold, and
// say yes to well under 1% of the others, whatever their size.
func TestIDSetFalsePositives(t *testing.T) {
	for _, n := range []int{10, 1000, 50_000} {
		var s idSet
		for i := range n {
			s.add(fmt.Sprintf("held-%d", i))
		}
		for i := range n {
			if !s.mayHold(fmt.Sprintf("held-%d", i)) {
				t.Fatalf("%d ids: held-%d not held", n, i)
			}
		}
		wrong := 0
		const tries = 20_000
		for i := range tries {
			if s.mayHold(fmt.Sprintf("other-%d", i)) {
				wrong++
			}
		}
		// 0.1% at a filter's capacity; the filters of a set add theirs.
		if rate := float64(wrong) / tries; rate > 0.01 {
			t.Errorf("%d ids: %.2f%% of other ids held, want well under 1%%", n, 100*rate)
		}
	}
}
