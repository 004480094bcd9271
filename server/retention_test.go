package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// TestRetentionRoutes: a tenant with retention (keep the last one,
// archive) sweeps on POST /v1/retention/sweep; a session kept by PUT
// /v1/sessions/{id}/retention stays; the archives land in the tenant's
// directory; a second sweep does nothing; a tenant without a policy gets
// 409; {} removes an override, and DELETE of a session removes its.
func TestRetentionRoutes(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Retention = &server.RetentionConfig{KeepLast: 1, ArchiveDir: dir}
		c.Tenants["acme"] = acme
	}})
	for _, id := range []string{"old", "kept", "new"} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hello"}`); code != 200 {
			t.Fatalf("%s: %d %s", id, code, body)
		}
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/sessions/kept/retention", `{"keep":true}`); code != 200 || !strings.Contains(body, `"keep":true`) {
		t.Fatalf("PUT retention: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/sessions/nobody/retention", `{"keep":true}`); code != 404 {
		t.Errorf("PUT retention of a missing session: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/sessions/kept/retention", `{"keep_days":-1}`); code != 400 {
		t.Errorf("PUT retention with keep_days -1: %d %s", code, body)
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/retention/sweep", "")
	if code != 200 || !strings.Contains(body, `"archived":["old"]`) || !strings.Contains(body, `"kept":2`) {
		t.Fatalf("sweep: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "acme", "old.tar.gz")); err != nil {
		t.Errorf("the archive: %v", err)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/old", ""); code != 404 {
		t.Errorf("the swept session answers %d, want 404", code)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/retention/sweep", ""); code != 200 || !strings.Contains(body, `"archived":[]`) {
		t.Errorf("a second sweep: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/retention/sweep", ""); code != 409 || !strings.Contains(body, "no retention policy") {
		t.Errorf("a sweep without a policy: %d %s", code, body)
	}
	// {} removes an override; a deleted session's override goes with it.
	tenant, err := storage.Prefix(ts.store, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	override := func(id string) retention.Override {
		o, err := retention.GetOverride(t.Context(), tenant.(storage.KV), id)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/sessions/new/retention", `{"keep_days":30}`); code != 200 || override("new").KeepDays != 30 {
		t.Fatalf("PUT keep_days: %d %s, override %+v", code, body, override("new"))
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/sessions/new/retention", `{}`); code != 200 || override("new") != (retention.Override{}) {
		t.Errorf("PUT {}: %d %s, override %+v; want none", code, body, override("new"))
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/kept", ""); code != 200 || override("kept") != (retention.Override{}) {
		t.Errorf("DELETE: %d %s, override %+v; want it gone with the session", code, body, override("kept"))
	}
}

// TestRetentionConfig: a retention policy without limits, or archiving
// without a directory, is refused at start, naming the tenant.
func TestRetentionConfig(t *testing.T) {
	for _, tc := range []struct {
		r    server.RetentionConfig
		want string
	}{
		{server.RetentionConfig{ArchiveDir: "x"}, "keep_days, keep_last"},
		{server.RetentionConfig{KeepDays: 1}, "archive_dir"},
		{server.RetentionConfig{KeepDays: 1, Action: "shred"}, "shred"},
	} {
		r := tc.r
		cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Models: []string{hosttest.DefaultModel}, Retention: &r}}}
		srv, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
		if err == nil {
			srv.Close(t.Context())
		}
		if err == nil || !strings.Contains(err.Error(), "tenants.acme") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %q", tc.r, err, tc.want)
		}
	}
}

// TestRetentionPeriodic: a tenant's policy is applied by the server's own
// sweep, every retention.every, without being asked.
func TestRetentionPeriodic(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Retention = &server.RetentionConfig{KeepLast: 1, Action: "delete", Every: server.Duration(20 * time.Millisecond)}
		c.Tenants["acme"] = acme
	}})
	for _, id := range []string{"old", "new"} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hello"}`); code != 200 {
			t.Fatalf("%s: %d %s", id, code, body)
		}
	}
	waitFor(t, "the periodic sweep to delete the older session", func() bool {
		code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/old", "")
		return code == 404
	})
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/new", ""); code != 200 {
		t.Errorf("the newest session: %d %s", code, body)
	}
}
