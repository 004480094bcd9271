package server_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
)

// TestServeRollingUpgrade: two serve processes of two builds share a
// Redis, the older one reading no ledger feature (redistest.OlderBuild,
// ledger_features: []). The newer refuses a fork meanwhile (409
// feature_unavailable, naming the older host); the older, asked about a
// session the newer forked before it came, accepts a message (202) that
// the newer answers, refuses a keyed message (503 unreadable: only a
// reader can check the key), and says that it cannot read the transcript (503
// unreadable). An import of a ledger with a fork record is refused too.
func TestServeRollingUpgrade(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	newer := startServer(t, serverSetup{Store: openRedis(t, rs.URL()), Mutate: func(c *server.Config) {
		c.HostID, c.LeaseTTL = "serve-new", server.Duration(time.Second)
	}})
	code, body := newer.do(t, newer.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hello"}`)
	if code != 200 {
		t.Fatalf("a message: %d %s", code, body)
	}
	msg := decodeJSON[struct {
		MessageID string `json:"message_id"`
	}](t, body).MessageID
	if code, body := newer.do(t, newer.acme, "POST", "/v1/sessions/s/fork?wait=true", `{"at":"`+msg+`","session_id":"f"}`); code != 200 {
		t.Fatalf("a fork: %d %s", code, body)
	}

	req, _ := http.NewRequest("GET", newer.URL+"/v1/sessions/f/export", nil)
	req.Header.Set("Authorization", "Bearer "+newer.acme)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	forkArchive, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("export the fork: %d %.200s", res.StatusCode, forkArchive)
	}

	older := startServer(t, serverSetup{Store: redistest.OlderBuild{Store: openRedis(t, rs.URL())}, Mutate: func(c *server.Config) {
		c.HostID, c.LeaseTTL, c.LedgerFeatures = "serve-old", server.Duration(time.Second), &[]ledger.Feature{}
	}})
	if err := server.RefreshAgreement(newer.srv); err != nil {
		t.Fatal(err)
	}
	code, body = newer.do(t, newer.acme, "POST", "/v1/sessions/s/fork", `{"at":"`+msg+`","session_id":"f2"}`)
	refused := decodeJSON[struct {
		Error struct {
			Code     string   `json:"code"`
			Features []string `json:"features"`
			Hosts    []string `json:"hosts"`
		} `json:"error"`
	}](t, body).Error
	if code != 409 || refused.Code != "feature_unavailable" || !slices.Equal(refused.Features, []string{"fork"}) ||
		len(refused.Hosts) != 1 || !strings.HasPrefix(refused.Hosts[0], "serve-old") {
		t.Fatalf("a fork beside the older server: %d %s", code, body)
	}
	if code, body := newer.do(t, newer.acme, "GET", "/v1/sessions/f2/transcript", ""); code != 404 {
		t.Fatalf("the refused fork's session: %d %s", code, body)
	}
	// An import of a ledger that holds a fork record, likewise.
	if code, body := newer.doBytes(t, newer.beta, "POST", "/v1/sessions/import", forkArchive); code != 409 || !strings.Contains(body, `"code":"feature_unavailable"`) {
		t.Fatalf("an import of the fork beside the older server: %d %s", code, body)
	}
	if code, body := newer.do(t, newer.beta, "GET", "/v1/sessions/f/transcript", ""); code != 404 {
		t.Fatalf("the refused import's session: %d %s", code, body)
	}

	code, body = older.do(t, older.acme, "POST", "/v1/sessions/f/messages?wait=true", `{"text":"through the older server"}`)
	queued := decodeJSON[struct {
		MessageID string `json:"message_id"`
	}](t, body).MessageID
	if code != 202 || queued == "" {
		t.Fatalf("a message through the older server: %d %s", code, body)
	}
	// With an Idempotency-Key, which only a reader can check: 503, for
	// the retry to reach one.
	if code, body := older.do(t, older.acme, "POST", "/v1/sessions/f/messages", `{"text":"keyed"}`, "Idempotency-Key", "k1"); code != 503 || !strings.Contains(body, `"code":"unreadable"`) {
		t.Fatalf("a keyed message through the older server: %d %s", code, body)
	}
	if code, body := older.do(t, older.acme, "GET", "/v1/sessions/f/transcript", ""); code != 503 || !strings.Contains(body, `"code":"unreadable"`) {
		t.Fatalf("the fork's transcript on the older server: %d %s", code, body)
	}
	waitFor(t, "the newer server to answer the message queued through the older one", func() bool {
		_, tr := newer.do(t, newer.acme, "GET", "/v1/sessions/f/transcript", "")
		return strings.Contains(tr, queued) && strings.Contains(tr, `"text":"You said: through the older server","status":"completed"`)
	})
}
