package server_test

// Keys that expire: a stored key (keys create --expires) or a key of the
// configuration with an expiry is refused once it expired, exactly as a
// revoked key is, and the event streams opened with it close at their
// next heartbeat, saying why.

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// testClock is a clock a test moves on.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) now() time.Time           { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *testClock) advance(d time.Duration)  { c.skew.Add(int64(d)) }
func (c *testClock) prepare(s *server.Server) { server.SetKeyClock(s, c.now) }

func TestKeysExpire(t *testing.T) {
	const configKey = "ak_config_expiring"
	var clock testClock
	ts := startServer(t, serverSetup{Prepare: clock.prepare, Mutate: func(c *server.Config) {
		c.Heartbeat = server.Duration(50 * time.Millisecond)
		acme := c.Tenants["acme"]
		acme.Keys = append(acme.Keys,
			server.KeyConfig{Hash: server.HashKey(configKey), Expires: time.Now().Add(time.Hour)},
			server.KeyConfig{Hash: server.HashKey("ak_config_expired"), Expires: time.Now().Add(-time.Hour)})
		c.Tenants["acme"] = acme
	}})
	ctx := context.Background()
	stored, rec, err := server.CreateKey(ctx, ts.kv(t), "acme", server.KeyOptions{ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil || rec.ExpiresAt.IsZero() {
		t.Fatalf("%+v %v", rec, err)
	}
	if _, _, err := server.CreateKey(ctx, ts.kv(t), "acme", server.KeyOptions{ExpiresAt: time.Now().Add(-time.Minute)}); err == nil {
		t.Error("a key that expired already was made")
	}
	_, unauthorized := ts.do(t, "ak_wrong", "GET", "/v1/sessions", "")
	if code, body := ts.do(t, "ak_config_expired", "GET", "/v1/sessions", ""); code != 401 || body != unauthorized {
		t.Errorf("a configuration key that expired: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	// Streams opened with each key before they expire.
	type opened struct {
		name   string
		events *sseReader
		close  func()
	}
	var streams []opened
	for _, k := range []struct{ name, key, path, first string }{
		{"stored key, session events", stored, "/v1/sessions/s/events", "snapshot"},
		{"configuration key, session events", configKey, "/v1/sessions/s/events", "snapshot"},
		{"stored key, feed", stored, "/v1/feed", ""},
	} {
		if code, body := ts.do(t, k.key, "GET", "/v1/sessions", ""); code != 200 {
			t.Fatalf("%s before it expires: %d %s", k.name, code, body)
		}
		req, _ := newRequest(ts, k.key, "GET", k.path, "")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %v %v", k.name, res, err)
		}
		events := newSSEReader(res.Body)
		if k.first != "" {
			if e, ok := events.next(); !ok || e.Name != k.first {
				t.Fatalf("%s: first event %+v", k.name, e)
			}
		}
		streams = append(streams, opened{k.name, events, func() { res.Body.Close() }})
	}

	clock.advance(2 * time.Hour)
	for _, k := range []string{stored, configKey} {
		if code, body := ts.do(t, k, "GET", "/v1/sessions", ""); code != 401 || body != unauthorized {
			t.Errorf("an expired key: %d %s, want the 401 of any invalid key", code, body)
		}
	}
	for _, s := range streams {
		for {
			e, ok := s.events.next()
			if !ok {
				t.Errorf("%s: the stream ended without an error event", s.name)
				break
			}
			if e.Name == "change" || e.Name == "resync" {
				continue
			}
			if e.Name != "error" || !strings.Contains(e.Data, `"code":"unauthorized"`) || !strings.Contains(e.Data, "the API key expired") {
				t.Errorf("%s: %+v, want an error event saying the key expired", s.name, e)
			}
			break
		}
		if e, ok := s.events.next(); ok {
			t.Errorf("%s goes on after the error: %+v", s.name, e)
		}
		s.close()
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); code != 200 {
		t.Errorf("a key without expiry: %d", code)
	}
	recs, err := server.ListKeys(ctx, ts.kv(t))
	if err != nil || len(recs) != 1 || !recs[0].Expired(clock.now()) || recs[0].Expired(time.Now()) {
		t.Errorf("the stored key's record: %+v %v", recs, err)
	}
}

// TestKeyConfigYAML: a configuration's keys are hashes, or mappings of a
// hash, its expiry (a time, or a date) and its end user; a bad expiry
// names its line, a bad user its key; overrides keep the expiry and user.
func TestKeyConfigYAML(t *testing.T) {
	hash := server.HashKey("k")
	dir := t.TempDir()
	path := writeFile(t, dir, "agentic.yaml", `tenants:
  acme:
    models: [m]
    keys:
      - `+hash+`
      - {hash: `+hash+`, expires: 2031-01-02T03:04:05Z}
      - hash: `+hash+`
        expires: 2031-01-02
      - {hash: `+hash+`, user: alice@example.com}
`)
	cfg, err := server.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := cfg.Tenants["acme"].Keys
	want := []server.KeyConfig{{Hash: hash}, {Hash: hash, Expires: time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Hash: hash, Expires: time.Date(2031, 1, 2, 0, 0, 0, 0, time.UTC)}, {Hash: hash, User: "alice@example.com"}}
	if len(keys) != len(want) {
		t.Fatalf("keys %+v", keys)
	}
	for i := range want {
		if keys[i].Hash != want[i].Hash || !keys[i].Expires.Equal(want[i].Expires) || keys[i].User != want[i].User {
			t.Errorf("keys[%d] = %+v, want %+v", i, keys[i], want[i])
		}
	}
	over, err := server.ApplyOverrides(cfg, nil, []string{"listen=127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	if got := over.Tenants["acme"].Keys; len(got) != 4 || !got[1].Expires.Equal(want[1].Expires) || !got[0].Expires.IsZero() || got[3].User != "alice@example.com" {
		t.Errorf("after an override: %+v", got)
	}
	bad := writeFile(t, dir, "bad.yaml", "tenants:\n  acme:\n    keys:\n      - {hash: "+hash+", expires: next week}\n")
	if _, err := server.LoadConfig(bad); err == nil || !strings.Contains(err.Error(), `line 4: expires "next week"`) {
		t.Errorf("a bad expiry: %v", err)
	}
	badUser := writeFile(t, dir, "baduser.yaml", "tenants:\n  acme:\n    models: [m]\n    keys:\n      - {hash: "+hash+", user: two words}\n")
	cfg, err = server.LoadConfig(badUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PluginsDir = t.TempDir()
	if _, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()}); err == nil || !strings.Contains(err.Error(), `tenants.acme: keys[0]: user "two words"`) {
		t.Errorf("a bad user: %v", err)
	}
}
