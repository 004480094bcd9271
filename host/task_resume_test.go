package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// crashingTask runs a durable task (session spec.SessionID, default
// "task-crash") on a host whose store "dies" after n appends, and returns
// the store as the crash left it and the model. finished is the outcome
// when the task ended within n appends.
func crashingTask(t *testing.T, n int32, script []fakemodel.Reply, spec host.TaskSpec, mutate ...func(*host.Options)) (base *memory.Store, model *fakemodel.Server, finished *host.Outcome) {
	t.Helper()
	base = memory.New()
	crash := &crashAfter{Storage: base}
	crash.n.Store(n)
	hs := newHarness(t, fakemodel.Options{Script: script}, host.Agent{}, append(mutate, func(o *host.Options) { o.Storage = crash })...)
	if spec.SessionID == "" {
		spec.SessionID = "task-crash"
	}
	if out := hs.host.Task(context.Background(), spec); out.Status == host.OutcomeSubmitted {
		return base, hs.model, &out
	}
	return base, hs.model, nil
}

// nextHost is a fresh host over the crashed store: the process after.
func nextHost(t *testing.T, base *memory.Store, model *fakemodel.Server, mutate ...func(*host.Options)) *host.Host {
	t.Helper()
	opts := host.Options{Model: mustClient(t, model), Agent: withModel(host.Agent{})}
	for _, m := range mutate {
		m(&opts)
	}
	opts.Storage = base
	return hosttest.New(t, opts).Host
}

// crashTask crashes a task (see crashingTask), resumes its run on the next
// host, and returns the outcome read from the ledger; crashed is false when
// the task finished within n appends.
func crashTask(t *testing.T, n int32, script []fakemodel.Reply, spec host.TaskSpec, mutate ...func(*host.Options)) (out host.Outcome, crashed bool, events []ledger.Event) {
	t.Helper()
	base, model, finished := crashingTask(t, n, script, spec, mutate...)
	if finished != nil {
		return *finished, false, nil
	}
	h2 := nextHost(t, base, model, mutate...)
	if _, err := h2.Resume(context.Background(), "task-crash"); err != nil {
		t.Fatalf("Resume after %d appends: %v", n, err)
	}
	out, ok, err := h2.Session("task-crash").TaskOutcome(context.Background(), "")
	if err != nil || !ok {
		t.Fatalf("TaskOutcome after %d appends: %+v, %v, %v", n, out, ok, err)
	}
	events, _ = base.Load(context.Background(), "task-crash")
	return out, true, events
}

// TestTaskResumedAfterCrash: a durable task whose process dies after any
// number of appends is resumed as the task it is: the model gets the task
// tools again, an invalid submission is still rejected, an accepted one
// stands, and the outcome (read from the ledger) is the one an
// uninterrupted task gets.
func TestTaskResumedAfterCrash(t *testing.T) {
	script := []fakemodel.Reply{
		submit(`{"title":"a"}`),
		submit(`{"title":"Fixed","count":2}`),
		submit(`{"title":"Fixed","count":2}`),
		submit(`{"title":"Fixed","count":2}`),
	}
	spec := host.TaskSpec{Prompt: "Write a title.", Deliverable: host.Deliverable{Name: "headline", Schema: titleSchema}}

	// Uninterrupted: the run-start records the task, the run-end the
	// deliverable, and the ledger tells the outcome Task returned.
	hs := newHarness(t, fakemodel.Options{Script: script}, host.Agent{})
	s := spec
	direct := hs.host.Task(context.Background(), s)
	evs := hs.events(direct.SessionID)
	if rs := evs[1].RunStart; rs == nil || rs.Task == nil || rs.Task.Deliverable != "headline" || string(rs.Task.Schema) != string(titleSchema) || rs.Task.MaxPokes != 3 {
		t.Fatalf("run-start = %+v", evs[1].RunStart)
	}
	fromLedger, ok, err := hs.host.Session(direct.SessionID).TaskOutcome(context.Background(), direct.RunID)
	if err != nil || !ok || fromLedger.Status != direct.Status || string(fromLedger.Value) != string(direct.Value) || fromLedger.Usage != direct.Usage {
		t.Fatalf("outcome from the ledger %+v (%v, %v), Task returned %+v", fromLedger, ok, err, direct)
	}

	crashes := 0
	for n := int32(1); ; n++ {
		out, crashed, events := crashTask(t, n, script, spec)
		if !crashed {
			break
		}
		crashes++
		if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Fixed","count":2}` {
			t.Fatalf("crash after %d appends: outcome %+v (value %s)", n, out, out.Value)
		}
		runs := 0
		for _, e := range events {
			if e.RunStart != nil {
				runs++
			}
			if r := e.ToolResult; r != nil && strings.Contains(r.Output, "unknown tool") {
				t.Errorf("crash after %d appends: the resumed run lacked the task tools: %q", n, r.Output)
			}
		}
		if runs != 1 {
			t.Errorf("crash after %d appends: %d runs, want the one resumed", n, runs)
		}
	}
	if crashes < 4 {
		t.Fatalf("only %d crash points exercised", crashes)
	}
}

// TestTaskResumeAnsweredMakesNoCall: a task whose process died after its
// accepted submission was answered (the tool result recorded, the run's
// end not) is resumed without another model call: the submission stands
// and the run ends with it.
func TestTaskResumeAnsweredMakesNoCall(t *testing.T) {
	script := []fakemodel.Reply{submit(`{"title":"Fixed","count":2}`), submit(`{"title":"Other","count":3}`)}
	spec := host.TaskSpec{Prompt: "Write a title.", Deliverable: host.Deliverable{Name: "headline", Schema: titleSchema}}
	answered := 0
	for n := int32(1); ; n++ {
		base, model, finished := crashingTask(t, n, script, spec)
		if finished != nil {
			break
		}
		events, _ := base.Load(context.Background(), "task-crash")
		accepted := false
		for _, e := range events {
			if r := e.ToolResult; r != nil && r.Name == "submit_deliverable" && !r.IsError {
				accepted = true
			}
		}
		if !accepted {
			continue
		}
		answered++
		asked := model.RequestCount()
		h2 := nextHost(t, base, model)
		if _, err := h2.Resume(context.Background(), "task-crash"); err != nil {
			t.Fatalf("Resume after %d appends: %v", n, err)
		}
		out, ok, err := h2.Session("task-crash").TaskOutcome(context.Background(), "")
		if err != nil || !ok || out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Fixed","count":2}` {
			t.Fatalf("after %d appends: %+v %v %v, want the answered submission", n, out, ok, err)
		}
		if more := model.RequestCount() - asked; more != 0 {
			t.Errorf("after %d appends (the submission answered): the resumed run called the model %d times, want none", n, more)
		}
	}
	if answered == 0 {
		t.Fatal("no crash point fell between the answered submission and the run's end")
	}
}

// TestTaskResumeKeepsPokes: pokes spent before the crash stay spent.
func TestTaskResumeKeepsPokes(t *testing.T) {
	script := []fakemodel.Reply{{Text: "thinking"}, {Text: "still thinking"}, {Text: "thinking again"}, submit(`{"title":"Late","count":1}`)}
	spec := host.TaskSpec{Prompt: "Write a title.", MaxPokes: 1, Deliverable: host.Deliverable{Schema: titleSchema}}
	// input + run-start, then the first pass with its poke: crash before
	// the second pass is recorded.
	out, crashed, events := crashTask(t, 2, script, spec)
	if !crashed {
		t.Fatal("no crash")
	}
	pokes := 0
	for _, e := range events {
		if e.Poke != nil {
			pokes++
		}
	}
	if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, "stopped") || pokes != 1 {
		t.Fatalf("outcome %+v with %d pokes; want failed after the one poke allowed", out, pokes)
	}
}

// lengthValidator accepts titles of at most max bytes.
type lengthValidator struct{ max int }

func (v lengthValidator) Validate(_ context.Context, d json.RawMessage) (json.RawMessage, []string, error) {
	var in struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal(d, &in); err != nil {
		return nil, []string{"/: " + err.Error()}, nil
	}
	if len(in.Title) > v.max {
		return nil, []string{fmt.Sprintf("/title: longer than %d", v.max)}, nil
	}
	return json.RawMessage(fmt.Sprintf(`{"title":%q,"checked":true}`, in.Title)), nil, nil
}

// TestTaskResumeValidator: a named validator is found again on the host
// that resumes; a missing or unnamed one fails the task, saying why.
func TestTaskResumeValidator(t *testing.T) {
	script := []fakemodel.Reply{submit(`{"title":"Far too long a title"}`), submit(`{"title":"Short"}`), submit(`{"title":"Short"}`)}
	with := func(o *host.Options) { o.Validators = map[string]host.Validator{"short": lengthValidator{8}} }
	object := host.Deliverable{Schema: json.RawMessage(`{"type":"object"}`)}
	spec := host.TaskSpec{Prompt: "Write a title.", ValidatorName: "short", Deliverable: object}

	// After the first (rejected) submission is recorded.
	out, crashed, _ := crashTask(t, 4, script, spec, with)
	if !crashed || out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Short","checked":true}` {
		t.Fatalf("with the validator registered: crashed %v, outcome %+v (value %s)", crashed, out, out.Value)
	}

	// The resuming host lacks it.
	base, model, _ := crashingTask(t, 4, script, spec, with)
	h2 := nextHost(t, base, model)
	if _, err := h2.Resume(context.Background(), "task-crash"); err != nil {
		t.Fatal(err)
	}
	out, ok, err := h2.Session("task-crash").TaskOutcome(context.Background(), "")
	if err != nil || !ok || out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, `validator "short" is not in this host's Options.Validators`) {
		t.Fatalf("without the validator: %+v, %v, %v", out, ok, err)
	}

	// A validator given without a name cannot be found again.
	spec = host.TaskSpec{Prompt: "Write a title.", Validator: lengthValidator{8}, Deliverable: object}
	out, crashed, _ = crashTask(t, 4, script, spec)
	if !crashed || out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, "has no name") {
		t.Fatalf("unnamed validator: crashed %v, outcome %+v", crashed, out)
	}
}

// TestTaskRestartedFromScratch: a task run restarted rather than resumed
// (ResumeAction restart) is a new run of the same task: it records the
// task, starts with nothing accepted, and its outcome is the task's.
func TestTaskRestartedFromScratch(t *testing.T) {
	script := []fakemodel.Reply{submit(`{"title":"First","count":1}`), submit(`{"title":"Second","count":2}`)}
	// Input and run-start, the pass, its accepted result: no run-end.
	base, model, _ := crashingTask(t, 3, script, host.TaskSpec{Prompt: "Write a title.", SessionID: "task-r",
		Deliverable: host.Deliverable{Schema: titleSchema}})
	h2 := nextHost(t, base, model)
	res, err := h2.Session("task-r").Resume(context.Background(), host.ResumeOptions{Action: host.ActionRestart})
	if err != nil {
		t.Fatal(err)
	}
	out, ok, err := h2.Session("task-r").TaskOutcome(context.Background(), "")
	if err != nil || !ok || out.RunID != res.RunID || out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Second","count":2}` {
		t.Fatalf("outcome %+v (%v, %v), restarted run %s", out, ok, err, res.RunID)
	}
	evs, _ := base.Load(context.Background(), "task-r")
	starts := 0
	for _, e := range evs {
		if e.RunStart != nil {
			starts++
			if e.RunStart.Task == nil {
				t.Errorf("run %s does not record the task", e.RunID)
			}
		}
	}
	if starts != 2 {
		t.Errorf("%d runs, want the dead one and its restart", starts)
	}
}

// TestTaskAutoResumed: the boot sweep resumes a task's run as the task, and
// tells its OnInterrupted hook which task the run works on.
func TestTaskAutoResumed(t *testing.T) {
	script := []fakemodel.Reply{submit(`{"title":"a"}`), submit(`{"title":"Swept","count":5}`), submit(`{"title":"Swept","count":5}`)}
	base, model, _ := crashingTask(t, 3, script, host.TaskSpec{Prompt: "Write a title.",
		Deliverable: host.Deliverable{Name: "headline", Schema: titleSchema}})
	var seen atomic.Pointer[ledger.TaskRun]
	h := nextHost(t, base, model, func(o *host.Options) {
		o.AutoResume = &host.AutoResume{OnInterrupted: func(_ context.Context, ir host.Interrupted) (host.ResumeAction, error) {
			seen.Store(ir.Task)
			return host.ActionResume, nil
		}}
	})
	<-h.SweepDone()
	if task := seen.Load(); task == nil || task.Deliverable != "headline" {
		t.Fatalf("OnInterrupted saw task %+v", task)
	}
	out, ok, err := h.Session("task-crash").TaskOutcome(context.Background(), "")
	if err != nil || !ok || out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Swept","count":5}` {
		t.Fatalf("outcome %+v, %v, %v", out, ok, err)
	}
}
