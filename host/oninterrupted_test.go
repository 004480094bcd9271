package host_test

// The restart policy of an agent (Agent.OnInterrupted): what becomes of a
// run its process left interrupted, at boot and when the next message
// comes; and leave, which keeps the run interrupted until then.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// deadSession records in store, as a process that died mid-pass leaves
// it, a run answering text (and the messages queued into it), and returns
// the run's id and the response id it minted.
func deadSession(t *testing.T, store storage.Storage, id, text string, queued ...string) (runID, responseID string) {
	t.Helper()
	runID, msgID, responseID := ledger.NewID("run"), ledger.NewID("msg"), ledger.NewID("resp")
	now := time.Now().UTC()
	evs := []ledger.Event{
		{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
			Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(text)}}},
		{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
			RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: responseID, Agent: "default", Model: hosttest.DefaultModel, MaxSteps: host.DefaultMaxSteps}},
	}
	for _, q := range queued {
		evs = append(evs, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now,
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: []ledger.Part{ledger.TextPart(q)}}})
	}
	if err := store.Append(context.Background(), id, evs...); err != nil {
		t.Fatal(err)
	}
	return runID, responseID
}

// bootSwept waits for the host's boot sweep and returns its report.
func bootSwept(t *testing.T, h *host.Host) host.SweepReport {
	t.Helper()
	select {
	case <-h.SweepDone():
	case <-time.After(20 * time.Second):
		t.Fatal("the boot sweep did not finish")
	}
	return h.LastSweep()
}

// TestAgentOnInterrupted: an agent's OnInterrupted decides what the boot
// sweep does with its interrupted run (over AutoResume.OnInterrupted,
// which says resume here), and what the next message finds. leave records
// nothing at boot: the session stays interrupted, its queued message
// waiting; the next message closes the run as interrupted (its turn is
// not replayed) and starts a run that answers the queued message and
// itself, its model seeing the transcript.
func TestAgentOnInterrupted(t *testing.T) {
	for _, tc := range []struct {
		action host.ResumeAction
		// count picks the report's counter the run falls under.
		count func(host.SweepReport) int
		// state is the session's after the sweep.
		state host.State
		// dead is how the dead run ends, once the next message is
		// answered.
		dead  ledger.RunStatus
		items []string
	}{
		{action: host.ActionResume, count: func(r host.SweepReport) int { return r.Resumed }, state: host.StateCompleted, dead: ledger.RunCompleted,
			items: []string{"user::dead", "response:completed:You said: dead", "user::queued", "response:completed:You said: queued",
				"user::next", "response:completed:You said: next"}},
		{action: host.ActionRestart, count: func(r host.SweepReport) int { return r.Restarted }, state: host.StateCompleted, dead: ledger.RunFailed,
			items: []string{"user::dead", "response:failed:", "response:completed:You said: dead", "user::queued", "response:completed:You said: queued",
				"user::next", "response:completed:You said: next"}},
		{action: host.ActionFail, count: func(r host.SweepReport) int { return r.Failed }, state: host.StateCompleted, dead: ledger.RunFailed,
			items: []string{"user::dead", "response:failed:", "user::queued", "response:completed:You said: queued",
				"user::next", "response:completed:You said: next"}},
		{action: host.ActionLeave, count: func(r host.SweepReport) int { return r.Left }, state: host.StateInterrupted, dead: ledger.RunInterrupted,
			items: []string{"user::dead", "response:interrupted:", "user::queued", "user::next", "response:completed:You said: next"}},
	} {
		t.Run(string(tc.action), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			store := memory.New()
			deadID, _ := deadSession(t, store, "s", "dead", "queued")
			hs := hosttest.New(t, host.Options{Storage: store, Agent: host.Agent{OnInterrupted: tc.action},
				AutoResume: &host.AutoResume{OnInterrupted: func(context.Context, host.Interrupted) (host.ResumeAction, error) {
					return host.ActionResume, nil
				}}})
			rep := bootSwept(t, hs.Host)
			if rep.Interrupted != 1 || tc.count(rep) != 1 {
				t.Errorf("the boot sweep: %+v", rep)
			}
			sess := hs.Host.Session("s")
			st, err := sess.Status(ctx)
			if err != nil || st.State != tc.state {
				t.Fatalf("status after the sweep: %+v %v", st, err)
			}
			if tc.action == host.ActionLeave {
				if st.RunID != deadID || st.Queued != 1 {
					t.Errorf("a left run's status: %+v", st)
				}
				if n := hs.Model.RequestCount(); n != 0 {
					t.Errorf("%d model requests: a left run was run", n)
				}
				if evs := hs.Events("s"); hosttest.Kinds(evs) != "input run-start input" {
					t.Errorf("leave recorded something: %s", hosttest.Kinds(evs))
				}
			}
			res, err := sess.Send(ctx, "next", host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: next" {
				t.Fatalf("the next message: %+v %v", res, err)
			}
			evs := hosttest.WaitLedger(t, store, "s", 10*time.Second, "the session settled", hosttest.Settled)
			tr := ledger.ProjectSession("s", evs)
			if got := itemsOf(tr); strings.Join(got, "\n") != strings.Join(tc.items, "\n") {
				t.Errorf("transcript:\n%s\nwant:\n%s\nledger: %s", strings.Join(got, "\n"), strings.Join(tc.items, "\n"), kinds(evs))
			}
			dead, _ := ledger.ProjectRun(evs, deadID)
			if !dead.Ended || dead.Status != tc.dead {
				t.Errorf("the dead run: ended %v, %s (%s)", dead.Ended, dead.Status, dead.Reason)
			}
			if tc.action != host.ActionLeave {
				return
			}
			if !strings.Contains(dead.Reason, "on_interrupted: leave") {
				t.Errorf("the left run's end says %q", dead.Reason)
			}
			if n := hosttest.CountKind(evs, ledger.KindResumeAttempt); n != 0 {
				t.Errorf("%d resume attempts of a left run", n)
			}
			// One pass, for the new run: it saw the transcript (the
			// dead turn and the queued message), and answered the last.
			reqs := hs.Model.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d model requests, want 1", len(reqs))
			}
			var seen []string
			for _, m := range reqs[0].Messages {
				seen = append(seen, m.Text())
			}
			if got := strings.Join(seen, "|"); !strings.Contains(got, "dead") || !strings.Contains(got, "queued") || !strings.HasSuffix(got, "next") {
				t.Errorf("the new run's model saw %q", got)
			}
		})
	}
}

// TestLeaveThenResume: a run left interrupted (the agent says leave, with
// AutoResume on or off) goes on where it stopped when resumed on demand,
// into the item it minted; the next message then runs as usual.
func TestLeaveThenResume(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-auto-resume", true: "auto-resume"}[auto], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			store := memory.New()
			_, resp := deadSession(t, store, "s", "dead")
			opts := host.Options{Storage: store, Agent: host.Agent{OnInterrupted: host.ActionLeave}}
			if auto {
				opts.AutoResume = &host.AutoResume{}
			}
			hs := hosttest.New(t, opts)
			bootSwept(t, hs.Host)
			if _, err := hs.Host.Session("s").Resume(ctx, host.ResumeOptions{Action: host.ActionLeave}); !errors.Is(err, host.ErrInvalidInput) {
				t.Errorf("a resume on demand that leaves: %v", err)
			}
			res, err := hs.Host.Resume(ctx, "s")
			if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: dead" || res.ResponseID != resp {
				t.Fatalf("the resume: %+v %v", res, err)
			}
			res, err = hs.Host.Session("s").Send(ctx, "next", host.SendOptions{})
			if err != nil || res.Text != "You said: next" {
				t.Fatalf("the next message: %+v %v", res, err)
			}
			evs := hs.Events("s")
			if got, want := kinds(evs), "input run-start resume-attempt step run-end input run-start step run-end"; got != want {
				t.Errorf("ledger %s, want %s", got, want)
			}
		})
	}
}

// TestAgentOnInterruptedInvalid: an agent's OnInterrupted and Overlap are
// checked with the rest of it.
func TestAgentOnInterruptedInvalid(t *testing.T) {
	_, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(),
		Agent: host.Agent{Model: "m", OnInterrupted: "retry", Overlap: "drop"}})
	if err == nil || !strings.Contains(err.Error(), `OnInterrupted "retry"`) || !strings.Contains(err.Error(), `Overlap "drop"`) {
		t.Errorf("New: %v", err)
	}
}
