package server_test

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
)

// TestUsage: GET /v1/usage sums the tenant's model calls per day, session
// and agent beside its budget, and counts its tool calls per tool and
// module hash.
func TestUsage(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.BudgetUSDPerDay = 10
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel}, "writer": {Model: hosttest.DefaultModel}}
	})})
	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t))
	if code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	hash := decodeJSON[struct{ Hash string }](t, body).Hash
	ts.model.Enqueue(costing(hosttest.Reply{Text: "one"}, 0.25), costing(hosttest.Reply{Text: "two"}, 0.5))
	for _, m := range []struct{ session, body string }{
		{"s1", `{"text":"hello"}`},
		{"s2", `{"text":"hello","agent":"writer"}`},
		{"s3", `{"text":"get_account account_id=42"}`},
	} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+m.session+"/messages?wait=true", m.body); code != 200 {
			t.Fatalf("%s: %d %s", m.session, code, body)
		}
	}
	type figures struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		}
		Cost  float64
		Steps int
		Fuel  int64
	}
	type usage struct {
		Tenant string
		Budget struct {
			USDPerDay  float64 `json:"usd_per_day"`
			SpentToday float64 `json:"spent_today"`
		}
		Total figures
		Days  []struct {
			Day string
			figures
		}
		Sessions []struct {
			SessionID    string    `json:"session_id"`
			LastActivity time.Time `json:"last_activity"`
			figures
		}
		Agents []struct {
			Agent    string
			Sessions int
			figures
		}
		Tools []struct {
			Name, Source  string
			Calls, Errors int
			Fuel          int64
		}
		Calls []struct {
			SessionID string `json:"session_id"`
			Name      string
			Source    string
			Fuel      int64
		}
	}
	code, body = ts.do(t, ts.acme, "GET", "/v1/usage?days=7", "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	u := decodeJSON[usage](t, body)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	today := time.Now().UTC().Format(time.DateOnly)
	switch {
	case u.Tenant != "acme" || u.Budget.USDPerDay != 10 || !near(u.Budget.SpentToday, 0.75):
		t.Errorf("tenant and budget: %+v", u)
	case !near(u.Total.Cost, 0.75) || u.Total.Steps != 4 || u.Total.Usage.TotalTokens <= 40:
		t.Errorf("total: %+v", u.Total)
	case len(u.Days) != 7 || u.Days[6].Day != today || !near(u.Days[6].Cost, 0.75) || u.Days[6].Steps != 4 || u.Days[0].Steps != 0:
		t.Errorf("days: %+v", u.Days)
	case len(u.Sessions) != 3 || u.Sessions[0].SessionID != "s2" || !near(u.Sessions[0].Cost, 0.5) || u.Sessions[2].SessionID != "s3" ||
		u.Sessions[2].Steps != 2 || u.Sessions[0].LastActivity.IsZero():
		t.Errorf("sessions, dearest first: %+v", u.Sessions)
	case len(u.Agents) != 2 || u.Agents[0].Agent != "default" || u.Agents[0].Sessions != 2 || u.Agents[0].Steps != 3 ||
		u.Agents[1].Agent != "writer" || !near(u.Agents[1].Cost, 0.5):
		t.Errorf("agents: %+v", u.Agents)
	case len(u.Tools) != 1 || u.Tools[0].Name != "get_account" || u.Tools[0].Source != hash || u.Tools[0].Calls != 1:
		t.Errorf("tools: %+v (the module is %s)", u.Tools, hash)
	case len(u.Calls) != 1 || u.Calls[0].SessionID != "s3" || u.Calls[0].Source != hash:
		t.Errorf("calls: %+v", u.Calls)
	}
	// The plugin's CPU: the fuel of its one call, in every figure that
	// holds it, and in none that does not.
	fuel := u.Calls[0].Fuel
	if fuel <= 0 || u.Tools[0].Fuel != fuel || u.Total.Fuel != fuel || u.Days[6].Fuel != fuel || u.Sessions[2].Fuel != fuel ||
		u.Sessions[0].Fuel != 0 || u.Agents[0].Fuel != fuel || u.Agents[1].Fuel != 0 {
		t.Errorf("fuel: call %d, tool %d, total %d, today %d, sessions %d %d, agents %d %d", fuel, u.Tools[0].Fuel, u.Total.Fuel,
			u.Days[6].Fuel, u.Sessions[2].Fuel, u.Sessions[0].Fuel, u.Agents[0].Fuel, u.Agents[1].Fuel)
	}
	// The session list carries the same figures.
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions", "")
	list := decodeJSON[struct {
		Sessions []struct {
			ID           string
			LastActivity time.Time `json:"last_activity"`
			Cost         float64
			Usage        struct {
				TotalTokens int64 `json:"total_tokens"`
			}
		}
	}](t, body)
	if len(list.Sessions) != 3 || list.Sessions[1].ID != "s2" || !near(list.Sessions[1].Cost, 0.5) || list.Sessions[1].Usage.TotalTokens != 20 ||
		list.Sessions[1].LastActivity.IsZero() {
		t.Errorf("sessions: %s", body)
	}
	for _, q := range []string{"0", "91", "x"} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/usage?days="+q, ""); code != 400 || !strings.Contains(body, "want 1 to 90") {
			t.Errorf("days=%s: %d %s", q, code, body)
		}
	}
	// Beta has spent nothing.
	_, body = ts.do(t, ts.beta, "GET", "/v1/usage", "")
	if b := decodeJSON[usage](t, body); b.Total.Steps != 0 || len(b.Sessions) != 0 || len(b.Tools) != 0 || b.Budget.USDPerDay != 0 {
		t.Errorf("beta's usage: %s", body)
	}
}

// TestConsoleFiles: the console is served from the binary, with a policy
// that lets it load and reach nothing but this server; its page has no
// inline script; the key is never taken from a URL.
func TestConsoleFiles(t *testing.T) {
	ts := newTestServer(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Get(ts.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/console/" {
		t.Errorf("/console: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, f := range []struct{ path, typ string }{
		{"/console/", "text/html"}, {"/console/console.js", "text/javascript"}, {"/console/console.css", "text/css"},
	} {
		res, err := http.Get(ts.URL + f.path)
		if err != nil {
			t.Fatal(err)
		}
		buf, _ := io.ReadAll(res.Body)
		n := len(buf)
		res.Body.Close()
		csp := res.Header.Get("Content-Security-Policy")
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), f.typ) || n == 0 {
			t.Errorf("%s: %d %s, %d bytes", f.path, res.StatusCode, res.Header.Get("Content-Type"), n)
		}
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: the policy %q lacks %s", f.path, csp, want)
			}
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", f.path, res.Header)
		}
		if f.path == "/console/" && strings.Contains(string(buf[:n]), "<script>") {
			t.Errorf("the page has an inline script")
		}
		req, _ := http.NewRequest("GET", ts.URL+f.path, nil)
		req.Header.Set("If-None-Match", res.Header.Get("ETag"))
		again, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if res.Header.Get("ETag") == "" || again.StatusCode != http.StatusNotModified {
			t.Errorf("%s: ETag %q, again %d", f.path, res.Header.Get("ETag"), again.StatusCode)
		}
	}
	if code, body := ts.do(t, "", "GET", "/console/nope.js", ""); code != 404 || !strings.Contains(body, "not_found") {
		t.Errorf("a file the console has not: %d %s", code, body)
	}
}
