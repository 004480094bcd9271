package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// Helpers shared by the server's tests: routes read from the sources,
// servers over a chosen store, requests, waiting, event streams, plugins.

// route is one route the server registers.
type route struct {
	Method, Path string
	// Authed tells that the route goes through the API key check.
	Authed bool
}

func (r route) String() string { return r.Method + " " + r.Path }

// registeredRoutes reads the routes the server registers from the package's
// sources: every pattern given to handle (the authenticated routes) or to
// s.mux.Handle / s.mux.HandleFunc, so that a test that covers "every route"
// covers a route added tomorrow too. The catch-all "/" (404 for any other
// path) is left out. A pattern that is not a string literal fails the test:
// it could not be checked.
func registeredRoutes(t *testing.T) []route {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []route
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The body of the handle helper registers its argument: skip it.
		var helper *ast.FuncLit
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
				if id, ok := as.Lhs[0].(*ast.Ident); ok && id.Name == "handle" {
					helper, _ = as.Rhs[0].(*ast.FuncLit)
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			if helper != nil && n == ast.Node(helper) {
				return false
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			authed := false
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				if fn.Name != "handle" {
					return true
				}
				authed = true
			case *ast.SelectorExpr:
				mux, ok := fn.X.(*ast.SelectorExpr)
				if !ok || mux.Sel.Name != "mux" || (fn.Sel.Name != "Handle" && fn.Sel.Name != "HandleFunc") {
					return true
				}
			default:
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Fatalf("%s: a route whose pattern is not a string literal: the tests cannot see it", fset.Position(call.Pos()))
			}
			pattern, _ := strconv.Unquote(lit.Value)
			method, path, ok := strings.Cut(pattern, " ")
			if !ok {
				if pattern == "/" {
					return true
				}
				t.Fatalf("%s: route %q has no method", fset.Position(call.Pos()), pattern)
			}
			out = append(out, route{Method: method, Path: path, Authed: authed})
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("found no routes in the sources")
	}
	return out
}

// serverSetup is what startServer builds a test server from.
type serverSetup struct {
	// Store is the storage. Default: a memory store.
	Store storage.Storage
	// Mutate changes the configuration (tenants acme and beta, each with
	// a key, on hosttest's default model, plugins in a temporary
	// directory).
	Mutate func(*server.Config)
	// Listener wraps the test server's listener. Default: none.
	Listener func(net.Listener) net.Listener
	// Prepare is called with the server before it serves. Default: none.
	Prepare func(*server.Server)
	// Options changes the server's options before it is built (its
	// schedules' clock). Default: none.
	Options func(*server.Options)
	// HTTP changes the test server's http.Server before it starts.
	// Default: none.
	HTTP func(*http.Server)
}

// startServer is newTestServer with a setup.
func startServer(t testing.TB, setup serverSetup) *testServer {
	t.Helper()
	ts := &testServer{store: setup.Store, model: hosttest.NewModel(), acme: "ak_test_acme", beta: "ak_test_beta"}
	if ts.store == nil {
		ts.store = memory.New()
	}
	// The compiled plugins are cached where plugintest caches them.
	cfg := server.Config{PluginsDir: t.TempDir(), PluginCacheDir: filepath.Join(plugintest.CacheDir(), "wazero"), Tenants: map[string]server.TenantConfig{
		"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey(ts.acme)}}, Models: []string{hosttest.DefaultModel}},
		"beta": {Keys: []server.KeyConfig{{Hash: server.HashKey(ts.beta)}}, Models: []string{hosttest.DefaultModel}},
	}}
	if setup.Mutate != nil {
		setup.Mutate(&cfg)
	}
	opts := server.Options{Config: cfg, Storage: ts.store, Model: ts.model}
	if setup.Options != nil {
		setup.Options(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv = srv
	if setup.Prepare != nil {
		setup.Prepare(srv)
	}
	ts.Server = httptest.NewUnstartedServer(srv)
	if setup.Listener != nil {
		ts.Server.Listener = setup.Listener(ts.Server.Listener)
	}
	if setup.HTTP != nil {
		setup.HTTP(ts.Server.Config)
	}
	ts.Server.Start()
	t.Cleanup(func() {
		ts.Server.CloseClientConnections()
		ts.Server.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	return ts
}

// kv returns the key-value store of the server's storage.
func (ts *testServer) kv(t *testing.T) storage.KV {
	t.Helper()
	kv, ok := ts.store.(storage.KV)
	if !ok {
		t.Fatal("the store keeps no values")
	}
	return kv
}

// doBytes sends a request with a binary body.
func (ts *testServer) doBytes(t *testing.T, key, method, path string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/wasm")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// decodeJSON decodes body into a value of type T, failing the test when it
// is not that JSON.
func decodeJSON[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return v
}

// waitFor polls cond every 10ms until it holds, failing the test with what
// after 15s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sessionState returns the state of the tenant's session (key), "" when
// it cannot be read.
func (ts *testServer) sessionState(t *testing.T, key, id string) string {
	t.Helper()
	code, body := ts.do(t, key, "GET", "/v1/sessions/"+id, "")
	if code != 200 {
		return ""
	}
	return decodeJSON[struct {
		Status struct{ State string }
	}](t, body).Status.State
}

// waitState waits for the session to be in state.
func (ts *testServer) waitState(t *testing.T, key, id, state string) {
	t.Helper()
	waitFor(t, "session "+id+" to be "+state, func() bool { return ts.sessionState(t, key, id) == state })
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Name, ID, Data string
}

// sseReader reads server-sent events.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4<<20)
	return &sseReader{sc: sc}
}

// next returns the next event (comments skipped); false at the stream's
// end, or when it broke off mid-event.
func (r *sseReader) next() (sseEvent, bool) {
	var e sseEvent
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if e.Data != "" {
				return e, true
			}
			e = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			e.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			e.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			e.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return sseEvent{}, false
}

// publishPost and getAccount are the example plugins, built from source.
func publishPost(t *testing.T) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/publish_post")
}

func getAccount(t *testing.T) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/get_account")
}

// offeredTools returns the names of the tools the model was offered in its
// last request for a message containing text.
func offeredTools(t *testing.T, m *hosttest.Model, text string) []string {
	t.Helper()
	reqs := m.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		msgs := reqs[i].Messages
		if len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1].Text(), text) {
			continue
		}
		var names []string
		for _, tool := range reqs[i].Tools {
			names = append(names, tool.Name)
		}
		return names
	}
	t.Fatalf("the model had no request for %q", text)
	return nil
}

// writeFile writes a file under dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// newRequest makes a request of the test server with key.
func newRequest(ts *testServer, key, method, path, body string) (*http.Request, error) {
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req, nil
}
