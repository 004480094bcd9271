package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// Every source of runs is admitted as a message of the API is: these tests
// send work through the sources that are not requests (schedules,
// delegates, evaluations) and check that the tenant's bounds hold.

// dailySchedules returns n schedules at 08:00 UTC, the i-th into session
// "sched-i", each text "stall i" (stallModel holds their runs).
func dailySchedules(n int) []server.ScheduleConfig {
	var list []server.ScheduleConfig
	for i := range n {
		list = append(list, server.ScheduleConfig{ID: fmt.Sprintf("s%d", i), Session: fmt.Sprintf("sched-%d", i), Cron: "0 8 * * *", Text: fmt.Sprintf("stall %d", i)})
	}
	return list
}

// outcomes counts the outcomes of acme's schedules' last occurrences, and
// returns the reasons of the refused ones.
func (ts *testServer) outcomes(t *testing.T) (map[string]int, []string) {
	t.Helper()
	code, body := ts.do(t, ts.acme, "GET", "/v1/schedules", "")
	if code != 200 {
		t.Fatalf("GET /v1/schedules: %d %s", code, body)
	}
	l := decodeJSON[struct {
		Schedules []struct {
			Last *struct{ Outcome, Reason string }
		}
	}](t, body)
	n := map[string]int{}
	var reasons []string
	for _, s := range l.Schedules {
		if s.Last == nil {
			n["none"]++
			continue
		}
		n[s.Last.Outcome]++
		if s.Last.Reason != "" {
			reasons = append(reasons, s.Last.Reason)
		}
	}
	return n, reasons
}

// TestSchedulesAdmitted: a tenant's schedules pass the admission of its
// messages. Six schedules due at once, with rate_limit.concurrent_runs 2,
// start two runs; the four others are asked again while on time, and once
// past it are recorded refused, naming the bound — where the schedules
// used to start every run at once, past every bound.
func TestSchedulesAdmitted(t *testing.T) {
	c := newSchedClock(t, "2026-12-03T07:59:50Z")
	store := memory.New()
	setup := withSchedules(c, store, nil, dailySchedules(6)...)
	mutate := setup.Mutate
	setup.Mutate = func(cfg *server.Config) {
		mutate(cfg)
		withTenant("acme", func(tc *server.TenantConfig) { tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 2} })(cfg)
	}
	ts := startServer(t, setup)
	stallModel(ts.model)
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	c.set(t, "2026-12-03T08:00:01Z")
	running := func() int {
		n := 0
		for i := range 6 {
			if len(inputsOf(t, store, "acme", fmt.Sprintf("sched-%d", i))) > 0 {
				n++
			}
		}
		return n
	}
	waitFor(t, "two occurrences sent", func() bool { return running() >= 2 })
	// Every schedule is gone over once more while the two runs stall.
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	if n := running(); n != 2 {
		t.Fatalf("%d sessions got their occurrence with rate_limit.concurrent_runs 2, want 2", n)
	}
	// Past the minute an occurrence is on time for: refused, with why.
	c.set(t, "2026-12-03T08:01:30Z")
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	n, reasons := ts.outcomes(t)
	if n["sent"] != 2 || n["refused"] != 4 {
		t.Fatalf("outcomes %v, want 2 sent and 4 refused", n)
	}
	for _, r := range reasons {
		if !strings.Contains(r, "rate_limit.concurrent_runs") {
			t.Errorf("a refusal says %q, want it to name rate_limit.concurrent_runs", r)
		}
	}
	if n := running(); n != 2 {
		t.Errorf("%d sessions got their occurrence, want 2", n)
	}
	for i := range 6 {
		ts.do(t, ts.acme, "POST", fmt.Sprintf("/v1/sessions/sched-%d/cancel", i), "")
	}
}

// TestSchedulesRateLimited: a schedule's occurrence takes a token of the
// tenant's rate limit, as a request does: with a burst of 1 and no time
// for the bucket to refill, one of three occurrences due at once is sent.
func TestSchedulesRateLimited(t *testing.T) {
	c := newSchedClock(t, "2026-12-03T07:59:50Z")
	store := memory.New()
	setup := withSchedules(c, store, nil, dailySchedules(3)...)
	mutate := setup.Mutate
	setup.Mutate = func(cfg *server.Config) {
		mutate(cfg)
		withTenant("acme", func(tc *server.TenantConfig) {
			tc.RateLimit = server.RateLimitConfig{RequestsPerSecond: 0.0001, Burst: 1}
		})(cfg)
	}
	ts := startServer(t, setup)
	ts.model.Respond = func(req model.Request) hosttest.Reply { return hosttest.Reply{Text: "ok"} }
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	c.set(t, "2026-12-03T08:01:30Z") // late: a refusal is final
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	// (GET /v1/schedules would take a token too: the ledgers and the
	// records of the storage tell.)
	sent, refused := 0, 0
	for i := range 3 {
		if len(inputsOf(t, store, "acme", fmt.Sprintf("sched-%d", i))) > 0 {
			sent++
		}
		b, ok, err := store.Get(t.Context(), "acme:schedules:fired", fmt.Sprintf("s%d", i))
		if err != nil || !ok {
			t.Fatalf("schedule s%d's record: %v %v", i, ok, err)
		}
		if strings.Contains(string(b), `"refused"`) {
			refused++
			if !strings.Contains(string(b), "rate_limit.requests_per_second") {
				t.Errorf("a refusal says %s, want it to name the rate limit", b)
			}
		}
	}
	if sent != 1 || refused != 2 {
		t.Fatalf("%d sent and %d refused, want 1 and 2", sent, refused)
	}
}

// TestScheduleBounds: a schedule's text and a tenant's number of schedules
// are bounded, through the API (400, 409) and in the configuration.
func TestScheduleBounds(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(cfg *server.Config) { cfg.MaxSchedules = 2 }})
	long := strings.Repeat("x", server.DefaultMaxScheduleTextBytes+1)
	post := func(id, text string) (int, string) {
		return ts.do(t, ts.acme, "POST", "/v1/schedules", fmt.Sprintf(`{"id":%q,"session":"s","cron":"0 8 * * *","text":%q}`, id, text))
	}
	if code, body := post("big", long); code != 400 || !strings.Contains(body, "max_schedule_text_bytes") {
		t.Errorf("a text of %d bytes: %d %.200s, want 400 naming max_schedule_text_bytes", len(long), code, body)
	}
	for _, id := range []string{"a", "b"} {
		if code, body := post(id, "hello"); code != 201 {
			t.Fatalf("schedule %s: %d %s", id, code, body)
		}
	}
	if code, body := post("c", "hello"); code != 409 || !strings.Contains(body, "max_schedules") {
		t.Errorf("a third schedule: %d %s, want 409 naming max_schedules", code, body)
	}
	if code, body := post("a", "hello again"); code != 200 {
		t.Errorf("replacing one at the bound: %d %s, want 200", code, body)
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/schedules", `{"id":"c","session":"s","cron":"0 8 * * *","text":"hi"}`); code != 201 {
		t.Errorf("another tenant's: %d %s, want 201 (the bound is per tenant)", code, body)
	}

	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Models: []string{hosttest.DefaultModel}, Schedules: []server.ScheduleConfig{
		{ID: "big", Session: "s", Cron: "0 8 * * *", Text: long}}}}}
	if _, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()}); err == nil || !strings.Contains(err.Error(), "max_schedule_text_bytes") {
		t.Errorf("a configuration's long text: %v, want an error naming max_schedule_text_bytes", err)
	}
}

// delegating gives acme a default agent that delegates to "helper" as
// many times at once as its model is told.
func delegating(tc *server.TenantConfig) {
	tc.Agents = map[string]server.AgentConfig{
		"default": {Model: "test/parent", DelegateTo: []string{"helper"}},
		"helper":  {Model: "test/helper", Description: "Helps."},
	}
	tc.Models = nil
}

// delegateModel answers test/parent's first pass with n calls to helper,
// and every later pass, and helper's, with the tool results it read.
func delegateModel(n int) func(req model.Request) hosttest.Reply {
	return func(req model.Request) hosttest.Reply {
		var results []string
		for _, m := range req.Messages {
			if m.Role == ledger.RoleTool {
				results = append(results, m.Text())
			}
		}
		if req.Model == "test/parent" && len(results) == 0 {
			var calls []hosttest.ToolCall
			for i := range n {
				calls = append(calls, hosttest.ToolCall{Name: "helper", Arguments: fmt.Sprintf(`{"task":"part %d"}`, i)})
			}
			return hosttest.Reply{ToolCalls: calls}
		}
		return hosttest.Reply{Text: "read: " + strings.Join(results, " | ")}
	}
}

// TestDelegatesAdmitted: a delegate call's child run is admitted as a
// message of the API is. With rate_limit.concurrent_runs 1 the parent's
// run holds the one place: its child is refused, nothing starts, and the
// parent's model reads why. Within the bound, delegation.max_per_run
// bounds the children of a run.
func TestDelegatesAdmitted(t *testing.T) {
	t.Run("concurrent runs", func(t *testing.T) {
		store := memory.New()
		ts := startServer(t, serverSetup{Store: store, Mutate: withTenant("acme", func(tc *server.TenantConfig) {
			delegating(tc)
			tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1}
		})})
		ts.model.Respond = delegateModel(1)
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/p/messages?wait=true", `{"text":"go"}`)
		if code != 200 || !strings.Contains(body, "rate_limit.concurrent_runs") {
			t.Fatalf("the parent: %d %.400s, want its answer to have read the refusal naming rate_limit.concurrent_runs", code, body)
		}
		if evs := hosttest.Load(t, store, "acme:p.call_1"); len(evs) != 0 {
			t.Errorf("the refused child's session holds %d events", len(evs))
		}
	})
	t.Run("max per run", func(t *testing.T) {
		store := memory.New()
		ts := startServer(t, serverSetup{Store: store, Mutate: withTenant("acme", func(tc *server.TenantConfig) {
			delegating(tc)
			tc.Delegation = server.DelegationConfig{MaxPerRun: 2}
		})})
		ts.model.Respond = delegateModel(5)
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/p/messages?wait=true", `{"text":"go"}`)
		if code != 200 || strings.Count(body, "max_per_run)") != 3 {
			t.Fatalf("the parent: %d %.600s, want 3 of its 5 calls refused naming max_per_run", code, body)
		}
		ids, err := store.ListSessions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ids); n != 3 {
			t.Errorf("sessions %v, want the parent's and two children", ids)
		}
	})
}

// TestEvalBudget: an evaluation spends from a budget — the tenant's, or
// its own (eval_budget_usd_per_day) — which stops its model calls as it
// stops a run's (each turn past it fails, saying why) and refuses the
// next evaluation (402); evaluations used to spend past every budget.
func TestEvalBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*server.TenantConfig)
		setting string
	}{
		{"the tenant's", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 }, "daily budget"},
		{"its own", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 100; tc.EvalBudgetUSDPerDay = 1 }, "eval_budget_usd_per_day"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, serverSetup{Mutate: withTenant("acme", tc.mutate)})
			for i := range 4 {
				if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", fmt.Sprintf(`{"text":"turn %d"}`, i)); code != 200 {
					t.Fatalf("source: %d %s", code, body)
				}
			}
			// Each of the candidate's calls costs $0.60.
			ts.model.Respond = func(req model.Request) hosttest.Reply { return costing(hosttest.Reply{Text: "candidate"}, 0.6) }
			code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"]}`)
			if code != 200 {
				t.Fatalf("eval: %d %s", code, body)
			}
			rep := decodeJSON[eval.Report](t, body)
			// The first call reserves all that is left; the second what is
			// left then, and passes it by one call's worth; the others
			// do not run.
			if c := rep.Total.Candidate.Cost; c > 1.2+1e-9 {
				t.Errorf("the evaluation spent $%.2f against a $1 budget, want at most $1.20 (one call past it)", c)
			}
			stopped := 0
			for _, turn := range rep.Sessions[0].Turns {
				if strings.Contains(turn.CandidateReason, "budget_exceeded") {
					stopped++
					if !strings.Contains(turn.CandidateReason, tc.setting) {
						t.Errorf("a turn stopped for %q, want it to name the %s", turn.CandidateReason, tc.setting)
					}
				}
			}
			if stopped != 2 {
				t.Errorf("%d turns stopped by the budget, want 2: %.600s", stopped, body)
			}
			if code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"]}`); code != 402 || !strings.Contains(body, tc.setting) {
				t.Errorf("an evaluation past the budget: %d %.300s, want 402 naming the %s", code, body, tc.setting)
			}
			// Its own budget spends nothing of the tenant's.
			code, _ = ts.do(t, ts.acme, "POST", "/v1/sessions/other/messages", `{"text":"hi"}`)
			if want := map[bool]int{true: 202, false: 402}[tc.setting == "eval_budget_usd_per_day"]; code != want {
				t.Errorf("a message after the evaluation: %d, want %d", code, want)
			}
		})
	}
}

// TestMetricsNeedKeyOffLoopback: /metrics names the tenants, so without
// metrics_key it is served only when the server listens on a loopback
// address (403 naming metrics_key otherwise, where it used to be open to
// anyone); with the key, it takes the key wherever it listens.
func TestMetricsNeedKeyOffLoopback(t *testing.T) {
	for _, c := range []struct {
		listen, key string
		want        int
	}{
		{"127.0.0.1:8080", "", 200},
		{"[::1]:8080", "", 200},
		{"localhost:8080", "", 200},
		{"0.0.0.0:8080", "", 403},
		{":8080", "", 403},
		{"[::]:8080", "", 403},
		{"agent.example:8080", "", 403},
		{"0.0.0.0:8080", "mk_secret", 401},
	} {
		t.Run(c.listen+"/"+c.key, func(t *testing.T) {
			ts := startServer(t, serverSetup{Mutate: func(cfg *server.Config) { cfg.Listen, cfg.MetricsKey = c.listen, c.key }})
			code, body := ts.do(t, "", "GET", "/metrics", "")
			if code != c.want {
				t.Fatalf("GET /metrics: %d %.200s, want %d", code, body, c.want)
			}
			if code == 403 && !strings.Contains(body, "metrics_key") {
				t.Errorf("the refusal %s does not name metrics_key", body)
			}
			if c.key != "" {
				if code, body := ts.do(t, c.key, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, "# HELP") {
					t.Errorf("with the key: %d %.200s", code, body)
				}
			}
		})
	}
}

// TestPluginUploadsBoundedAtOnce: the process reads max_plugin_uploads
// module uploads at once, every tenant's together: another tenant's
// upload meanwhile is refused with 429 and Retry-After before its body
// is read (each used to be read whole, at once, whatever their number).
// Once the first is done, the next goes through.
func TestPluginUploadsBoundedAtOnce(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var calls atomic.Int32
	ts := startServer(t, serverSetup{Mutate: func(cfg *server.Config) { cfg.MaxPluginUploads = 1 },
		Prepare: func(s *server.Server) {
			server.SetUploadHook(s, func() {
				if calls.Add(1) == 1 { // the first upload holds its places until released
					entered <- struct{}{}
					<-release
				}
			})
		}})
	defer free()
	wasm := getAccount(t)
	first := make(chan int, 1)
	go func() {
		code, _ := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", wasm)
		first <- code
	}()
	<-entered // acme's upload holds the process's one place
	code, header, body := ts.doHeader(t, ts.beta, "PUT", "/v1/plugins/accounts", string(wasm), "Content-Type", "application/wasm")
	if code != 429 || header.Get("Retry-After") != "1" || !strings.Contains(body, "max_plugin_uploads") {
		t.Errorf("another tenant's upload meanwhile: %d %q %s, want 429 naming max_plugin_uploads", code, header.Get("Retry-After"), body)
	}
	free()
	if code := <-first; code != 201 {
		t.Fatalf("the first upload: %d", code)
	}
	if code, body := ts.doBytes(t, ts.beta, "PUT", "/v1/plugins/accounts", wasm); code != 201 {
		t.Errorf("once it is done: %d %s", code, body)
	}
}

// TestPluginMultipartBounded: a multipart upload is read part by part,
// each bounded as it arrives: a module part past max_plugin_bytes is
// refused 413 naming it, as is a body past the bound with no declared
// length; a signature past its bound 400.
func TestPluginMultipartBounded(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(cfg *server.Config) { cfg.MaxPluginBytes = 64 << 10 }})
	for _, c := range []struct {
		name        string
		module, sig int
		chunked     bool
		code        int
		want        string
	}{
		{"module too large", 64<<10 + 1, 0, false, 413, "max_plugin_bytes"},
		{"module too large, no length", 64<<10 + 1, 0, true, 413, "max_plugin_bytes"},
		{"body too large, no length", 200 << 10, 0, true, 413, "max_plugin_bytes"},
		{"signature too large", 100, 17 << 10, false, 400, "signature is over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			part, _ := mw.CreateFormFile("module", "m.wasm")
			part.Write(bytes.Repeat([]byte{1}, c.module))
			if c.sig > 0 {
				part, _ = mw.CreateFormFile("signature", "m.wasm.minisig")
				part.Write(bytes.Repeat([]byte{'a'}, c.sig))
			}
			mw.Close()
			var r io.Reader = &body
			if c.chunked {
				r = io.MultiReader(&body) // no length: sent chunked
			}
			req, err := http.NewRequest("PUT", ts.URL+"/v1/plugins/m", r)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+ts.acme)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != c.code || !strings.Contains(string(b), c.want) {
				t.Errorf("%d %s, want %d naming %q", res.StatusCode, b, c.code, c.want)
			}
		})
	}
}

// TestSchedulesAdmittedSecondRound: inputs the first tests lack. An
// occurrence past the tenant's budget is refused at once, while still on
// time (waiting does not bring a budget back); one into a session whose
// run is in flight joins that run, whatever rate_limit.concurrent_runs
// says, as a message of the API does.
func TestSchedulesAdmittedSecondRound(t *testing.T) {
	t.Run("budget", func(t *testing.T) {
		c := newSchedClock(t, "2026-12-03T07:59:50Z")
		store := memory.New()
		setup := withSchedules(c, store, nil, dailySchedules(1)...)
		mutate := setup.Mutate
		setup.Mutate = func(cfg *server.Config) {
			mutate(cfg)
			withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 0.5 })(cfg)
		}
		ts := startServer(t, setup)
		ts.model.Enqueue(costing(hosttest.Reply{Text: "dear"}, 1))
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/x/messages?wait=true", `{"text":"spend"}`); code != 200 {
			t.Fatalf("spending the budget: %d %s", code, body)
		}
		if err := server.TickSchedules(ts.srv); err != nil {
			t.Fatal(err)
		}
		c.set(t, "2026-12-03T08:00:01Z") // on time
		if err := server.TickSchedules(ts.srv); err != nil {
			t.Fatal(err)
		}
		n, reasons := ts.outcomes(t)
		if n["refused"] != 1 || len(reasons) != 1 || !strings.Contains(reasons[0], "budget_exceeded") {
			t.Errorf("outcomes %v %q, want one refused for the budget", n, reasons)
		}
		if ids := inputsOf(t, store, "acme", "sched-0"); len(ids) != 0 {
			t.Errorf("the session got %v", ids)
		}
	})
	t.Run("joins a run in flight", func(t *testing.T) {
		c := newSchedClock(t, "2026-12-03T07:59:50Z")
		store := memory.New()
		setup := withSchedules(c, store, nil, server.ScheduleConfig{ID: "j", Session: "busy", Cron: "0 8 * * *", Text: "and this"})
		mutate := setup.Mutate
		setup.Mutate = func(cfg *server.Config) {
			mutate(cfg)
			withTenant("acme", func(tc *server.TenantConfig) { tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1} })(cfg)
		}
		ts := startServer(t, setup)
		stallModel(ts.model)
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall"}`); code != 202 {
			t.Fatalf("the run: %d %s", code, body)
		}
		ts.waitState(t, ts.acme, "busy", "running")
		if err := server.TickSchedules(ts.srv); err != nil {
			t.Fatal(err)
		}
		c.set(t, "2026-12-03T08:00:01Z")
		if err := server.TickSchedules(ts.srv); err != nil {
			t.Fatal(err)
		}
		if n, _ := ts.outcomes(t); n["sent"] != 1 {
			t.Errorf("outcomes %v, want the occurrence sent into the run in flight", n)
		}
		if ids := inputsOf(t, store, "acme", "busy"); len(ids) != 2 {
			t.Errorf("the session's messages %v, want the run's and the occurrence's", ids)
		}
		ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", "")
	})
}

// TestAdmitRun: Server.AdmitRun, the admission of runs no request starts
// (an imported run resumed), refuses as the API does, with the status,
// code and words it would answer: 429 past concurrent_runs (retryable),
// 402 past the budget, 404 for a tenant the server does not serve.
func TestAdmitRun(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1}
		tc.BudgetUSDPerDay = 0.5
	})})
	stallModel(ts.model)
	ctx := t.Context()
	release, err := ts.srv.AdmitRun(ctx, "acme", "imported")
	if err != nil {
		t.Fatal(err)
	}
	var ae *server.AdmitError
	if _, err := ts.srv.AdmitRun(ctx, "acme", "another"); !errors.As(err, &ae) || ae.Status != 429 || !ae.Retryable() || !strings.Contains(ae.Message, "concurrent_runs") {
		t.Errorf("a second run while the first is admitted: %v, want a retryable 429", err)
	}
	if code, _ := ts.do(t, ts.acme, "POST", "/v1/sessions/x/messages", `{"text":"hi"}`); code != 429 {
		t.Errorf("a message while an admitted run holds the place: %d, want 429", code)
	}
	release()
	ts.model.Respond = nil
	ts.model.Enqueue(costing(hosttest.Reply{Text: "dear"}, 1))
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/x/messages?wait=true", `{"text":"spend"}`); code != 200 {
		t.Fatalf("spending the budget: %d %s", code, body)
	}
	if _, err := ts.srv.AdmitRun(ctx, "acme", "imported"); !errors.As(err, &ae) || ae.Status != 402 || ae.Retryable() {
		t.Errorf("past the budget: %v, want a 402 that does not pass by itself", err)
	}
	if _, err := ts.srv.AdmitRun(ctx, "nope", "imported"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("an unknown tenant: %v, want 404", err)
	}
}

// TestEvalsAtOnceHoldTheBudget: evaluations sent at once spend from one
// budget, reserved before each call: together they pass it by no more
// than one call's worth, as runs at once do.
func TestEvalsAtOnceHoldTheBudget(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 })})
	for i := range 3 {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", fmt.Sprintf(`{"text":"turn %d"}`, i)); code != 200 {
			t.Fatalf("source: %d %s", code, body)
		}
	}
	ts.model.Respond = func(req model.Request) hosttest.Reply { return costing(hosttest.Reply{Text: "candidate"}, 0.6) }
	var wg sync.WaitGroup
	var mu sync.Mutex
	spent := 0.0
	for range 3 {
		wg.Go(func() {
			code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"]}`)
			if code == 402 {
				return // admitted after the budget was spent
			}
			if code != 200 {
				t.Errorf("eval: %d %.300s", code, body)
				return
			}
			rep := decodeJSON[eval.Report](t, body)
			mu.Lock()
			spent += rep.Total.Candidate.Cost
			mu.Unlock()
		})
	}
	wg.Wait()
	if spent > 1.2+1e-9 {
		t.Errorf("three evaluations at once spent $%.2f against a $1 budget, want at most $1.20", spent)
	}
}

// TestScheduleKeptTextBounded: a schedule kept in the storage before the
// bound on texts (or under a higher one) does not send its text past it:
// its occurrence is refused, naming max_schedule_text_bytes.
func TestScheduleKeptTextBounded(t *testing.T) {
	c := newSchedClock(t, "2026-12-03T07:59:50Z")
	store := memory.New()
	long := strings.Repeat("x", server.DefaultMaxScheduleTextBytes+1)
	def := fmt.Sprintf(`{"id":"old","session":"s","cron":"0 8 * * *","text":%q}`, long)
	if err := store.Set(t.Context(), "acme:schedules:defs", "old", []byte(def)); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, withSchedules(c, store, nil))
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	c.set(t, "2026-12-03T08:00:01Z")
	if err := server.TickSchedules(ts.srv); err != nil {
		t.Fatal(err)
	}
	n, reasons := ts.outcomes(t)
	if n["refused"] != 1 || len(reasons) != 1 || !strings.Contains(reasons[0], "max_schedule_text_bytes") {
		t.Errorf("outcomes %v %q, want the kept schedule refused for its text", n, reasons)
	}
	if ids := inputsOf(t, store, "acme", "s"); len(ids) != 0 {
		t.Errorf("the session got %v", ids)
	}
}

// TestAdmitRateTokenLast: a run admitted by a source other than a request
// takes a token of the tenant's rate limit last, once every other bound
// let it through: a run refused for concurrent_runs spends none.
func TestAdmitRateTokenLast(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		// Two tokens, and none more for the test's life.
		tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1, RequestsPerSecond: 0.0001, Burst: 2}
	})})
	ctx := t.Context()
	release, err := ts.srv.AdmitRun(ctx, "acme", "first")
	if err != nil {
		t.Fatal(err)
	}
	var ae *server.AdmitError
	for range 3 {
		if _, err := ts.srv.AdmitRun(ctx, "acme", "refused"); !errors.As(err, &ae) || !strings.Contains(ae.Message, "concurrent_runs") {
			t.Fatalf("a run while the first holds the place: %v, want refused for concurrent_runs", err)
		}
	}
	release()
	release, err = ts.srv.AdmitRun(ctx, "acme", "second")
	if err != nil {
		t.Fatalf("the second token, after three refusals for another bound: %v", err)
	}
	release()
	if _, err := ts.srv.AdmitRun(ctx, "acme", "third"); !errors.As(err, &ae) || ae.Code != "rate_limited" || !strings.Contains(ae.Message, "an import run counts as a request") {
		t.Errorf("a third run with two tokens spent: %v, want rate_limited", err)
	}
}

// TestParkedRunsHoldNoPlace: a run parked for a person's approval holds no
// place of the tenant's concurrent_runs: with one place, another session's
// run is admitted while it waits (and a run in flight holds the place).
func TestParkedRunsHoldNoPlace(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1}
	})})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/parked/messages?wait=true", `{"text":"publish_post title=t body=b"}`); code != 200 || !strings.Contains(body, "approval_required") {
		t.Fatalf("park: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/other/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("another session's run while one is parked: %d %s, want it admitted", code, body)
	}
	stallModel(ts.model)
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall"}`); code != 202 {
		t.Fatalf("a stalled run: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/third/messages", `{"text":"hello"}`); code != 429 {
		t.Errorf("a run while the stalled one holds the place: %d %s, want 429", code, body)
	}
}
