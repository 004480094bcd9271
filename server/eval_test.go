package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
)

// TestEvalRoute: POST /v1/eval replays the tenant's sessions against a
// candidate model of its allow-list: alike, it diverges nowhere; scripted
// to call the plugin with other arguments, the call gets "no recorded
// result" (the plugin does not run) and the first turn diverges; nothing
// is written to the tenant's sessions; bad requests get 400. On a memory
// store and on Redis.
func TestEvalRoute(t *testing.T) {
	for name, open := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, serverSetup{Store: open(t), Mutate: withTenant("acme", func(tc *server.TenantConfig) {
				tc.Models = append(tc.Models, "test/other")
			})})
			if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
				t.Fatalf("upload: %d %s", code, body)
			}
			for _, text := range []string{"get_account account_id=42", "thanks"} {
				if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", `{"text":"`+text+`"}`); code != 200 {
					t.Fatalf("source: %d %s", code, body)
				}
			}
			before, err := ts.store.Load(context.Background(), "acme:src")
			if err != nil {
				t.Fatal(err)
			}

			code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src","nope"],"model":"test/other"}`)
			rep := decodeJSON[eval.Report](t, body)
			if code != 200 || len(rep.Sessions) != 2 || rep.Model != "test/other" {
				t.Fatalf("eval: %d %s", code, body)
			}
			if s := rep.Sessions[0]; s.Error != "" || s.Diverged || s.Unmatched != 0 || len(s.Turns) != 2 || s.Candidate.Status != ledger.RunCompleted ||
				s.Candidate.Steps != 3 || s.Candidate.ToolCalls != 1 {
				t.Fatalf("a candidate alike: %s", body)
			}
			if s := rep.Sessions[1]; !strings.Contains(s.Error, "no session nope") || rep.Total.Errors != 1 {
				t.Fatalf("a missing session: %s", body)
			}

			ts.model.Enqueue(
				hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"99"}`}}},
				hosttest.Reply{Text: "no such account"},
			)
			n := ts.model.RequestCount()
			code, body = ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"]}`)
			rep = decodeJSON[eval.Report](t, body)
			if s := rep.Sessions[0]; code != 200 || !s.Diverged || s.DivergedAt != 0 || s.Unmatched != 1 || rep.Total.Diverged != 1 {
				t.Fatalf("a diverging candidate: %d %s", code, body)
			}
			reqs := ts.model.Requests()[n:]
			if msgs := reqs[1].Messages; msgs[len(msgs)-1].Role != ledger.RoleTool || !strings.HasPrefix(msgs[len(msgs)-1].Text(), "error: "+eval.NoRecordedResult) {
				t.Fatalf("the candidate was told %+v", msgs[len(msgs)-1])
			}

			after, err := ts.store.Load(context.Background(), "acme:src")
			if err != nil || len(after) != len(before) {
				t.Fatalf("the session changed: %d events, then %d (%v)", len(before), len(after), err)
			}
			for _, c := range []struct{ body, want string }{
				{`{}`, "name 1 to 20 sessions"},
				{`{"sessions":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u"]}`, "at most 20"},
				{`{"sessions":["../x"]}`, "invalid session id"},
				{`{"sessions":["src"],"model":"x/y"}`, "not among"},
				{`{"sessions":["src"],"agent":"nope"}`, "no agent"},
				{`{"sessions":["src"],"timeout_seconds":6000}`, "timeout_seconds"},
			} {
				if code, body := ts.do(t, ts.acme, "POST", "/v1/eval", c.body); code != 400 || !strings.Contains(body, c.want) {
					t.Errorf("%s: %d %s, want 400 and %q", c.body, code, body, c.want)
				}
			}
		})
	}
}

// TestEvalTimeout: an evaluation past its timeout_seconds answers 504,
// saying how far it got.
func TestEvalTimeout(t *testing.T) {
	ts := newTestServer(t)
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", `{"text":"stall, later"}`); code != 200 {
		t.Fatalf("source: %d %s", code, body)
	}
	stallModel(ts.model) // the candidate's pass never ends
	code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"],"timeout_seconds":1}`)
	if code != 504 || !strings.Contains(body, "did not finish within 1s") {
		t.Fatalf("an evaluation past its timeout: %d %s, want 504", code, body)
	}
}
