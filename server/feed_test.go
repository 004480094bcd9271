package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/server"
)

// feedChange is an event of GET /v1/feed.
type feedChange struct {
	SessionID  string `json:"session_id"`
	Type       string `json:"type"`
	RunID      string `json:"run_id"`
	ApprovalID string `json:"approval_id"`
}

// openFeed opens key's feed; its changes arrive on the channel, which
// closes when the stream ends.
func openFeed(t *testing.T, ts *testServer, key string) <-chan feedChange {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/feed", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("feed: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := make(chan feedChange, 256)
	go func() {
		defer close(out)
		defer res.Body.Close()
		r := newSSEReader(res.Body)
		for {
			e, ok := r.next()
			if !ok {
				return
			}
			var c feedChange
			if e.Name == "change" && json.Unmarshal([]byte(e.Data), &c) == nil {
				out <- c
			} else if e.Name == "resync" {
				out <- feedChange{Type: "resync"}
			}
		}
	}()
	return out
}

// nextChange waits for the feed's next change.
func nextChange(t *testing.T, feed <-chan feedChange) feedChange {
	t.Helper()
	select {
	case c, ok := <-feed:
		if !ok {
			t.Fatal("the feed ended")
		}
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no change on the feed within 20s")
	}
	return feedChange{}
}

// TestFeedIsolation: a tenant's feed tells its own sessions' runs and
// approvals, and nothing of another tenant's: beta's first change is its
// own, though acme's runs came first.
func TestFeedIsolation(t *testing.T) {
	ts := newTestServer(t)
	acmeFeed, betaFeed := openFeed(t, ts, ts.acme), openFeed(t, ts, ts.beta)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/acme-secret/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("acme: %d %s", code, body)
	}
	for _, want := range []string{"run-start", "run-end"} {
		if c := nextChange(t, acmeFeed); c.SessionID != "acme-secret" || c.Type != want || c.RunID == "" {
			t.Fatalf("acme's feed: %+v, want %s of acme-secret", c, want)
		}
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/acme-parked/messages?wait=true", `{"text":"publish_post title=t body=b"}`)
	if code != 200 || !strings.Contains(body, "approval_required") {
		t.Fatalf("acme parks: %d %s", code, body)
	}
	var approval string
	for approval == "" {
		c := nextChange(t, acmeFeed)
		if c.SessionID != "acme-parked" {
			t.Fatalf("acme's feed: %+v", c)
		}
		if c.Type == "approval-requested" {
			approval = c.ApprovalID
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+approval, `{"approve":false,"reason":"no"}`); code != 200 {
		t.Fatalf("deny: %d %s", code, body)
	}
	for {
		c := nextChange(t, acmeFeed)
		if c.Type == "approval-decided" && c.ApprovalID == approval {
			break
		}
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/beta-own/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Fatalf("beta: %d %s", code, body)
	}
	if c := nextChange(t, betaFeed); c.SessionID != "beta-own" {
		t.Fatalf("beta's first change is %+v, not its own session's", c)
	}
}

// TestFeedEndsAtShutdown: a feed's stream ends when the server closes,
// rather than holding the shutdown up.
func TestFeedEndsAtShutdown(t *testing.T) {
	ts := newTestServer(t)
	feed := openFeed(t, ts, ts.acme)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.srv.Close(ctx)
	select {
	case _, ok := <-feed:
		if ok {
			t.Fatal("a change after shutdown")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the feed is still open 10s after the server closed")
	}
}

// TestRevokedKeyClosesFeed: a feed opened with a stored key ends, with an
// error event, at the heartbeat after the key is revoked.
func TestRevokedKeyClosesFeed(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.Heartbeat = server.Duration(50 * time.Millisecond) }})
	key, rec, err := server.CreateKey(context.Background(), ts.kv(t), "acme", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := newRequest(ts, key, "GET", "/v1/feed", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("feed: %v %v", res, err)
	}
	defer res.Body.Close()
	if _, err := server.RevokeKey(context.Background(), ts.kv(t), rec.ID); err != nil {
		t.Fatal(err)
	}
	events := newSSEReader(res.Body)
	e, ok := events.next()
	if !ok || e.Name != "error" || !strings.Contains(e.Data, `"code":"unauthorized"`) {
		t.Fatalf("after revoking the key: %+v, want an error event", e)
	}
	if _, ok := events.next(); ok {
		t.Fatal("the feed goes on after the error")
	}
}
