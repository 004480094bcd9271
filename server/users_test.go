package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
)

// TestStreamsPerUser: a stream whose request names an end user counts
// against that user, not against its key: a backend serving all its users
// with one key opens streams_per_key streams for each of them; a user past
// the bound (or per_user.streams) is refused, and so is the key's own
// stream past streams_per_key; a stream's end gives its slot back.
func TestStreamsPerUser(t *testing.T) {
	for _, perUser := range []int{0, 3} {
		t.Run(fmt.Sprintf("per_user.streams=%d", perUser), func(t *testing.T) {
			ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
				tc := c.Tenants["acme"]
				tc.RateLimit.StreamsPerKey = 2
				if perUser > 0 {
					tc.RateLimit.PerUser = &server.PerUserConfig{Streams: perUser}
				}
				c.Tenants["acme"] = tc
			}})
			open := func(user string) (int, string, func()) {
				t.Helper()
				req, err := newRequest(ts, ts.acme, "GET", "/v1/feed", "")
				if err != nil {
					t.Fatal(err)
				}
				if user != "" {
					req.Header.Set("X-Agentic-User", user)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != 200 {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					return res.StatusCode, string(b), func() {}
				}
				t.Cleanup(func() { res.Body.Close() })
				return 200, "", func() { res.Body.Close() }
			}
			each := max(perUser, 2)
			var closeFirst func()
			for _, user := range []string{"ann", "bob", ""} {
				for i := range each {
					if user == "" && i == 2 {
						break
					}
					code, body, closeIt := open(user)
					if code != 200 {
						t.Fatalf("stream %d of user %q: %d %s", i+1, user, code, body)
					}
					if user == "ann" && i == 0 {
						closeFirst = closeIt
					}
				}
			}
			if code, body, _ := open("ann"); code != 429 || !strings.Contains(body, "end user ann holds its most event streams (rate_limit.per_user.streams)") {
				t.Fatalf("a stream past ann's bound: %d %s", code, body)
			}
			if code, body, _ := open(""); code != 429 || !strings.Contains(body, "rate_limit.streams_per_key") {
				t.Fatalf("a stream past the key's bound: %d %s", code, body)
			}
			closeFirst()
			waitFor(t, "ann's slot given back", func() bool {
				code, _, _ := open("ann")
				return code == 200
			})
		})
	}
}

// TestServeKeyUser: a key bound to an end user — in the configuration or
// stored — makes each of its requests that user's: rate_limit.per_user
// bounds it without a header, a header naming the same user changes
// nothing, one naming another is refused (403), and a tenant's key still
// names whom it likes.
func TestServeKeyUser(t *testing.T) {
	const aliceKey = "ak_test_alice"
	m := hosttest.StallingModel("", "thinking")
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Keys = append(acme.Keys, server.KeyConfig{Hash: server.HashKey(aliceKey), User: "alice"})
		acme.RateLimit.PerUser = &server.PerUserConfig{ConcurrentRuns: 1}
		c.Tenants["acme"] = acme
	}})
	carolKey, rec, err := server.CreateKey(context.Background(), ts.kv(t), "acme", server.KeyOptions{User: "carol"})
	if err != nil || rec.User != "carol" {
		t.Fatalf("a stored key bound to carol: %+v %v", rec, err)
	}
	if _, _, err := server.CreateKey(context.Background(), ts.kv(t), "acme", server.KeyOptions{User: "two words"}); err == nil || !strings.Contains(err.Error(), `user "two words"`) {
		t.Errorf("a stored key bound to a bad name: %v", err)
	}
	send := func(key, user, id string) (int, string) {
		t.Helper()
		return withKeyAs(t, ts, key, user, "POST", "/v1/sessions/"+id+"/messages", `{"text":"hi"}`)
	}
	defer func() {
		for _, id := range []string{"a1", "b1", "c1"} {
			ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/cancel", `{}`)
		}
	}()
	for _, k := range []struct{ key, who, id string }{{aliceKey, "alice", "a"}, {carolKey, "carol", "c"}} {
		who := k.who
		if code, body := send(k.key, "", k.id+"1"); code != 202 {
			t.Fatalf("%s's first run: %d %s", who, code, body)
		}
		waitFor(t, who+"'s run in flight", func() bool { return ts.sessionState(t, ts.acme, k.id+"1") == "running" })
		// No header: the key's user is bound all the same.
		if code, body := send(k.key, "", k.id+"2"); code != 429 || !strings.Contains(body, "user "+who+" of tenant acme has 1 runs in flight") {
			t.Errorf("%s's second run, no header: %d %s", who, code, body)
		}
		// The same user in the header: the same bound.
		if code, body := send(k.key, who, k.id+"2"); code != 429 || !strings.Contains(body, "user "+who+" of tenant acme") {
			t.Errorf("%s's second run, naming %s: %d %s", who, who, code, body)
		}
		// Another user in the header: refused, whatever it would ask.
		if code, body := send(k.key, "bob", "b1"); code != 403 || !strings.Contains(body, "the API key is bound to user "+who+"; header X-Agentic-User names bob") {
			t.Errorf("%s's key naming bob: %d %s", who, code, body)
		}
	}
	// The tenant's own key names bob, who has a place of his own.
	if code, body := send(ts.acme, "bob", "b1"); code != 202 {
		t.Errorf("bob's run with the tenant's key: %d %s", code, body)
	}
}
