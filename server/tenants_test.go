package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// withTenant changes tenant name's configuration.
func withTenant(name string, f func(*server.TenantConfig)) func(*server.Config) {
	return func(c *server.Config) {
		tc := c.Tenants[name]
		f(&tc)
		c.Tenants[name] = tc
	}
}

// costing is a reply that reports cost dollars spent.
func costing(r hosttest.Reply, cost float64) hosttest.Reply {
	r.Usage = &ledger.Usage{PromptTokens: 10, CompletionTokens: 10, TotalTokens: 20, Cost: cost}
	return r
}

// TestBudget: a tenant's daily budget is checked before a run starts
// (402), and the run that crosses it finishes the step it is in, then stops
// with budget_exceeded; other tenants are not affected, and a second host
// on the same storage counts the first one's spend.
func TestBudget(t *testing.T) {
	store := memory.New()
	budget := withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 })
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) { budget(c); c.HostID = "host-1" }})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	lookup := func(id string) hosttest.Reply {
		return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"` + id + `"}`}}}
	}
	ts.model.Enqueue(costing(lookup("1"), 0.6), costing(lookup("2"), 0.6), hosttest.Reply{Text: "never said"})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/spend/messages?wait=true", `{"text":"look up two accounts"}`)
	res := decodeJSON[struct {
		Status, Reason string
		Cost           float64
	}](t, body)
	// It ends failed, as a provider's 402 would end it.
	if code != 200 || !strings.Contains(res.Reason, "budget_exceeded: tenant acme spent $1.2000 of its $1.00 daily budget") || res.Status != "failed" {
		t.Fatalf("the run crossing the budget: %d %s, want it stopped with budget_exceeded", code, body)
	}
	if n := ts.model.RequestCount(); n != 2 {
		t.Errorf("the model was called %d times, want 2 (the third pass is past the budget)", n)
	}
	// The crossing step finished: its tool call has its result.
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/spend/transcript", "")
	if strings.Count(body, `"status":"done","output"`) != 2 || strings.Contains(body, "never said") {
		t.Errorf("the transcript: %s, want both steps' calls answered", body)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/spend", "")
	if !strings.Contains(body, `"state":"failed"`) || !strings.Contains(body, "budget_exceeded") {
		t.Errorf("the session: %s", body)
	}

	// No new run starts: the message is refused, and nothing recorded.
	_, before := ts.do(t, ts.acme, "GET", "/v1/sessions/spend/transcript", "")
	for _, c := range []struct{ path, body string }{
		{"/v1/sessions/spend/messages", `{"text":"more"}`},
		{"/v1/sessions/other/messages?wait=true", `{"text":"more"}`},
		{"/v1/tasks", `{"prompt":"x","schema":{"type":"object"}}`},
		{"/v1/ui/chat", `{"id":"ui","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"more"}]}]}`},
	} {
		code, body := ts.do(t, ts.acme, "POST", c.path, c.body)
		if code != 402 || !strings.Contains(body, `"code":"budget_exceeded"`) {
			t.Errorf("POST %s past the budget: %d %s, want 402", c.path, code, body)
		}
	}
	if _, after := ts.do(t, ts.acme, "GET", "/v1/sessions/spend/transcript", ""); after != before {
		t.Errorf("a refused message changed the session:\n%s\n%s", before, after)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/other", ""); code != 404 {
		t.Errorf("a refused message made a session: %d", code)
	}
	if n := ts.model.RequestCount(); n != 2 {
		t.Errorf("the model was called %d times after the budget ran out", n)
	}
	// Beta has no budget.
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/b/messages?wait=true", `{"text":"hi"}`); code != 200 || !strings.Contains(body, `"completed"`) {
		t.Errorf("beta: %d %s", code, body)
	}

	// Another host sharing the storage counts the first one's spend.
	other := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) { budget(c); c.HostID = "host-2" }})
	if code, body := other.do(t, other.acme, "POST", "/v1/sessions/elsewhere/messages", `{"text":"more"}`); code != 402 {
		t.Errorf("the second host: %d %s, want 402", code, body)
	}
}

// TestBudgetAdmitsBelowIt: a run under the budget starts, and its spend
// is what counts: the next run is refused only once it is reached.
func TestBudgetAdmitsBelowIt(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 })})
	ts.model.Enqueue(costing(hosttest.Reply{Text: "one"}, 0.5), costing(hosttest.Reply{Text: "two"}, 0.49), costing(hosttest.Reply{Text: "three"}, 0.2))
	for i, want := range []int{200, 200, 200, 402} {
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"go"}`)
		if code != want {
			t.Fatalf("message %d: %d %s, want %d", i+1, code, body, want)
		}
	}
}

// TestRateLimit: a tenant's requests per second (a token bucket of Burst)
// answer 429 with Retry-After past it, without touching other tenants, and
// requests without a valid key spend nothing of it.
func TestRateLimit(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{RequestsPerSecond: 1, Burst: 2}
	})})
	for range 5 {
		if code, _ := ts.do(t, "ak_wrong", "GET", "/v1/sessions", ""); code != 401 {
			t.Fatalf("a wrong key: %d", code)
		}
	}
	var codes []int
	for range 3 {
		code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions", "")
		codes = append(codes, code)
	}
	if !slices.Equal(codes, []int{200, 200, 429}) {
		t.Errorf("three requests at once: %v, want the third past the burst of 2", codes)
	}
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions", "")
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Errorf("past the limit: %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	for range 5 {
		if code, body := ts.do(t, ts.beta, "GET", "/v1/sessions", ""); code != 200 {
			t.Errorf("beta: %d %s", code, body)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); code != 200 {
		t.Errorf("a second later: %d %s", code, body)
	}
}

// stallModel makes the model think until cancelled when the last user
// message says "stall", and answer as the default agent otherwise.
func stallModel(m *hosttest.Model) {
	m.Respond = func(req model.Request) hosttest.Reply {
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if msg := req.Messages[i]; msg.Role == ledger.RoleUser {
				if strings.Contains(msg.Text(), "stall") {
					return hosttest.Reply{Text: "thinking ", Stall: time.Hour}
				}
				break
			}
		}
		return hosttest.DefaultReply(req)
	}
}

// TestConcurrentRuns: a tenant's bound on runs in flight holds under a
// burst of requests at once; a message to a session whose run is in
// flight joins it, whatever the bound; a run that ends frees its place.
func TestConcurrentRuns(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 2}
	})})
	stallModel(ts.model)
	const burst = 12
	codes := ts.burst(t, burst, func(int) string { return ts.acme })
	var running []string
	for i, c := range codes {
		switch c {
		case 202:
			running = append(running, "s"+string(rune('a'+i)))
		case 429:
		default:
			t.Errorf("message %d: %d", i, c)
		}
	}
	if len(running) != 2 {
		t.Fatalf("a burst of %d: %v, want exactly 2 accepted", burst, codes)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/new/messages", `{"text":"stall"}`); code != 429 || !strings.Contains(body, `"code":"rate_limited"`) {
		t.Errorf("a third run: %d %s, want 429", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/tasks", `{"prompt":"stall","schema":{"type":"object"}}`); code != 429 {
		t.Errorf("a task past the bound: %d %s, want 429", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+running[0]+"/messages", `{"text":"and this"}`); code != 202 {
		t.Errorf("a message joining a run in flight: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/b/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Errorf("beta: %d %s", code, body)
	}
	// (The cancelled run's place is freed; the message that joined the
	// other one is answered by it.)
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+running[1]+"/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, running[1], "cancelled")
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/new/messages?wait=true", `{"text":"quick"}`); code != 200 {
		t.Errorf("once a run ended: %d %s, want its place free", code, body)
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/"+running[0]+"/cancel", "")
}

// burst sends n messages at once, the i-th to session "s"+('a'+i) with
// key(i), and returns their statuses.
func (ts *testServer) burst(t *testing.T, n int, key func(i int) string) []int {
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = ts.do(t, key(i), "POST", "/v1/sessions/s"+string(rune('a'+i))+"/messages", `{"text":"stall"}`)
		}()
	}
	wg.Wait()
	return codes
}

// TestMaxRuns: the process's bound on runs in flight (max_runs) holds over
// every tenant under a burst of requests at once, refusing with 503 and
// Retry-After; a message to a session whose run is in flight joins it; a
// run that ends frees its place.
func TestMaxRuns(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.MaxRuns = 2 }})
	stallModel(ts.model)
	keyOf := func(i int) string { // the two tenants in turn
		if i%2 == 1 {
			return ts.beta
		}
		return ts.acme
	}
	const burst = 12
	codes := ts.burst(t, burst, keyOf)
	var running []int
	for i, c := range codes {
		switch c {
		case 202:
			running = append(running, i)
		case 503:
		default:
			t.Errorf("message %d: %d", i, c)
		}
	}
	if len(running) != 2 {
		t.Fatalf("a burst of %d over two tenants: %v, want exactly 2 accepted", burst, codes)
	}
	if code, h, body := ts.doHeader(t, ts.beta, "POST", "/v1/sessions/new/messages", `{"text":"stall"}`); code != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, `"code":"unavailable"`) || !strings.Contains(body, "max_runs") {
		t.Errorf("a third run: %d (Retry-After %q) %s, want 503 with Retry-After naming max_runs", code, h.Get("Retry-After"), body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/tasks", `{"prompt":"stall","schema":{"type":"object"}}`); code != 503 {
		t.Errorf("a task past the bound: %d %s, want 503", code, body)
	}
	first := "s" + string(rune('a'+running[0]))
	if code, body := ts.do(t, keyOf(running[0]), "POST", "/v1/sessions/"+first+"/messages", `{"text":"and this"}`); code != 202 {
		t.Errorf("a message joining a run in flight: %d %s", code, body)
	}
	second := "s" + string(rune('a'+running[1]))
	if code, body := ts.do(t, keyOf(running[1]), "POST", "/v1/sessions/"+second+"/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	ts.waitState(t, keyOf(running[1]), second, "cancelled")
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/new/messages?wait=true", `{"text":"quick"}`); code != 200 {
		t.Errorf("once a run ended: %d %s, want its place free", code, body)
	}
	ts.do(t, keyOf(running[0]), "POST", "/v1/sessions/"+first+"/cancel", "")
}

// TestPluginsPerTenant: a module PUT for a tenant is hot-loaded for it
// alone (its hash answered), kept across restarts, listed and read; a
// broken module answers 422 and changes nothing; a module offering a tool
// another module offers answers 409 and changes nothing; DELETE removes
// it.
func TestPluginsPerTenant(t *testing.T) {
	dir := t.TempDir()
	wasm := getAccount(t)
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.PluginsDir = dir; c.MaxPluginBytes = int64(len(wasm) + 1024) }})
	sum := sha256.Sum256(wasm)
	hash := "sha256:" + hex.EncodeToString(sum[:])
	acmeTools := func() []string {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/tools/messages?wait=true", `{"text":"which tools now"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		return offeredTools(t, ts.model, "which tools now")
	}
	file := filepath.Join(dir, "acme", "accounts.wasm")

	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", wasm)
	info := decodeJSON[struct {
		Name, Hash string
		Tools      []struct{ Name string }
	}](t, body)
	if code != 201 || info.Name != "accounts" || info.Hash != hash || len(info.Tools) != 1 || info.Tools[0].Name != "get_account" {
		t.Fatalf("PUT: %d %s, want 201 with hash %s", code, body, hash)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != string(wasm) {
		t.Errorf("the module is not kept in %s: %v", file, err)
	}
	if tools := acmeTools(); !slices.Equal(tools, []string{"get_account"}) {
		t.Errorf("acme's agent offers %v, want get_account", tools)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/call/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 || !strings.Contains(body, "The get_account tool returned") {
		t.Errorf("acme calls the tool: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/call/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 || strings.Contains(body, "tool returned") {
		t.Errorf("beta calls acme's tool: %d %s", code, body)
	}
	if tools := offeredTools(t, ts.model, "get_account account_id=42"); len(tools) != 0 {
		t.Errorf("beta's agent offers %v, want no tools", tools)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/plugins", ""); code != 200 || !strings.Contains(body, `"name":"accounts"`) || !strings.Contains(body, hash) {
		t.Errorf("list: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "GET", "/v1/plugins", ""); code != 200 || strings.Contains(body, "accounts") {
		t.Errorf("beta's list: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/plugins/accounts", ""); code != 200 || !strings.Contains(body, hash) {
		t.Errorf("get: %d %s", code, body)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", wasm); code != 200 || !strings.Contains(body, hash) {
		t.Errorf("PUT again: %d %s, want 200", code, body)
	}

	// Refused uploads change nothing.
	unchanged := func(what string) {
		t.Helper()
		code, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
		list := decodeJSON[struct {
			Plugins   []struct{ Name, Hash string }
			Conflicts []string
			Refusals  []any
		}](t, body)
		if code != 200 || len(list.Plugins) != 1 || list.Plugins[0].Name != "accounts" || list.Plugins[0].Hash != hash ||
			len(list.Conflicts) != 0 || !strings.Contains(body, `"refusals":[]`) {
			t.Errorf("after %s: %d %s, want accounts alone, as it was", what, code, body)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != string(wasm) {
			t.Errorf("after %s, the kept module changed: %v", what, err)
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "acme"))
		if len(entries) != 1 {
			t.Errorf("after %s, the plugins directory holds %v", what, entries)
		}
		if tools := acmeTools(); !slices.Equal(tools, []string{"get_account"}) {
			t.Errorf("after %s, acme's agent offers %v", what, tools)
		}
	}
	for _, c := range []struct {
		name, what string
		body       []byte
		code       int
		want       string
	}{
		{"accounts", "a broken module replacing one", []byte("\x00asm\x01\x00\x00\x00garbage"), 422, "refused"},
		{"broken", "a broken new module", []byte("not wasm at all"), 422, "refused"},
		{"empty", "an empty body", nil, 400, "empty"},
		{"accounts2", "a module offering get_account too", wasm, 409, "get_account"},
		{"big", "a module past max_plugin_bytes", append(append([]byte(nil), wasm...), make([]byte, 2048)...), 413, "larger"},
		{".hidden", "a bad name", wasm, 400, "plugin name"},
	} {
		code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/"+c.name, c.body)
		if code != c.code || !strings.Contains(body, c.want) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want %d saying %q", c.what, code, body, c.code, c.want)
		}
		unchanged(c.what)
	}

	// Kept across a restart.
	again := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.PluginsDir = dir }})
	if code, body := again.do(t, again.acme, "GET", "/v1/plugins/accounts", ""); code != 200 || !strings.Contains(body, hash) {
		t.Errorf("after a restart: %d %s", code, body)
	}
	again.Close()

	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/plugins/accounts", ""); code != 204 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the module's file is still there: %v", err)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/plugins/accounts", ""); code != 404 {
		t.Errorf("GET after DELETE: %d", code)
	}
	if code, _ := ts.do(t, ts.acme, "DELETE", "/v1/plugins/accounts", ""); code != 404 {
		t.Errorf("DELETE again: %d", code)
	}
	if tools := acmeTools(); len(tools) != 0 {
		t.Errorf("after DELETE, acme's agent offers %v", tools)
	}
	// The name is free again: the module that conflicted loads.
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts2", wasm); code != 201 {
		t.Errorf("PUT under the other name now: %d %s", code, body)
	}
}

// TestBudgetParallel: 50 runs at once, each model call billing $0.40, under
// a $1.00 budget: the day's spend stays within the budget and one call's
// worth. (Each call reserves what it may cost before it is made: without
// that, all 50 passed the check together and spent $20.)
func TestBudgetParallel(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 })})
	ts.model.Respond = func(model.Request) hosttest.Reply {
		return costing(hosttest.Reply{Text: "answered", Wait: 50 * time.Millisecond}, 0.4)
	}
	var wg sync.WaitGroup
	codes := make([]int, 50)
	for i := range codes {
		wg.Go(func() {
			codes[i], _ = ts.do(t, ts.acme, "POST", fmt.Sprintf("/v1/sessions/p%d/messages?wait=true", i), `{"text":"go"}`)
		})
	}
	wg.Wait()
	_, body := ts.do(t, ts.acme, "GET", "/v1/usage", "")
	usage := decodeJSON[struct {
		Budget struct {
			SpentToday float64 `json:"spent_today"`
		} `json:"budget"`
		Total struct {
			Cost float64 `json:"cost"`
		} `json:"total"`
	}](t, body)
	t.Logf("answers %v; spent %.2f (ledgers %.2f), %d model calls", codes, usage.Budget.SpentToday, usage.Total.Cost, ts.model.RequestCount())
	if usage.Total.Cost > 1.0+0.4+1e-9 || usage.Budget.SpentToday > 1.0+0.4+1e-9 {
		t.Errorf("spent %.2f (the ledgers say %.2f) of a $1.00 budget, want at most $1.40", usage.Budget.SpentToday, usage.Total.Cost)
	}
	if usage.Total.Cost < 0.8-1e-9 {
		t.Errorf("spent %.2f: the budget admitted fewer calls than fit", usage.Total.Cost)
	}
}

// TestBudgetUnpricedFailsClosed: a model call whose provider reported no
// cost counts as all of the day's budget, never as free: the run's next
// call is refused, and so is the next run, each saying which model did
// it; on a second host sharing the storage too.
func TestBudgetUnpricedFailsClosed(t *testing.T) {
	store := memory.New()
	budget := withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 5 })
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) { budget(c); c.HostID = "host-1" }})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	unpriced := hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"1"}`}},
		Usage: &ledger.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CostUnknown: true}}
	ts.model.Enqueue(unpriced, hosttest.Reply{Text: "never said"})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"look it up"}`)
	res := decodeJSON[struct{ Status, Reason string }](t, body)
	want := "a call of model " + hosttest.DefaultModel + " today reported no cost"
	if code != 200 || res.Status != "failed" || !strings.Contains(res.Reason, want) {
		t.Fatalf("the run whose call reported no cost: %d %s, want it stopped, saying %q", code, body, want)
	}
	if n := ts.model.RequestCount(); n != 1 {
		t.Errorf("the model was called %d times, want once", n)
	}
	for _, h := range []*testServer{ts, startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) { budget(c); c.HostID = "host-2" }})} {
		code, body := h.do(t, h.acme, "POST", "/v1/sessions/next/messages", `{"text":"more"}`)
		if code != 402 || !strings.Contains(body, want) {
			t.Errorf("a new run after it: %d %s, want 402 saying %q", code, body, want)
		}
	}
	// A priced call is counted as ever on another tenant.
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/b/messages?wait=true", `{"text":"hi"}`); code != 200 || !strings.Contains(body, `"completed"`) {
		t.Errorf("beta: %d %s", code, body)
	}
}

// blindBudgetStore is a memory store whose key-value store fails every
// read and write of the budgets' counters, as a storage that cannot be
// reached for them would.
type blindBudgetStore struct{ *memory.Store }

var errBlind = errors.New("the budget's counters cannot be reached")

func blindNS(ns string) bool { return strings.Contains(ns, "agentic:budget:") }

func (s blindBudgetStore) Get(ctx context.Context, ns, key string) ([]byte, bool, error) {
	if blindNS(ns) {
		return nil, false, errBlind
	}
	return s.Store.Get(ctx, ns, key)
}

func (s blindBudgetStore) Set(ctx context.Context, ns, key string, v []byte) error {
	if blindNS(ns) {
		return errBlind
	}
	return s.Store.Set(ctx, ns, key, v)
}

func (s blindBudgetStore) AddWithin(ctx context.Context, ns, key string, delta, limit int64) (int64, bool, error) {
	if blindNS(ns) {
		return 0, false, errBlind
	}
	return s.Store.AddWithin(ctx, ns, key, delta, limit)
}

// TestBudgetFailsOpen: when the storage cannot be read for the budget's
// spend, the budget lets the run and its model calls through (and logs a
// warning) rather than stop every tenant's work with it.
func TestBudgetFailsOpen(t *testing.T) {
	var logs syncBuffer
	ts := startServer(t, serverSetup{Store: blindBudgetStore{memory.New()}, Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.BudgetUSDPerDay = 0.5
	}), Options: func(o *server.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	ts.model.Enqueue(costing(hosttest.Reply{Text: "through"}, 0.01))
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hi"}`); code != 200 || !strings.Contains(body, "through") {
		t.Fatalf("a message while the budget cannot be read: %d %s, want it answered", code, body)
	}
	for _, want := range []string{"cannot read the budget's spend; admitting", "cannot read the budget's spend; letting the model call through"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no warning %q in the log:\n%s", want, logs.String())
		}
	}
}

// counterless is a store that keeps values but no counters
// (storage.Counter), as a custom store may.
type counterless struct {
	storage.Storage
	storage.KV
	storage.Lister
}

// TestBudgetWithoutCounters: on a store without storage.Counter the budget
// still holds: each host keeps its share of the day in the key-value
// store, under its host_id, and a check adds every host's up, so a second
// host refuses (402) once the first spent the budget.
func TestBudgetWithoutCounters(t *testing.T) {
	mem := memory.New()
	store := counterless{Storage: mem, KV: mem, Lister: mem}
	if _, ok := any(store).(storage.Counter); ok {
		t.Fatal("the test's store keeps counters")
	}
	hosts := map[string]*testServer{}
	for _, id := range []string{"host-a", "host-b"} {
		hosts[id] = startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) {
			c.HostID = id
			acme := c.Tenants["acme"]
			acme.BudgetUSDPerDay = 1
			c.Tenants["acme"] = acme
		}})
		hosts[id].model.Respond = func(model.Request) hosttest.Reply { return costing(hosttest.Reply{Text: "answered"}, 0.4) }
	}
	a, b := hosts["host-a"], hosts["host-b"]
	for i := range 3 {
		if code, body := a.do(t, a.acme, "POST", fmt.Sprintf("/v1/sessions/a%d/messages?wait=true", i), `{"text":"go"}`); code != 200 {
			t.Fatalf("A's run %d within the budget: %d %s", i, code, body)
		}
	}
	if code, body := a.do(t, a.acme, "POST", "/v1/sessions/a3/messages", `{"text":"go"}`); code != 402 || !strings.Contains(body, "budget_exceeded") {
		t.Errorf("A past the budget: %d %s", code, body)
	}
	shares, err := mem.Keys(context.Background(), "agentic:budget:acme:"+time.Now().UTC().Format(time.DateOnly))
	if err != nil || !slices.Equal(shares, []string{"host-a"}) {
		t.Errorf("the day's shares: %v %v, want host-a's", shares, err)
	}
	// B reads A's share (at most a second stale) and refuses too.
	waitFor(t, "B to count A's spend", func() bool {
		_, body := b.do(t, b.acme, "GET", "/v1/usage", "")
		return strings.Contains(body, `"spent_today":1.2`)
	})
	if code, body := b.do(t, b.acme, "POST", "/v1/sessions/b0/messages", `{"text":"go"}`); code != 402 || !strings.Contains(body, "budget_exceeded") {
		t.Errorf("B past the budget A spent: %d %s", code, body)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's writes from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
