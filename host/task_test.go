package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

const taskPokeText = "You have not finished the task: call submit_deliverable with the deliverable, or cancel_task if it cannot be done."

// titleSchema is the deliverable of most task tests.
var titleSchema = json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","minLength":3},"count":{"type":"integer"}},"required":["title","count"],"additionalProperties":false}`)

func submit(args string) fakemodel.Reply {
	return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: args}}}
}

// toolMessages returns the texts of the tool results a request carried.
func toolMessages(req fakemodel.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out = append(out, m.Text)
		}
	}
	return out
}

func sessionIDs(t *testing.T, s storage.Storage) []string {
	t.Helper()
	ids, err := s.(storage.Lister).ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestTaskInvalidSubmissionIsFixed(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		submit(`{"title":"a"}`),
		submit(`{"title":"Hello","count":2}`),
	}}, host.Agent{})
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Write a title.",
		Deliverable: host.Deliverable{Name: "headline", Schema: titleSchema}})
	if out.Status != host.OutcomeSubmitted || out.Reason != "" {
		t.Fatalf("outcome = %+v", out)
	}
	var v struct {
		Title string `json:"title"`
		Count int    `json:"count"`
	}
	if err := json.Unmarshal(out.Value, &v); err != nil || v.Title != "Hello" || v.Count != 2 {
		t.Fatalf("value %s (%v)", out.Value, err)
	}
	reqs := hs.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	// The first request offers both task tools and tells the model how to
	// end the task.
	var names []string
	for _, tool := range reqs[0].Tools {
		names = append(names, tool.Name)
		if tool.Name == host.SubmitToolName && string(tool.Parameters) != string(titleSchema) {
			t.Errorf("submit parameters = %s, want the schema as is", tool.Parameters)
		}
	}
	if !slices.Equal(names, []string{host.SubmitToolName, host.CancelToolName}) {
		t.Errorf("tools = %v", names)
	}
	if sys := reqs[0].Messages[0]; sys.Role != "system" || !strings.Contains(sys.Text, "headline") {
		t.Errorf("first message = %+v, want the task's system note", sys)
	}
	// The model saw what was wrong, as path: message lines.
	results := toolMessages(reqs[1])
	if len(results) != 1 {
		t.Fatalf("tool results seen = %q", results)
	}
	for _, want := range []string{"the deliverable is invalid", "/: missing property 'count'", "/title: minLength: got 1, want 3"} {
		if !strings.Contains(results[0], want) {
			t.Errorf("tool result %q lacks %q", results[0], want)
		}
	}
	evs := hs.events(out.SessionID)
	if got, want := kinds(evs), "input run-start step tool-result step tool-result run-end"; got != want {
		t.Errorf("ledger = %q, want %q", got, want)
	}
	if end := evs[len(evs)-1].RunEnd; end.Status != ledger.RunCompleted || evs[len(evs)-1].RunID != out.RunID {
		t.Errorf("run end = %+v", end)
	}
	if !strings.HasPrefix(out.SessionID, "task-") {
		t.Errorf("session id %q, want task-…", out.SessionID)
	}
}

func TestTaskPokedThenSubmits(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		{Text: "Here is your title: Hello."},
		submit(`{"title":"Hello","count":1}`),
	}}, host.Agent{})
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Write a title.", SessionID: "poked",
		Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"Hello","count":1}` || out.SessionID != "poked" {
		t.Fatalf("outcome = %+v (value %s)", out, out.Value)
	}
	evs := hs.events("poked")
	if got, want := kinds(evs), "input run-start step poke step tool-result run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if p := evs[3].Poke; p.Text != taskPokeText {
		t.Errorf("poke = %q", p.Text)
	}
	reqs := hs.model.Requests()
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.Role != "user" || last.Text != taskPokeText {
		t.Errorf("second request ends with %+v, want the poke", last)
	}
	// The transcript does not show the poke.
	tr := ledger.ProjectSession("poked", evs)
	for _, it := range tr.Items {
		if strings.Contains(it.Text, "have not finished") {
			t.Errorf("transcript shows the poke: %+v", it)
		}
	}
	if len(tr.Items) != 3 || tr.Items[0].Kind != ledger.ItemUser {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

func TestTaskOutcomes(t *testing.T) {
	text := func(s string) fakemodel.Reply { return fakemodel.Reply{Text: s} }
	for _, tc := range []struct {
		name     string
		script   []fakemodel.Reply
		maxPokes int
		status   host.OutcomeStatus
		reason   string // a part of the outcome's reason
		requests int
		runEnd   ledger.RunStatus
	}{
		{name: "cancel_task", script: []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{{Name: "cancel_task", Arguments: `{"reason":"no data to work from"}`}}}},
			status: host.OutcomeCancelled, reason: "no data to work from", requests: 1, runEnd: ledger.RunCancelled},
		{name: "cancel_task without a reason, then with one", script: []fakemodel.Reply{
			{ToolCalls: []fakemodel.ToolCall{{Name: "cancel_task", Arguments: `{"reason":" "}`}}},
			{ToolCalls: []fakemodel.ToolCall{{Name: "cancel_task", Arguments: `{"reason":"cannot"}`}}}},
			status: host.OutcomeCancelled, reason: "cannot", requests: 2, runEnd: ledger.RunCancelled},
		{name: "pokes exhausted", script: []fakemodel.Reply{text("a"), text("b"), text("c")}, maxPokes: 2,
			status: host.OutcomeFailed, reason: "the model stopped 3 times without submitting", requests: 3, runEnd: ledger.RunFailed},
		{name: "pokes disabled", script: []fakemodel.Reply{text("a")}, maxPokes: -1,
			status: host.OutcomeFailed, reason: "the model stopped 1 time without submitting", requests: 1, runEnd: ledger.RunFailed},
		{name: "fatal 402", script: []fakemodel.Reply{{Fault: &fakemodel.Fault{Kind: fakemodel.FaultNoCredits}}},
			status: host.OutcomeFailed, reason: "402", requests: 1, runEnd: ledger.RunFailed},
		{name: "submit wins over a later cancel", script: []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{
			{Name: "submit_deliverable", Arguments: `{"title":"Fine","count":3}`}, {Name: "cancel_task", Arguments: `{"reason":"x"}`}}}},
			status: host.OutcomeSubmitted, requests: 1, runEnd: ledger.RunCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakemodel.Options{Script: tc.script}, host.Agent{})
			out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Do it.", MaxPokes: tc.maxPokes,
				Deliverable: host.Deliverable{Schema: titleSchema}})
			if out.Status != tc.status || !strings.Contains(out.Reason, tc.reason) {
				t.Fatalf("outcome = %+v, want %s with reason containing %q", out, tc.status, tc.reason)
			}
			if n := hs.model.RequestCount(); n != tc.requests {
				t.Errorf("%d model requests, want %d", n, tc.requests)
			}
			evs := hs.events(out.SessionID)
			if end := evs[len(evs)-1].RunEnd; end == nil || end.Status != tc.runEnd {
				t.Errorf("last event = %+v, want run-end %s", evs[len(evs)-1], tc.runEnd)
			}
		})
	}
}

func TestTaskContextDone(t *testing.T) {
	t.Run("before the task", func(t *testing.T) {
		hs := newHarness(t, fakemodel.Options{}, host.Agent{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out := hs.host.Task(ctx, host.TaskSpec{Prompt: "submit_deliverable title=Hello", Deliverable: host.Deliverable{Schema: titleSchema}})
		if out.Status != host.OutcomeCancelled || out.Reason == "" {
			t.Errorf("outcome = %+v", out)
		}
		if n := hs.model.RequestCount(); n != 0 {
			t.Errorf("%d model requests", n)
		}
	})
	t.Run("during a tool call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stop := host.NewTool(host.ToolSpec{Name: "stop"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			cancel()
			return host.ToolResult{Output: "ok"}, nil
		})
		hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{{ToolCalls: []fakemodel.ToolCall{{Name: "stop"}}}}},
			host.Agent{Tools: []host.Tool{stop}})
		out := hs.host.Task(ctx, host.TaskSpec{Prompt: "Go.", Deliverable: host.Deliverable{Schema: titleSchema}})
		if out.Status != host.OutcomeCancelled || out.Reason != "cancelled by the caller" {
			t.Errorf("outcome = %+v", out)
		}
		evs := hs.events(out.SessionID)
		if end := evs[len(evs)-1].RunEnd; end == nil || end.Status != ledger.RunCancelled {
			t.Errorf("ledger = %s", kinds(evs))
		}
	})
}

func TestTaskDurability(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			hs := newHarness(t, fakemodel.Options{}, host.Agent{})
			out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "submit_deliverable title=Hello count=4",
				Ephemeral: !durable, Deliverable: host.Deliverable{Schema: titleSchema}})
			if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"count":4,"title":"Hello"}` {
				t.Fatalf("outcome = %+v (value %s)", out, out.Value)
			}
			if out.RunID == "" || out.Usage.TotalTokens == 0 {
				t.Errorf("outcome lacks run id or usage: %+v", out)
			}
			ids := sessionIDs(t, hs.store)
			if durable {
				if !slices.Equal(ids, []string{out.SessionID}) {
					t.Errorf("sessions in storage = %v, want [%s]", ids, out.SessionID)
				}
				u, err := hs.host.Session(out.SessionID).Usage(context.Background())
				if err != nil || u.Total != out.Usage || len(u.Runs) != 1 || u.Runs[0].RunID != out.RunID {
					t.Errorf("session usage = %+v, %v; outcome %+v", u, err, out)
				}
			} else if len(ids) != 0 {
				t.Errorf("an ephemeral task left sessions %v in storage", ids)
			}
		})
	}
}

func TestTaskNonObjectSchemaIsWrapped(t *testing.T) {
	schema := json.RawMessage(`{"type":"array","items":{"$ref":"#/$defs/tag"},"minItems":1,"$defs":{"tag":{"type":"string","pattern":"^#"}}}`)
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{
		submit(`{"tags":["#go"]}`),
		submit(`{"value":["go"]}`),
		submit(`{"value":["#go","#wasm"]}`),
	}}, host.Agent{})
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Tag it.", Deliverable: host.Deliverable{Schema: schema}})
	if out.Status != host.OutcomeSubmitted || string(out.Value) != `["#go","#wasm"]` {
		t.Fatalf("outcome = %+v (value %s)", out, out.Value)
	}
	reqs := hs.model.Requests()
	var params map[string]json.RawMessage
	if err := json.Unmarshal(reqs[0].Tools[0].Parameters, &params); err != nil {
		t.Fatal(err)
	}
	if string(params["type"]) != `"object"` || string(params["required"]) != `["value"]` || params["$defs"] == nil ||
		!strings.Contains(string(params["properties"]), `"value":{`) || strings.Contains(string(params["properties"]), `"$defs":`) {
		t.Errorf("wrapped parameters = %s", reqs[0].Tools[0].Parameters)
	}
	if got := toolMessages(reqs[1]); len(got) != 1 || !strings.Contains(got[0], "/value: missing") {
		t.Errorf("first result = %q", got)
	}
	if got := toolMessages(reqs[2]); len(got) != 2 || !strings.Contains(got[1], "/value/0: ") || !strings.Contains(got[1], "does not match pattern") {
		t.Errorf("second result = %q", got)
	}
}

func TestTaskInvalidSpecFailsFast(t *testing.T) {
	clash := host.NewTool(host.ToolSpec{Name: "cancel_task"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{}, nil
	})
	for _, tc := range []struct {
		name   string
		spec   host.TaskSpec
		reason string
	}{
		{"schema does not compile", host.TaskSpec{Prompt: "x", Deliverable: host.Deliverable{Schema: json.RawMessage(`{"type":"nope"}`)}}, "does not compile"},
		{"schema is not JSON", host.TaskSpec{Prompt: "x", Deliverable: host.Deliverable{Schema: json.RawMessage(`{"type":`)}}, "not valid JSON"},
		{"external reference", host.TaskSpec{Prompt: "x", Deliverable: host.Deliverable{Schema: json.RawMessage(`{"$ref":"file:///etc/passwd"}`)}}, "external references are not supported"},
		{"no schema", host.TaskSpec{Prompt: "x"}, "Deliverable.Schema is required"},
		{"no prompt", host.TaskSpec{Deliverable: host.Deliverable{Schema: titleSchema}}, "Prompt is required"},
		{"bad session id", host.TaskSpec{Prompt: "x", SessionID: "../x", Deliverable: host.Deliverable{Schema: titleSchema}}, "not a valid session id"},
		{"bad max pokes", host.TaskSpec{Prompt: "x", MaxPokes: -2, Deliverable: host.Deliverable{Schema: titleSchema}}, "MaxPokes"},
		{"tool name taken", host.TaskSpec{Prompt: "x", Agent: &host.Agent{Model: "m", Tools: []host.Tool{clash}},
			Deliverable: host.Deliverable{Schema: titleSchema}}, "tool named cancel_task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakemodel.Options{}, host.Agent{})
			out := hs.host.Task(context.Background(), tc.spec)
			if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, tc.reason) {
				t.Errorf("outcome = %+v, want failed with %q", out, tc.reason)
			}
			if n := hs.model.RequestCount(); n != 0 {
				t.Errorf("%d model requests, want none", n)
			}
			if ids := sessionIDs(t, hs.store); len(ids) != 0 {
				t.Errorf("sessions written: %v", ids)
			}
		})
	}
}

// flakyValidator fails (or panics) on its first call, then accepts anything
// as {"ok":true}.
type flakyValidator struct {
	calls atomic.Int32
	panic bool
}

func (v *flakyValidator) Validate(_ context.Context, d json.RawMessage) (json.RawMessage, []string, error) {
	if v.calls.Add(1) == 1 {
		if v.panic {
			panic("boom")
		}
		return nil, nil, errors.New("plugin unavailable")
	}
	return json.RawMessage(`{"ok":true}`), nil, nil
}

func TestTaskValidatorFailureLetsTheModelRetry(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panic=", panics), func(t *testing.T) {
			hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{submit(`{"value":1}`), submit(`{"value":2}`)}}, host.Agent{})
			v := &flakyValidator{panic: panics}
			out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "x", Validator: v})
			if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"ok":true}` {
				t.Fatalf("outcome = %+v (value %s)", out, out.Value)
			}
			got := toolMessages(hs.model.Requests()[1])
			if len(got) != 1 || !strings.Contains(got[0], "could not be validated") {
				t.Errorf("tool result = %q", got)
			}
		})
	}
}

func TestTaskOnClosedHost(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	hs.host.Close(context.Background())
	for _, durable := range []bool{false, true} {
		out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "x", Ephemeral: !durable, Deliverable: host.Deliverable{Schema: titleSchema}})
		if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, "closed") {
			t.Errorf("durable=%v: outcome = %+v", durable, out)
		}
	}
}

// TestHostCancelReachesEphemeralTask: IsRunning sees the run of an
// ephemeral task by its id, Host.Cancel stops it, as it stops any other
// run of the host, and nothing of the task reaches the host's storage.
func TestHostCancelReachesEphemeralTask(t *testing.T) {
	long := strings.Repeat("slow ", 400)
	hs := newHarness(t, fakemodel.Options{Latency: 2 * time.Millisecond, Script: []fakemodel.Reply{{Text: long}}}, host.Agent{})
	done := make(chan host.Outcome, 1)
	go func() {
		done <- hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Write a title.", SessionID: "ephemeral", Ephemeral: true,
			Deliverable: host.Deliverable{Schema: titleSchema}})
	}()
	var out host.Outcome
	cancelled := false
wait:
	for !cancelled {
		select {
		case out = <-done:
			break wait
		case <-time.After(time.Millisecond):
			if hs.host.IsRunning("ephemeral") {
				cancelled = hs.host.Cancel("ephemeral", "stop the task")
			}
		}
	}
	if !cancelled {
		t.Fatalf("the task ended (%+v) without IsRunning seeing its run, or Host.Cancel reaching it", out)
	}
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled task did not end")
	}
	if out.Status != host.OutcomeCancelled || out.Reason != "stop the task" || out.SessionID != "ephemeral" {
		t.Errorf("outcome = %+v", out)
	}
	if ids := sessionIDs(t, hs.store); len(ids) != 0 {
		t.Errorf("an ephemeral task left sessions %v in storage", ids)
	}
	if hs.host.IsRunning("ephemeral") {
		t.Error("IsRunning after the task ended")
	}
}

func TestTaskPanicIsRecovered(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	bad := panicToolset{}
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "x", Agent: &host.Agent{Model: "m", Toolsets: []host.Toolset{bad}},
		Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeFailed || !strings.Contains(out.Reason, "panic") {
		t.Errorf("outcome = %+v", out)
	}
	// The host still works.
	if out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "submit_deliverable title=Again count=1",
		Deliverable: host.Deliverable{Schema: titleSchema}}); out.Status != host.OutcomeSubmitted {
		t.Errorf("next task: %+v", out)
	}
}

type panicToolset struct{}

func (panicToolset) Tools() []host.Tool { panic("toolset exploded") }

// TestTasksAreDurableByDefault: a task that says nothing of its durability
// keeps its session in the host's storage, where its outcome can be read
// again.
func TestTasksAreDurableByDefault(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{}, host.Agent{})
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "submit_deliverable title=Hello", SessionID: "kept",
		Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeSubmitted {
		t.Fatalf("%+v", out)
	}
	again, ok, err := hs.host.Session("kept").TaskOutcome(context.Background(), "")
	if err != nil || !ok || again.Status != host.OutcomeSubmitted || string(again.Value) != string(out.Value) {
		t.Fatalf("the outcome read from the storage: %+v %v %v", again, ok, err)
	}
}

// TestTaskParts: a task's prompt may carry parts (TaskSpec.Parts): an image
// reaches the model with the prompt, byte for byte, through the wire
// format, and the task's deliverable is validated as any.
func TestTaskParts(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nnot really an image")
	hs := newHarness(t, fakemodel.Options{Script: []fakemodel.Reply{submit(`{"title":"A cat","count":1}`)}}, host.Agent{})
	out := hs.host.Task(context.Background(), host.TaskSpec{Prompt: "Title this picture.", SessionID: "pic",
		Parts:       []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Data: png}},
		Deliverable: host.Deliverable{Schema: titleSchema}})
	if out.Status != host.OutcomeSubmitted || string(out.Value) != `{"title":"A cat","count":1}` {
		t.Fatalf("outcome = %+v", out)
	}
	reqs := hs.model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	var user *fakemodel.Message
	for i, m := range reqs[0].Messages {
		if m.Role == "user" {
			user = &reqs[0].Messages[i]
		}
	}
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	if user == nil || !strings.Contains(user.Text, "Title this picture.") ||
		!slices.ContainsFunc(user.Parts, func(p fakemodel.Part) bool { return p.Type == "image_url" && p.ImageURL == want }) {
		t.Fatalf("the model's user message: %+v", user)
	}
}
