package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/archive"
)

// TestExportImportRoutes: a session exported by one tenant imports into
// another, equal event for event; importing it again is refused unless
// replace=true; a malformed archive imports nothing; one past
// max_archive_bytes answers 413.
func TestExportImportRoutes(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.MaxArchiveBytes = 1 << 16 }})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"remember the export"}`); code != 200 {
		t.Fatalf("message: %d %s", code, body)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sessions/s1/export", nil)
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/gzip" {
		t.Fatalf("export: %d %s %.200s", res.StatusCode, res.Header.Get("Content-Type"), data)
	}
	a, err := archive.Read(bytes.NewReader(data), archive.ReadOptions{})
	if err != nil || len(a.Sessions) != 1 || a.Manifest.Tenant != "acme" {
		t.Fatalf("the exported archive: %+v, %v", a, err)
	}
	code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import", data)
	if code != 200 || !strings.Contains(body, `"sessions":["s1"]`) {
		t.Fatalf("import into beta: %d %s", code, body)
	}
	_, acmeT := ts.do(t, ts.acme, "GET", "/v1/sessions/s1/transcript", "")
	_, betaT := ts.do(t, ts.beta, "GET", "/v1/sessions/s1/transcript", "")
	if acmeT != betaT || !strings.Contains(betaT, "remember the export") {
		t.Errorf("the imported session's transcript differs:\n%s\n%s", acmeT, betaT)
	}
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import", data); code != 409 || !strings.Contains(body, "s1") {
		t.Errorf("a second import: %d %s, want 409 naming s1", code, body)
	}
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import?replace=true", data); code != 200 || !strings.Contains(body, `"replaced":["s1"]`) {
		t.Errorf("an import with replace=true: %d %s", code, body)
	}
	// A session in use (a run in progress) is not replaced: 409, and
	// nothing of it changes.
	ts.model.Enqueue(hosttest.Reply{Text: "slow", Wait: time.Minute})
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/s1/messages", `{"text":"take your time"}`); code != 202 {
		t.Fatalf("a run in beta's s1: %d %s", code, body)
	}
	waitFor(t, "beta's s1 running", func() bool { return ts.sessionState(t, ts.beta, "s1") == "running" })
	_, before := ts.do(t, ts.beta, "GET", "/v1/sessions/s1/transcript", "")
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import?replace=true", data); code != 409 || !strings.Contains(body, "session s1 is in use") {
		t.Errorf("replacing a session in use: %d %s, want 409", code, body)
	}
	if _, after := ts.do(t, ts.beta, "GET", "/v1/sessions/s1/transcript", ""); after != before {
		t.Errorf("the session in use changed:\n%s\n%s", before, after)
	}
	ts.do(t, ts.beta, "POST", "/v1/sessions/s1/cancel", `{}`)
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import", data[:len(data)/2]); code != 400 || !strings.Contains(body, "nothing was imported") {
		t.Errorf("a malformed archive: %d %s, want 400", code, body)
	}
	if code, body := ts.doBytes(t, ts.beta, "POST", "/v1/sessions/import", make([]byte, 1<<17)); code != 413 {
		t.Errorf("an archive past max_archive_bytes: %d %.200s, want 413", code, body)
	}
	if code, _ := ts.do(t, ts.beta, "GET", "/v1/sessions/nobody/export", ""); code != 404 {
		t.Errorf("export of a missing session: %d, want 404", code)
	}
}
