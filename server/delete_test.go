package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// TestDeleteSessionRoute: DELETE /v1/sessions/{id} removes a finished
// session (its ledger, its A2A task), answers 409 for one parked for an
// approval unless forced (then its inbox entry goes too), and 404 for one
// that does not exist.
func TestDeleteSessionRoute(t *testing.T) {
	ts := startServer(t, serverSetup{})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/done/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("message: %d %s", code, body)
	}
	code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/done", "")
	rep := decodeJSON[struct {
		SessionID string `json:"session_id"`
		Events    int
	}](t, body)
	if code != 200 || rep.SessionID != "done" || rep.Events == 0 {
		t.Fatalf("DELETE of a finished session: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/done", ""); code != 404 {
		t.Errorf("GET after DELETE: %d %s, want 404", code, body)
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/done", ""); code != 404 {
		t.Errorf("a second DELETE: %d %s, want 404", code, body)
	}

	wasm := publishPost(t)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", wasm); code != 201 {
		t.Fatalf("plugin: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/parked/messages?wait=true", `{"text":"publish_post title=secret body=Hello"}`)
	if code != 200 || !strings.Contains(body, "approval_required") {
		t.Fatalf("parked run: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "DELETE", "/v1/sessions/parked", "")
	if code != 409 || !strings.Contains(body, "approval") || !strings.Contains(body, "force") {
		t.Errorf("DELETE of a parked session: %d %s, want 409 naming the approval and the way to force it", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/parked", ""); code != 200 {
		t.Errorf("a refused DELETE deleted the session: GET answers %d", code)
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/parked?force=true", ""); code != 200 {
		t.Errorf("a forced DELETE: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/approvals", ""); code != 200 || strings.Contains(body, "parked") {
		t.Errorf("approvals after the forced DELETE: %d %s, want none of the session", code, body)
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/nobody", ""); code != 404 {
		t.Errorf("DELETE of a missing session: %d %s, want 404", code, body)
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/sessions/x?force=maybe", ""); code != 400 {
		t.Errorf("DELETE with force=maybe: %d %s, want 400", code, body)
	}
}

// TestTenantDeleteLeavesNothing: two tenants with sessions (finished and
// parked for an approval), schedules, plugins (and their audit), A2A
// tasks, budgets, plugin values and a stored API key; DeleteTenant of one
// leaves nothing of it in the raw storage — no file under the file
// store's directory, no Redis key (SCAN on every primary of a cluster),
// names or holds its name, its texts or its ids — nor in the plugins
// directory, and the other tenant is intact.
func TestTenantDeleteLeavesNothing(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		store, err := file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		testTenantDelete(t, store, func(t *testing.T) map[string]string { return scanDir(t, dir) })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		store := openRedis(t, srv.URL())
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		testTenantDelete(t, store, func(t *testing.T) map[string]string {
			return scanRedis(t, func(fn func(c *goredis.Client) error) error { return fn(client) })
		})
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		c := redistest.StartCluster(t, 3)
		store := openRedis(t, "redis+cluster://"+strings.Join(c.Addrs(), ","))
		client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
		t.Cleanup(func() { client.Close() })
		testTenantDelete(t, store, func(t *testing.T) map[string]string {
			return scanRedis(t, func(fn func(c *goredis.Client) error) error {
				return client.ForEachMaster(t.Context(), func(_ context.Context, c *goredis.Client) error { return fn(c) })
			})
		})
	})
}

// memoryAndRedis is the stores a route's test runs on: memory (nil, the
// default of startServer) and a Redis server of its own.
func memoryAndRedis() map[string]func(t *testing.T) storage.Storage {
	return map[string]func(t *testing.T) storage.Storage{
		"memory": func(*testing.T) storage.Storage { return nil },
		"redis":  func(t *testing.T) storage.Storage { return openRedis(t, redistest.Start(t, redistest.Options{}).URL()) },
	}
}

func openRedis(t *testing.T, url string) *redis.Store {
	t.Helper()
	s, err := redis.Open(t.Context(), url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// scanDir returns every file under dir (by path) with its contents, and
// every empty directory (with "<empty directory>").
func scanDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if entries, err := os.ReadDir(path); err == nil && len(entries) == 0 && path != dir {
				out[path] = "<empty directory>"
			}
			return nil
		}
		b, err := os.ReadFile(path)
		out[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// scanRedis returns every key of every node each gives, with a dump of its
// value.
func scanRedis(t *testing.T, each func(fn func(c *goredis.Client) error) error) map[string]string {
	t.Helper()
	ctx := t.Context()
	var mu sync.Mutex
	out := map[string]string{}
	err := each(func(c *goredis.Client) error {
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			var v string
			switch typ := c.Type(ctx, k).Val(); typ {
			case "string":
				v = c.Get(ctx, k).Val()
			case "hash":
				v = fmt.Sprint(c.HGetAll(ctx, k).Val())
			case "stream":
				v = fmt.Sprint(c.XRange(ctx, k, "-", "+").Val())
			case "zset":
				v = fmt.Sprint(c.ZRange(ctx, k, 0, -1).Val())
			case "set":
				v = fmt.Sprint(c.SMembers(ctx, k).Val())
			case "list":
				v = fmt.Sprint(c.LRange(ctx, k, 0, -1).Val())
			default:
				v = "<" + typ + ">"
			}
			mu.Lock()
			out[k] = v
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// traces returns the entries of a scan that name or hold one of needles
// (or its hex, as Redis keys name namespaces).
func traces(scan map[string]string, needles ...string) []string {
	var out []string
	for k, v := range scan {
		for _, n := range needles {
			h := hex.EncodeToString([]byte(n))
			if strings.Contains(k, n) || strings.Contains(k, h) || strings.Contains(v, n) || strings.Contains(v, h) || v == "<empty directory>" {
				out = append(out, fmt.Sprintf("%.200q: %.200q", k, v))
				break
			}
		}
	}
	return out
}

func testTenantDelete(t *testing.T, store storage.Storage, scan func(t *testing.T) map[string]string) {
	var pluginsDir string
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) {
		pluginsDir = c.PluginsDir
		for name, tc := range c.Tenants {
			tc.BudgetUSDPerDay = 100
			c.Tenants[name] = tc
		}
	}})
	ctx := t.Context()
	wasm := publishPost(t)
	secrets := map[string][]string{}
	for _, tn := range []struct{ name, key string }{{"acme", ts.acme}, {"beta", ts.beta}} {
		word := "secret-" + tn.name
		do := func(method, path, body string, want int) string {
			t.Helper()
			code, out := ts.do(t, tn.key, method, path, body)
			if code != want {
				t.Fatalf("%s: %s %s: %d %s", tn.name, method, path, code, out)
			}
			return out
		}
		do("POST", "/v1/schedules", `{"id":"`+tn.name+`-sched","session":"`+tn.name+`-done","cron":"0 0 1 1 *","text":"`+word+`-schedule"}`, 201)
		if code, body := ts.doBytes(t, tn.key, "PUT", "/v1/plugins/publish_post", wasm); code != 201 {
			t.Fatalf("%s's plugin: %d %s", tn.name, code, body)
		}
		do("POST", "/v1/sessions/"+tn.name+"-done/messages?wait=true", `{"text":"remember `+word+`-done"}`, 200)
		// An attachment past the blob threshold (64 KiB): kept by
		// reference, in the tenant's blobs.
		notes := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(word+"-attachment ", 8000)))
		do("POST", "/v1/sessions/"+tn.name+"-files/messages?wait=true", `{"text":"read this","parts":[{"type":"file","mime":"text/plain","name":"notes.txt","data":"`+notes+`"}]}`, 200)
		parked := do("POST", "/v1/sessions/"+tn.name+"-parked/messages?wait=true", `{"text":"publish_post title=`+word+`-title body=Hello"}`, 200)
		approval := decodeJSON[struct {
			Approvals []struct {
				ApprovalID string `json:"approval_id"`
			}
		}](t, parked).Approvals
		if len(approval) != 1 {
			t.Fatalf("%s's parked run: %s", tn.name, parked)
		}
		a2a := do("POST", "/a2a/default", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":`+
			`{"kind":"message","messageId":"m-`+tn.name+`","role":"user","parts":[{"kind":"text","text":"remember `+word+`-a2a"}]},"configuration":{"blocking":true}}}`, 200)
		if !strings.Contains(a2a, `"result"`) {
			t.Fatalf("%s's A2A task: %s", tn.name, a2a)
		}
		if _, _, err := server.CreateKey(ctx, ts.kv(t), tn.name, server.KeyOptions{}); err != nil {
			t.Fatal(err)
		}
		// What a plugin keeps through the host's key-value functions.
		if err := ts.kv(t).Set(ctx, plugins.StorageNamespace+tn.name, "counter", []byte(word+"-plugin-value")); err != nil {
			t.Fatal(err)
		}
		secrets[tn.name] = []string{word, approval[0].ApprovalID}
	}
	acmeTraces := func() []string { return traces(scan(t), append([]string{"acme"}, secrets["acme"]...)...) }
	if len(acmeTraces()) == 0 {
		t.Fatal("the scan finds nothing of acme before the deletion: it cannot tell anything")
	}
	if _, err := os.Stat(filepath.Join(pluginsDir, "acme", "publish_post.wasm")); err != nil {
		t.Fatalf("acme's plugin file before the deletion: %v", err)
	}
	// The operator takes acme out of the configuration: the server stops.
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ts.srv.Close(closeCtx)

	rep, err := server.DeleteTenant(ctx, store, pluginsDir, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions < 4 || rep.Namespaces == 0 || rep.Keys == 0 || rep.APIKeys != 1 || rep.Plugins != 1 || rep.PluginBytes == 0 || rep.Blobs != 1 {
		t.Errorf("report %+v: want acme's sessions, namespaces, keys, its API key, its plugin and its blob", rep)
	}
	for _, tr := range acmeTraces() {
		t.Errorf("left of acme: %s", tr)
	}
	filepath.WalkDir(pluginsDir, func(path string, d fs.DirEntry, err error) error {
		if strings.Contains(path, "acme") {
			t.Errorf("left of acme in the plugins directory: %s", path)
		}
		return nil
	})
	// Beta is intact.
	after := scan(t)
	if len(traces(after, secrets["beta"]...)) == 0 {
		t.Error("the scan finds nothing of beta after the deletion of acme")
	}
	beta, err := storage.Prefix(store, "beta:")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"beta-done", "beta-parked"} {
		if events, err := beta.Load(ctx, id); err != nil || len(events) == 0 {
			t.Errorf("beta's session %s: %d events, %v", id, len(events), err)
		}
	}
	if keys, err := server.ListKeys(ctx, ts.kv(t)); err != nil || len(keys) != 1 || keys[0].Tenant != "beta" {
		t.Errorf("stored keys after the deletion: %+v, %v; want beta's", keys, err)
	}
	if _, err := os.Stat(filepath.Join(pluginsDir, "beta", "publish_post.wasm")); err != nil {
		t.Errorf("beta's plugin: %v", err)
	}
	if v, ok, err := ts.kv(t).Get(ctx, plugins.StorageNamespace+"beta", "counter"); err != nil || !ok || !bytes.Contains(v, []byte("secret-beta")) {
		t.Errorf("beta's plugin value: %q %v %v", v, ok, err)
	}
	again, err := server.DeleteTenant(ctx, store, pluginsDir, "acme")
	if err != nil || again.Sessions+again.Namespaces+again.Keys+again.APIKeys+again.Plugins != 0 {
		t.Errorf("a second DeleteTenant = %+v, %v; want nothing to do", again, err)
	}
}
