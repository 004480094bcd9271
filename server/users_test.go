package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

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
