package host_test

// A host that arrives after a crash: the session's run was led by a host
// that died holding the lease, and a message reaches another host before
// the lease lapsed. The dead run is answered first, into its own item, and
// then the message; each once, whatever AutoResume says.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

// deadRun records, in session id, a run that a host which died mid-pass
// left: its message and run-start, appended under a lease that nobody
// renews. It returns the run's id and its first response id.
func deadRun(t *testing.T, store *redis.Store, id, text string) (runID, responseID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := store.AcquireLease(ctx, id, "dead-host", mhLeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	runID, msgID, responseID := ledger.NewID("run"), ledger.NewID("msg"), ledger.NewID("resp")
	now := time.Now().UTC()
	evs := []ledger.Event{
		{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
			Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(text)}}},
		{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
			RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: responseID, Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}},
	}
	if err := lease.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	return runID, responseID
}

// itemsOf returns the transcript's items as "kind:status:text".
func itemsOf(tr ledger.Transcript) []string {
	var out []string
	for _, it := range tr.Items {
		out = append(out, string(it.Kind)+":"+string(it.Status)+":"+it.Text)
	}
	return out
}

// TestSendAfterCrashOnRedis: a message sent to a session whose leader died
// mid-pass, while its lease still runs, is queued; once the lease lapses,
// the host re-drives the dead run into the item it minted (its model sees
// the dead run's message only), then answers the message in the next pass
// — with AutoResume off, on, and choosing restart or fail; through Send,
// and through Start with nobody waiting.
func TestSendAfterCrashOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1})
	first := mhWords("f", 10)
	resumeItems := []string{
		"user::" + first, "response:completed:You said: " + first,
		"user::again", "response:completed:You said: again",
	}
	for _, tc := range []struct {
		name   string
		auto   *host.AutoResume
		leave  bool // the agent's OnInterrupted is leave
		noWait bool
		items  []string
		// deadStatus is how the dead run ends.
		deadStatus ledger.RunStatus
	}{
		{name: "send", items: resumeItems, deadStatus: ledger.RunCompleted},
		{name: "start-nobody-waits", noWait: true, items: resumeItems, deadStatus: ledger.RunCompleted},
		{name: "auto-resume", auto: &host.AutoResume{Interval: -1}, items: resumeItems, deadStatus: ledger.RunCompleted},
		{name: "auto-resume-sweeping", auto: &host.AutoResume{Interval: mhLeaseTTL / 3}, items: resumeItems, deadStatus: ledger.RunCompleted},
		{name: "restart", deadStatus: ledger.RunFailed,
			auto: &host.AutoResume{Interval: -1, OnInterrupted: func(context.Context, host.Interrupted) (host.ResumeAction, error) {
				return host.ActionRestart, nil
			}},
			items: []string{"user::" + first, "response:failed:", "response:completed:You said: " + first,
				"user::again", "response:completed:You said: again"}},
		{name: "fail", deadStatus: ledger.RunFailed,
			auto: &host.AutoResume{Interval: -1, OnInterrupted: func(context.Context, host.Interrupted) (host.ResumeAction, error) {
				return host.ActionFail, nil
			}},
			items: []string{"user::" + first, "response:failed:", "user::again", "response:completed:You said: again"}},
		// The agent leaves its interrupted runs: the message closes the
		// dead run as interrupted and is answered in a run of its own,
		// whether a sweep runs (it leaves the run too) or not.
		{name: "leave", leave: true, deadStatus: ledger.RunInterrupted,
			items: []string{"user::" + first, "response:interrupted:", "user::again", "response:completed:You said: again"}},
		{name: "leave-auto-resume", leave: true, auto: &host.AutoResume{Interval: mhLeaseTTL / 3}, deadStatus: ledger.RunInterrupted,
			items: []string{"user::" + first, "response:interrupted:", "user::again", "response:completed:You said: again"}},
		{name: "leave-nobody-waits", leave: true, noWait: true, deadStatus: ledger.RunInterrupted,
			items: []string{"user::" + first, "response:interrupted:", "user::again", "response:completed:You said: again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "crash-" + tc.name
			store := mhOpen(t, srv.URL())
			deadID, deadResp := deadRun(t, store, id, first)
			b := mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL(), func(o *host.Options) {
				o.AutoResume = tc.auto
				if tc.leave {
					o.Agent.OnInterrupted = host.ActionLeave
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			run, err := b.Session(id).Start(ctx, "again", host.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.noWait {
				hosttest.WaitLedger(t, store, id, 10*time.Second, "both messages answered", func(evs []ledger.Event) bool {
					return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0
				})
			} else {
				res, err := run.Wait(ctx)
				if err != nil || res.Status != ledger.RunCompleted || res.Text != "You said: again" {
					t.Fatalf("Start then Wait: %+v %v", res, err)
				}
			}
			evs := hosttest.WaitLedger(t, store, id, 10*time.Second, "the session settled", hosttest.Settled)
			tr := ledger.ProjectSession(id, evs)
			if got := itemsOf(tr); strings.Join(got, "\n") != strings.Join(tc.items, "\n") {
				t.Fatalf("transcript:\n%s\nwant:\n%s\nledger: %s", strings.Join(got, "\n"), strings.Join(tc.items, "\n"), kinds(evs))
			}
			dead, _ := ledger.ProjectRun(evs, deadID)
			if !dead.Ended || dead.Status != tc.deadStatus {
				t.Errorf("the dead run: ended %v, status %s (%s)", dead.Ended, dead.Status, dead.Reason)
			}
			if tc.deadStatus == ledger.RunCompleted && tr.Items[1].ID != deadResp {
				t.Errorf("the dead run's answer went into item %s, not the one it minted, %s", tr.Items[1].ID, deadResp)
			}
			if n := hosttest.CountKind(evs, ledger.KindResumeAttempt); (tc.deadStatus == ledger.RunCompleted && n != 1) || (tc.leave && n != 0) {
				t.Errorf("%d resume attempts: %s", n, kinds(evs))
			}
			// Nothing more happens: no run answers anything twice.
			time.Sleep(3 * mhLeaseTTL)
			if later := hosttest.Load(t, store, id); len(later) != len(evs) {
				t.Errorf("the ledger grew after the session settled: %s, then %s", kinds(evs), kinds(later))
			}
		})
	}
}

// TestRetriedSendToAnotherHost: a send retried with its RequestID (its
// first answer was lost on the way) through a host that does not lead the
// session is not queued again: both handles name the one message, which
// the leader answers once.
func TestRetriedSendToAnotherHost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1})
	store := mhOpen(t, srv.URL())
	a := mhHost(t, mhOpen(t, srv.URL()), "host-a", model.URL())
	b := mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := a.Session("r").Start(ctx, mhWords("w", 100), host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStreaming(t, ctx, run)
	first, err := b.Session("r").Start(ctx, "once", host.StartOptions{RequestID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Session("r").Start(ctx, "once", host.StartOptions{RequestID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	if again.MessageID() != first.MessageID() {
		t.Errorf("the retry is message %s, the first %s", again.MessageID(), first.MessageID())
	}
	res, err := again.Wait(ctx)
	if err != nil || res.Text != "You said: once" {
		t.Fatalf("the retry's answer: %+v %v", res, err)
	}
	evs := hosttest.WaitLedger(t, store, "r", 10*time.Second, "the session settled", hosttest.Settled)
	n := 0
	for _, e := range evs {
		if e.Input != nil && e.Input.RequestID == "req-1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the message is in the ledger %d times: %s", n, kinds(evs))
	}
}

// failingResumes is a memory store that fails the first n appends that
// record a resume attempt, as a storage failing over would: refusing them,
// or (landed) keeping them and failing all the same, as an append whose
// reply was lost, or that no replica acknowledged, does.
type failingResumes struct {
	*memory.Store
	n      atomic.Int32
	landed bool
}

func (f *failingResumes) Append(ctx context.Context, id string, events ...ledger.Event) error {
	for _, e := range events {
		if e.ResumeAttempt != nil && f.n.Add(-1) >= 0 {
			if f.landed {
				f.Store.Append(ctx, id, events...)
			}
			return errors.New("storage failing over")
		}
	}
	return f.Store.Append(ctx, id, events...)
}

// TestSendWhileResumeFails: a message finds the session's last run
// interrupted, and resuming it fails (the storage fails over). The message
// never supersedes the dead run for that: a resume that fails is tried
// again, and the dead run is answered first; when every try fails, the
// message is refused (nothing appended), and a later one resumes it. And
// failures to record a resume attempt do not use up the run's attempts
// (AutoResume.MaxAttempts, 3), though their records may have landed.
func TestSendWhileResumeFails(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fails  int32
		landed bool
	}{{1, false}, {3, false}, {5, true}} {
		fails := tc.fails
		t.Run(fmt.Sprintf("%d-failures-landed-%v", fails, tc.landed), func(t *testing.T) {
			store := &failingResumes{Store: memory.New(), landed: tc.landed}
			dead := ledger.NewID("run")
			msg := ledger.NewID("msg")
			now := time.Now().UTC()
			if err := store.Store.Append(ctx, "s",
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: dead,
					Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("first")}}},
				ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: dead,
					RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: ledger.NewID("resp"), Agent: "default", MaxSteps: host.DefaultMaxSteps}}); err != nil {
				t.Fatal(err)
			}
			store.n.Store(fails)
			hs := hosttest.New(t, host.Options{Storage: store})
			res, err := hs.Host.Session("s").Send(ctx, "again", host.SendOptions{})
			if fails >= 3 {
				if err == nil {
					t.Fatalf("a send while every resume fails: %+v, want an error", res)
				}
				if evs := hs.Events("s"); hosttest.CountKind(evs, ledger.KindInput) != 1 {
					t.Fatalf("the refused send appended its message: %s", kinds(evs))
				}
				res, err = hs.Host.Session("s").Send(ctx, "again", host.SendOptions{})
			}
			if err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("send: %+v %v", res, err)
			}
			if tc.landed {
				view, _ := ledger.ProjectRun(hs.Events("s"), dead)
				if view.ResumeAttempts != 1 {
					t.Errorf("the run counts %d resume attempts, want 1: %s", view.ResumeAttempts, kinds(hs.Events("s")))
				}
			}
			got := itemsOf(ledger.ProjectSession("s", hs.Events("s")))
			want := []string{"user::first", "response:completed:You said: first", "user::again", "response:completed:You said: again"}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("transcript:\n%s\nwant:\n%s\nledger: %s", strings.Join(got, "\n"), strings.Join(want, "\n"), kinds(hs.Events("s")))
			}
		})
	}
}

// TestDecideWhileAnotherHostHoldsTheLease: a decision reaches a host while
// another holds the parked session's lease for a moment (it queues a
// message, or looks for one it follows): the decision waits for the lease
// rather than fail, and continues the run.
func TestDecideWhileAnotherHostHoldsTheLease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{})
	store := mhOpen(t, srv.URL())
	var published atomic.Int64
	withTools := func(o *host.Options) {
		o.Agent.Tools = []host.Tool{publishTool(&published)}
		o.ApprovalSecret = approvalSecret
	}
	a := mhHost(t, mhOpen(t, srv.URL()), "host-a", model.URL(), withTools)
	b := mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL(), withTools)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.Session("p").Send(ctx, "publish title=hello", host.SendOptions{})
	if err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := store.AcquireLease(ctx, "p", "other-host", mhLeaseTTL); err != nil {
		t.Fatal(err)
	}
	run, err := b.Session("p").Decide(ctx, res.Approvals[0].ApprovalID, host.ApprovalDecision{Approve: true})
	if err != nil {
		t.Fatalf("a decision while another host held the lease: %v", err)
	}
	if end, err := run.Wait(ctx); err != nil || end.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("the continued run: %+v %v, published %d", end, err, published.Load())
	}
}

// TestDecideOnAnotherHostBeforeThePark: on Redis, a decision reaches host
// B while host A's run still works after recording the request (a later
// call of the pass runs). B waits for the lease A's run holds, and once
// the run parks the decision counts and B continues the run.
func TestDecideOnAnotherHostBeforeThePark(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var published atomic.Int64
	slow, entered, release := blockingTool()
	m := hosttest.NewModel(hosttest.Reply{ToolCalls: publishThenSlow})
	opts := func(o *host.Options) {
		o.Model = m
		o.Agent.Tools = []host.Tool{publishTool(&published), slow}
		o.ApprovalSecret = approvalSecret
		o.LeaseTTL = 3 * time.Second // B waits up to one and a half: the park must come within it on a loaded machine
	}
	a := mhHost(t, mhOpen(t, srv.URL()), "host-a", "", opts)
	b := mhHost(t, mhOpen(t, srv.URL()), "host-b", "", opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := a.Session("p").Start(ctx, "publish it", host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	inbox, err := b.PendingApprovals(ctx)
	if err != nil || len(inbox) != 1 {
		t.Fatalf("host B's inbox while A's pass runs: %+v, %v", inbox, err)
	}
	id := inbox[0].ApprovalID

	// While A's run works, B's decision waits, and records nothing.
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = b.Session("p").Decide(short, id, host.ApprovalDecision{Approve: true})
	stop()
	if !errors.Is(err, host.ErrLeadElsewhere) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision on B while A's run works: %v, want it to wait for the lease", err)
	}
	events, err := mhOpen(t, srv.URL()).Load(ctx, "p")
	if err != nil || hosttest.CountKind(events, ledger.KindApprovalDecision) != 0 {
		t.Fatalf("a decision that gave up recorded one: %s, %v", hosttest.Kinds(events), err)
	}

	type decided struct {
		run *host.Run
		err error
	}
	done := make(chan decided, 1)
	go func() {
		r, err := b.Session("p").Decide(ctx, id, host.ApprovalDecision{Approve: true})
		done <- decided{r, err}
	}()
	close(release)
	if res, err := first.Wait(ctx); err != nil || res.Status != ledger.RunApprovalRequired {
		t.Fatalf("A's run before the decision: %+v, %v", res, err)
	}
	d := <-done
	if d.err != nil {
		t.Fatalf("the decision on B: %v", d.err)
	}
	if end, err := d.run.Wait(ctx); err != nil || end.Status != ledger.RunCompleted || published.Load() != 1 {
		t.Fatalf("the continued run: %+v %v, published %d", end, err, published.Load())
	}
}

// TestResumeAttemptsAcrossHosts: on a store with leases, a resume attempt
// made less than a lease ttl ago crashed no process (its host gave the
// lease back: a host that dies holds it a whole ttl), so the next host
// tries under the same number; one older than that counts.
func TestResumeAttemptsAcrossHosts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{})
	const ttl = 5 * time.Second // host B's: "recent" stays recent on a loaded machine
	for _, tc := range []struct {
		name string
		ago  time.Duration
		want int
	}{
		{"recent", 0, 1},
		{"old", 2 * ttl, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "attempts-" + tc.name
			store := mhOpen(t, srv.URL())
			runID, _ := deadRun(t, store, id, "first")
			ctx := context.Background()
			// Another host takes the session once the dead host's lease
			// lapsed, records an attempt, and gives the lease back.
			var lease storage.Lease
			var err error
			for deadline := time.Now().Add(5 * mhLeaseTTL); lease == nil; time.Sleep(10 * time.Millisecond) {
				if lease, err = store.AcquireLease(ctx, id, "other-host", mhLeaseTTL); err != nil && time.Now().After(deadline) {
					t.Fatal(err)
				}
			}
			if err := lease.Append(ctx, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindResumeAttempt, Time: time.Now().Add(-tc.ago).UTC(), RunID: runID,
				ResumeAttempt: &ledger.ResumeAttempt{Attempt: 1, Host: "other-host"}}); err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b := mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL(), func(o *host.Options) { o.LeaseTTL = ttl })
			res, err := b.Session(id).Send(ctx, "again", host.SendOptions{})
			if err != nil || res.Status != ledger.RunCompleted {
				t.Fatalf("%+v %v", res, err)
			}
			view, _ := ledger.ProjectRun(hosttest.Load(t, store, id), runID)
			if view.ResumeAttempts != tc.want {
				t.Errorf("the run counts %d attempts, want %d", view.ResumeAttempts, tc.want)
			}
		})
	}
}

// TestResumeHoldsBackPastFailedAttempts: resume attempts that went nowhere
// (their runs stopped on the storage) are no progress of the dead run: a
// message queued between two of them is still held back from the pass
// that makes again the one the run died in.
func TestResumeHoldsBackPastFailedAttempts(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	dead, msg := ledger.NewID("run"), ledger.NewID("msg")
	now := time.Now().UTC()
	attempt := func() ledger.Event {
		return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindResumeAttempt, Time: now, RunID: dead,
			ResumeAttempt: &ledger.ResumeAttempt{Attempt: 1, Host: "other"}}
	}
	for _, batch := range [][]ledger.Event{
		{{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: dead, Input: &ledger.Input{MessageID: msg, Parts: []ledger.Part{ledger.TextPart("first")}}},
			{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: dead,
				RunStart: &ledger.RunStart{Inputs: []string{msg}, ResponseID: ledger.NewID("resp"), Agent: "default", MaxSteps: host.DefaultMaxSteps}}},
		{attempt()},
		{{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: []ledger.Part{ledger.TextPart("again")}}}},
		{attempt()},
	} {
		if err := store.Append(ctx, "s", batch...); err != nil {
			t.Fatal(err)
		}
	}
	hs := hosttest.New(t, host.Options{Storage: store})
	if _, err := hs.Host.Resume(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	got := itemsOf(ledger.ProjectSession("s", hs.Events("s")))
	want := []string{"user::first", "response:completed:You said: first", "user::again", "response:completed:You said: again"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("transcript:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
