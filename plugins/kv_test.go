package plugins_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
)

// A storage.KV is a KV once adapted, and the stores implement it.
var (
	_ storage.KV = (*memory.Store)(nil)
	_ storage.KV = (*file.Store)(nil)
	_ storage.KV = (*redis.Store)(nil)
)

// blog is a test endpoint for publish_post that counts the posts it gets.
type blog struct {
	srv   *httptest.Server
	posts atomic.Int64
}

func newBlog(t *testing.T) *blog {
	b := &blog{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"id": "post-" + string(rune('0'+n)), "url": "https://blog.example/p"})
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// host runs publish_post in a runtime of its own (what one host process
// has) whose key-value store is kv, and returns its tool.
func (b *blog) host(t *testing.T, kv storage.KV, logs *logBuffer) host.Tool {
	t.Helper()
	u, _ := url.Parse(b.srv.URL)
	if logs == nil {
		logs = &logBuffer{}
	}
	rt := plugintest.Runtime(t, plugins.Options{KV: kv, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	m := plugintest.Load(t, rt, plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t), Tenant: "acme",
		Limits: plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true},
		Config: map[string]string{"endpoint": b.srv.URL + "/api/posts"}})
	tool, _ := m.Tool("publish_post")
	return tool
}

func publish(t *testing.T, tool host.Tool, callID string) (map[string]any, error) {
	t.Helper()
	res, err := tool.Call(context.Background(), host.ToolCall{ID: callID, SessionID: "s1", Name: "publish_post",
		Input: json.RawMessage(`{"title":"Hello","body":"First post."}`)})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// TestKVInHostStorage: the plugins' key-value store kept in the host's
// storage. publish_post records each call id it published in it; a call
// re-run with the same id (as after a crash) must not post again, even in
// a new process (file storage) or on another host (Redis).
func TestKVInHostStorage(t *testing.T) {
	t.Run("file, across a restart", func(t *testing.T) {
		dir := t.TempDir()
		b := newBlog(t)
		st1, err := file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		first, err := publish(t, b.host(t, st1, nil), "call-1")
		if err != nil || first["status"] != "published" {
			t.Fatalf("first call: %v, %v", first, err)
		}
		st1.Close()
		if files, _ := filepath.Glob(filepath.Join(dir, "kv", "*", "*")); len(files) != 1 {
			t.Fatalf("value files in the store: %q, want 1", files)
		}

		// A new process: a new store over the same directory, a new runtime.
		st2, err := file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st2.Close()
		again, err := publish(t, b.host(t, st2, nil), "call-1")
		if err != nil || again["replayed"] != true || again["post_id"] != first["post_id"] {
			t.Fatalf("re-run after the restart: %v, %v", again, err)
		}
		if n := b.posts.Load(); n != 1 {
			t.Fatalf("the blog got %d posts, want 1", n)
		}
	})

	t.Run("redis, across hosts", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		b := newBlog(t)
		open := func() *redis.Store {
			s, err := redis.Open(t.Context(), srv.URL(), redis.Options{Prefix: "kvtest"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		hostA, hostB := b.host(t, open(), nil), b.host(t, open(), nil)
		first, err := publish(t, hostA, "call-7")
		if err != nil || first["status"] != "published" {
			t.Fatalf("host A: %v, %v", first, err)
		}
		again, err := publish(t, hostB, "call-7")
		if err != nil || again["replayed"] != true || again["post_id"] != first["post_id"] {
			t.Fatalf("host B re-running host A's call: %v, %v", again, err)
		}
		if n := b.posts.Load(); n != 1 {
			t.Fatalf("the blog got %d posts, want 1", n)
		}
	})

	t.Run("a failing store", func(t *testing.T) {
		// The plugin learns that the store is unavailable, not why; the
		// host's log says why. Nothing is posted without the record.
		b := newBlog(t)
		st := memory.New()
		st.Close()
		logs := &logBuffer{}
		_, err := publish(t, b.host(t, st, logs), "call-9")
		if err == nil || !strings.Contains(err.Error(), "the key-value store is unavailable") || strings.Contains(err.Error(), "closed") {
			t.Fatalf("with a closed store: %v", err)
		}
		if !strings.Contains(logs.String(), "plugin key-value store failed") || !strings.Contains(logs.String(), storage.ErrClosed.Error()) {
			t.Errorf("the host log does not say why:\n%s", logs.String())
		}
		if n := b.posts.Load(); n != 0 {
			t.Fatalf("the blog got %d posts without an idempotency record, want 0", n)
		}
	})
}

// TestKVNamespaces: a tenant's values live in the storage namespace
// plugins:<tenant> of Options.KV, apart from every other tenant's.
func TestKVNamespaces(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	rt := plugintest.Runtime(t, plugins.Options{KV: st})
	acme := plugintestLoad(t, rt, "hostile", hostileWasm(t), "acme", plugins.Limits{KV: true})
	globex := plugintestLoad(t, rt, "hostile", hostileWasm(t), "globex", plugins.Limits{KV: true})
	if res, err := callTool(t, acme, "kv", `{"key":"k","value":"acme's"}`); err != nil {
		t.Fatalf("set: %s, %v", res.Output, err)
	}
	if res, err := callTool(t, globex, "kv", `{"key":"k"}`); err != nil || !strings.Contains(res.Output, `"found":false`) {
		t.Fatalf("another tenant sees acme's key: %s, %v", res.Output, err)
	}
	if v, ok, err := st.Get(ctx, plugins.StorageNamespace+"acme", "k"); !ok || err != nil || string(v) != "acme's" {
		t.Fatalf("in the store: %q, %v, %v", v, ok, err)
	}
}

// TestJournalKV: publish_post's call (a key-value read, a POST, a
// key-value write) journaled, then replayed as a host that died would
// find it: after its POST's answer, on a store the write never reached,
// the read and the POST are answered from the journal and only the write
// is done, live; from the whole journal, nothing is done at all.
func TestJournalKV(t *testing.T) {
	b := newBlog(t)
	call := func(tool host.Tool, j host.Journal) error {
		_, err := tool.Call(context.Background(), host.ToolCall{ID: "call-1", SessionID: "s1", Name: "publish_post",
			Input: json.RawMessage(`{"title":"Hello","body":"First post."}`), Journal: j})
		return err
	}
	full := &memJournal{}
	if err := call(b.host(t, memory.New(), nil), full); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range hostCalls(full.entries) {
		ops = append(ops, e.Op)
	}
	if want := []string{ledger.JournalKVGet, ledger.JournalHTTPSend, ledger.JournalHTTP, ledger.JournalKVSet}; !slices.Equal(ops, want) {
		t.Fatalf("the journal's host calls: %v, want %v", ops, want)
	}
	const key = "publish_post/call-1"
	for _, tc := range []struct {
		name    string
		prefix  []ledger.JournalEntry
		written bool // the replay writes the record
	}{
		{"after the POST's answer", full.prefixAt(t, ledger.JournalHTTP, 1), true},
		{"the whole journal", slices.Clone(full.entries), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := memory.New()
			if err := call(b.host(t, kv, nil), &memJournal{source: full.source, entries: tc.prefix}); err != nil {
				t.Fatal(err)
			}
			if n := b.posts.Load(); n != 1 {
				t.Errorf("the blog got %d posts, want the first call's only", n)
			}
			_, found, err := kv.Get(context.Background(), plugins.StorageNamespace+"acme", key)
			if err != nil || found != tc.written {
				t.Errorf("the record after the replay: found %v (%v), want %v", found, err, tc.written)
			}
		})
	}
}
