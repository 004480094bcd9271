package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// lastUser is the text of a request's last user message.
func lastUser(req fakemodel.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Text
		}
	}
	return ""
}

// modelsAsked records the models a fake server was asked, in order.
type modelsAsked struct {
	mu   sync.Mutex
	list []string
}

func (m *modelsAsked) add(s string) {
	m.mu.Lock()
	m.list = append(m.list, s)
	m.mu.Unlock()
}

func (m *modelsAsked) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.list, " ")
}

// TestModelFallback: a pass whose model is not served, or whose transient
// failures outlast the agent's retry policy, goes to the next model at
// once; the ledger says which model was left for which and why, and the
// step which model answered; a bad request never falls back.
func TestModelFallback(t *testing.T) {
	var asked modelsAsked
	fopts := fakemodel.Options{
		Models:       map[string]int{"acme/a": 100000, "acme/b": 100000, "acme/c": 100000},
		StrictModels: true, // "acme/gone" is answered 400 "is not a valid model ID", as OpenRouter does
		Respond: func(req fakemodel.Request) fakemodel.Reply {
			asked.add(req.Model)
			switch {
			case req.Model == "acme/a":
				return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 404,
					Body: []byte(`{"error":{"message":"No endpoints found for acme/a.","code":404}}`)}}
			case req.Model == "acme/b":
				return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultBadGateway}}
			case strings.Contains(lastUser(req), "malformed"):
				return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 400,
					Body: []byte(`{"error":{"message":"messages[1]: a tool result without its call","code":400}}`)}}
			}
			return fakemodel.Reply{Text: "answered by " + req.Model}
		},
	}
	retry := &model.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	hs := newHarness(t, fopts, host.Agent{Model: "acme/gone", Fallback: []string{"acme/a", "acme/b", "acme/c"}, Retry: retry})
	sess := hs.host.Session("fallback")
	var progress []host.Progress
	var pmu sync.Mutex
	onProgress := func(p host.Progress) {
		if p.Type == host.ProgressRetry {
			pmu.Lock()
			progress = append(progress, p)
			pmu.Unlock()
		}
	}

	res, err := sess.Send(context.Background(), "hello", host.SendOptions{OnProgress: onProgress})
	if err != nil || res.Status != ledger.RunCompleted || res.Text != "answered by acme/c" {
		t.Fatalf("Send: %+v %v", res, err)
	}
	// gone (400, not a valid id) → a (404) → b, b (502 twice) → c.
	if got := asked.String(); got != "acme/a acme/b acme/b acme/c" {
		// The strict server refuses acme/gone before Respond is asked.
		t.Errorf("Respond asked for %q", got)
	}
	var reasons []string
	var step *ledger.Step
	for _, e := range hs.events("fallback") {
		if e.Retry != nil {
			reasons = append(reasons, e.Retry.Reason)
		}
		if e.Step != nil {
			step = e.Step
		}
	}
	want := []string{
		"model acme/gone: HTTP 400, the model is not served: ",
		"model acme/a: HTTP 404, the model is not served: ",
		"HTTP 502: ",
		"model acme/b: HTTP 502: ",
	}
	wantTail := []string{
		"; falling back to acme/a (it is not served)",
		"; falling back to acme/b (it is not served)",
		"",
		"; falling back to acme/c (its retries ran out after 2 attempts)",
	}
	if len(reasons) != len(want) {
		t.Fatalf("retries %q, want %d", reasons, len(want))
	}
	for i, r := range reasons {
		if !strings.HasPrefix(r, want[i]) || !strings.HasSuffix(r, wantTail[i]) {
			t.Errorf("retry %d: %q, want %q … %q", i+1, r, want[i], wantTail[i])
		}
	}
	if step == nil || step.Model != "acme/c" {
		t.Errorf("the step says model %q answered, want acme/c", step.Model)
	}
	pmu.Lock()
	var told []string
	for _, p := range progress {
		told = append(told, p.Retry.Model+">"+p.Retry.Fallback)
	}
	pmu.Unlock()
	if got := strings.Join(told, " "); got != "acme/gone>acme/a acme/a>acme/b acme/b> acme/b>acme/c" {
		t.Errorf("progress told %q", got)
	}

	// A bad request is wrong for every model: no fallback.
	asked = modelsAsked{}
	hs2 := newHarness(t, fakemodel.Options{Respond: fopts.Respond}, host.Agent{Model: "acme/c", Fallback: []string{"acme/d"}, Retry: retry})
	res, err = hs2.host.Session("bad").Send(context.Background(), "a malformed one", host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "not retried") {
		t.Fatalf("a bad request: %+v %v", res, err)
	}
	if got := asked.String(); got != "acme/c" {
		t.Errorf("a bad request asked %q, want acme/c alone", got)
	}
	if n := hosttest.CountKind(hs2.events("bad"), ledger.KindRetry); n != 0 {
		t.Errorf("a bad request recorded %d retries", n)
	}
}

// TestModelFallbackSpent: when every model fails, the run fails with the
// last model's error, each model having had its retries.
func TestModelFallbackSpent(t *testing.T) {
	var asked modelsAsked
	hs := newHarness(t, fakemodel.Options{Respond: func(req fakemodel.Request) fakemodel.Reply {
		asked.add(req.Model)
		return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultServerError}}
	}}, host.Agent{Model: "acme/a", Fallback: []string{"acme/b"},
		Retry: &model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	res, err := hs.host.Session("spent").Send(context.Background(), "hello", host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "gave up after 6 attempts") {
		t.Fatalf("Send: %+v %v", res, err)
	}
	if got := asked.String(); got != "acme/a acme/a acme/a acme/b acme/b acme/b" {
		t.Errorf("asked %q", got)
	}
}

// TestAgentRetryPolicy: an agent's own policy, per cause, decides its
// passes' retries instead of the host's: here 429s are retried up to five
// attempts, a 502 not at all.
func TestAgentRetryPolicy(t *testing.T) {
	var asked modelsAsked
	var fail sync.Map // message → how many of its first attempts fail
	hs := newHarness(t, fakemodel.Options{Respond: func(req fakemodel.Request) fakemodel.Reply {
		asked.add(req.Model)
		text := lastUser(req)
		if v, ok := fail.Load(text); ok {
			if left := v.(*atomic.Int32); left.Add(-1) >= 0 {
				kind := fakemodel.FaultBadGateway
				if strings.HasPrefix(text, "429") {
					kind = fakemodel.FaultRateLimit
				}
				return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: kind, RetryAfter: "-"}}
			}
		}
		return fakemodel.Reply{Text: "ok"}
	}}, host.Agent{Model: "acme/a", Retry: &model.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond,
		ByCause: map[model.Cause]model.RetryPolicy{model.CauseRateLimit: {MaxAttempts: 5}}}}, func(o *host.Options) {
		// The host's own policy would retry a 502; the agent's wins.
		o.Retry = model.RetryPolicy{MaxAttempts: 6, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	})
	var four, one atomic.Int32
	four.Store(4)
	one.Store(1)
	fail.Store("429 four times", &four)
	fail.Store("502 once", &one)
	sess := hs.host.Session("policy")
	if res, err := sess.Send(context.Background(), "429 four times", host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("four 429s under a policy of five attempts for them: %+v %v", res, err)
	}
	res, err := sess.Send(context.Background(), "502 once", host.SendOptions{})
	if err != nil || res.Status != ledger.RunFailed || !strings.Contains(res.Reason, "HTTP 502") {
		t.Fatalf("a 502 under a policy of one attempt: %+v %v", res, err)
	}
	if n := hosttest.CountKind(hs.events("policy"), ledger.KindRetry); n != 4 {
		t.Errorf("%d retries recorded, want the four 429s'", n)
	}
}

// TestAgentFallbackValidated: an agent naming a model twice, or an empty
// one, or a retry policy that cannot be, is refused with what is wrong.
func TestAgentFallbackValidated(t *testing.T) {
	for _, tc := range []struct {
		agent host.Agent
		want  string
	}{
		{host.Agent{Model: "a", Fallback: []string{"b", "a"}}, `Agent.Fallback[1]: model "a" is named twice`},
		{host.Agent{Model: "a", Fallback: []string{"b", "b"}}, `Agent.Fallback[1]: model "b" is named twice`},
		{host.Agent{Model: "a", Fallback: []string{""}}, `Agent.Fallback[0] is empty`},
		{host.Agent{Model: "a", Retry: &model.RetryPolicy{Jitter: "lots"}}, `Agent.Retry: Jitter "lots"`},
	} {
		_, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(), Agent: tc.agent})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.agent, err, tc.want)
		}
	}
}

// rememberPastWindow tells the session a secret, sends fillers past a
// small window (so that it compacts), and checks that the secret is
// remembered (rememberingModel answers from its note).
func rememberPastWindow(t *testing.T, sess *host.Session) {
	t.Helper()
	ctx := context.Background()
	if _, err := sess.Send(ctx, "my secret code is OTTER7. "+filler(0), host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		if res, err := sess.Send(ctx, filler(i), host.SendOptions{}); err != nil || res.Status != ledger.RunCompleted {
			t.Fatalf("send %d: %+v %v", i, res, err)
		}
	}
	if res, err := sess.Send(ctx, "what is my secret code?", host.SendOptions{}); err != nil || res.Text != "Your code is OTTER7." {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestCompactionFallsBack: the compaction's summary request falls back as
// a pass does: with the agent's model not served, the note is written by
// the next model, and the session goes on past its window.
func TestCompactionFallsBack(t *testing.T) {
	var compactionsAsked modelsAsked
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/tiny": 700}, Respond: func(req fakemodel.Request) fakemodel.Reply {
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" && strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
			compactionsAsked.add(req.Model)
		}
		if req.Model == "fake/gone" {
			return fakemodel.Reply{Fault: &fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 404,
				Body: []byte(`{"error":{"message":"No endpoints found for fake/gone.","code":404}}`)}}
		}
		return rememberingModel(req)
	}}, host.Agent{Model: "fake/gone", Fallback: []string{"fake/tiny"}}, func(o *host.Options) { o.Compaction = &host.Compaction{KeepRecent: 1, Limit: 1} })
	rememberPastWindow(t, hs.host.Session("cfb"))
	if n := hosttest.CountKind(hs.events("cfb"), ledger.KindCompaction); n == 0 {
		t.Fatal("no compaction")
	}
	// (A summary request that overflows fake/tiny is refused before the
	// fake's Respond sees it, and asked again, shorter, from the first
	// model.)
	if got := compactionsAsked.String(); !strings.HasPrefix(got, "fake/gone ") || !strings.HasSuffix(got, " fake/tiny") {
		t.Errorf("the compaction asked %q, want fake/gone first and the note from fake/tiny", got)
	}
}

// TestAgentExtraBody: an agent's ExtraBody goes into each of its model
// requests, its passes' and its compactions', so that OpenRouter's own
// "models" routing works beside the host's: the endpoint answers with the
// next model inside one request, and each step records the model its
// response names; the fields the host writes itself are refused.
func TestAgentExtraBody(t *testing.T) {
	extra := map[string]any{"models": []string{"fake/tiny"}, "provider": map[string]any{"order": []string{"p1"}}}
	hs := newHarness(t, fakemodel.Options{Models: map[string]int{"fake/tiny": 700}, StrictModels: true, Respond: rememberingModel},
		host.Agent{Model: "fake/gone", ExtraBody: extra}, func(o *host.Options) { o.Compaction = &host.Compaction{KeepRecent: 1, Limit: 1} })
	rememberPastWindow(t, hs.host.Session("extra"))
	compactions := 0
	for i, req := range hs.model.Requests() {
		var body struct {
			Model    string
			Models   []string
			Provider struct{ Order []string }
		}
		if err := json.Unmarshal(req.Raw, &body); err != nil {
			t.Fatal(err)
		}
		if body.Model != "fake/gone" || !slices.Equal(body.Models, []string{"fake/tiny"}) || !slices.Equal(body.Provider.Order, []string{"p1"}) {
			t.Errorf("request %d: %s", i, req.Raw)
		}
		if len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
			compactions++
		}
	}
	if compactions == 0 {
		t.Error("no compaction request was made")
	}
	steps := 0
	for _, e := range hs.events("extra") {
		if e.Retry != nil {
			t.Errorf("a retry recorded: %+v (the endpoint routed within the request)", e.Retry)
		}
		if e.Step != nil {
			steps++
			if e.Step.Model != "fake/tiny" {
				t.Errorf("a step says %q answered, want the routed fake/tiny", e.Step.Model)
			}
		}
	}
	if steps == 0 {
		t.Error("no step")
	}
	for _, k := range []string{"model", "messages", "tools", "stream", "stream_options", "max_tokens", "max_completion_tokens"} {
		_, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(), Agent: host.Agent{Model: "a", ExtraBody: map[string]any{k: 1}}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Agent.ExtraBody[%q]: the host writes that field itself", k)) {
			t.Errorf("ExtraBody[%q]: %v", k, err)
		}
	}
	if _, err := host.New(host.Options{Storage: memory.New(), Model: hosttest.NewModel(), Agent: host.Agent{Model: "a", ExtraBody: map[string]any{"x": func() {}}}}); err == nil || !strings.Contains(err.Error(), `Agent.ExtraBody["x"]: json: unsupported type`) {
		t.Errorf("a value that is no JSON: %v", err)
	}
}
