package cli_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/nodetest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpPlugins writes a plugin directory for agentic-host mcp: get_account
// (Go), text_stats (AssemblyScript), count_vowels (C, with its sidecar),
// the hostile Go plugin (trap, and the external tool fetch) and the
// AssemblyScript kit's test plugin (the policy by_agent: the agent
// "intern" is denied, external tools need approval). It returns the
// directory and the files' bytes.
func mcpPlugins(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	kit, _ := filepath.Abs("../../pdk/c")
	side, err := os.ReadFile("../../examples/plugins/count_vowels/count_vowels.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"get_account.wasm":  plugintest.GoPlugin(t, "../../examples/plugins/get_account"),
		"text_stats.wasm":   plugintest.AssemblyScriptPlugin(t, "../../examples/plugins/text_stats", "text_stats.ts", "../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"}),
		"count_vowels.wasm": plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil),
		"count_vowels.json": side,
		"hostile.wasm":      plugintest.GoPlugin(t, "../../plugins/testdata/hostile"),
		"kit.wasm":          plugintest.AssemblyScriptPlugin(t, "../../plugins/testdata/as", "kit.ts", "../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"}),
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// newVersion returns wasm with a custom section appended: a new version
// of the module (another hash) that behaves the same.
func newVersion(wasm []byte) []byte {
	name := "version-2"
	body := append(append([]byte{byte(len(name))}, name...), name...)
	return append(append(append([]byte(nil), wasm...), 0, byte(len(body))), body...)
}

// countingSite is a web site the external tool fetch may reach.
func countingSite(t *testing.T) (*httptest.Server, *atomic.Int64, []string) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "fetched "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, &hits, []string{"--allow-host", u.Host, "--allow-private"}
}

// TestMCPCommandErrors: mistakes on the command line exit 2 with a reason,
// before anything is served.
func TestMCPCommandErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644)
	file := filepath.Join(dir, "get_account.wasm")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no directory", []string{"mcp"}, "want --plugins DIR"},
		{"not a directory", []string{"mcp", "--plugins", file}, "not a directory"},
		{"an argument", []string{"mcp", "--plugins", dir, "extra"}, "unexpected arguments"},
		{"open without a key", []string{"mcp", "--plugins", dir, "--http", "0.0.0.0:0"}, "not a loopback address: set an API key"},
		{"all interfaces without a key", []string{"mcp", "--plugins", dir, "--http", ":0"}, "not a loopback address"},
		{"an empty key variable", []string{"mcp", "--plugins", dir, "--http", "127.0.0.1:0", "--api-key-env", "MY_EMPTY_KEY"}, "MY_EMPTY_KEY: the variable is empty"},
		{"a key for stdio", []string{"mcp", "--plugins", dir, "--api-key-env", "K"}, "--api-key-env is for --http"},
		{"a missing policy", []string{"mcp", "--plugins", dir, "--policy", "nope"}, `--policy nope: no plugin "nope" is loaded`},
		{"a plugin without policies", []string{"mcp", "--plugins", dir, "--policy", "get_account"}, "offers no policy"},
		{"a bad policy spec", []string{"mcp", "--plugins", dir, "--policy", ":x"}, "want PLUGIN or PLUGIN:NAME"},
		{"a bad config", []string{"mcp", "--plugins", dir, "--config", "k=v"}, "want PLUGIN:KEY=VALUE"},
		{"a bad approval", []string{"mcp", "--plugins", dir, "--approve", "no such tool!"}, "is not a tool name"},
		{"storage without kv", []string{"mcp", "--plugins", dir, "--storage", "memory:"}, "needs --kv"},
		{"a grant beyond the sandbox", []string{"mcp", "--plugins", dir, "--allow-host", "api.example.com", "--grant", "get_account=evil.example.org"}, `granted host "evil.example.org" is not among`},
		{"a bad grant", []string{"mcp", "--plugins", dir, "--grant", "kv"}, "want PLUGIN=HOST,kv,private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, "", tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q: want 2 saying %q", code, out, errOut, tc.want)
			}
		})
	}
}

// mcpHTTP starts agentic-host mcp --http on a free loopback port with the
// API key in the environment and returns its URL.
func mcpHTTP(t *testing.T, bin, key string, args ...string) (string, *proc) {
	t.Helper()
	p := &proc{t: t, name: "mcp --http", cmd: exec.Command(bin, append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "AGENTIC_MCP_API_KEY="+key)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		stopMCP(t, p)
		if t.Failed() {
			t.Logf("mcp --http stderr:\n%s", p.err.String())
		}
	})
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	guard := time.After(2 * time.Minute)
	for {
		if m := listening.FindStringSubmatch(p.err.String()); m != nil {
			return m[1], p
		}
		select {
		case <-p.done:
			t.Fatalf("mcp --http exited: %s", p.err.String())
		case <-guard:
			t.Fatalf("mcp --http does not listen (a guard against a hang): %s", p.err.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopMCP stops a server with SIGTERM, as a service manager would: it
// ends its sessions and exits 0.
func stopMCP(t *testing.T, p *proc) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("mcp --http exited %d on SIGTERM, want 0", code)
		}
	case <-time.After(time.Minute):
		t.Error("mcp --http did not stop on SIGTERM (a guard against a hang)")
		p.cmd.Process.Kill()
		<-p.done
	}
}

// bearerTransport adds an API key to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPGoClient: the Go SDK's client drives the real binary, over stdio
// (the client starts the command, as an MCP client's configuration does)
// and over streamable HTTP with an API key: it lists the tools, calls a
// Go, an AssemblyScript and a C plugin, sees notifications/tools/list_changed
// after a plugin file is replaced (and the new version serving), gets as
// tool errors a denial (the kit's policy denies the agent "intern"), a
// refusal of an external tool it cannot be asked to approve (no
// elicitation: the tool does not run) and a trap, and the process ends
// cleanly.
func TestMCPGoClient(t *testing.T) {
	bin := needBinary(t)
	const key = "test-key-7f3a"
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			dir, files := mcpPlugins(t)
			site, hits, allow := countingSite(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			args := append([]string{"--plugins", dir, "--policy", "kit"}, allow...)
			var (
				stdioErr lockedBuffer
				server   *proc
				endpoint string
			)
			if transport == "http" {
				endpoint, server = mcpHTTP(t, bin, key, args...)
			}
			serverLog := func() string {
				if server != nil {
					return server.err.String()
				}
				return stdioErr.String()
			}
			defer func() {
				if t.Failed() && server == nil {
					t.Logf("server stderr:\n%s", stdioErr.String())
				} // mcpHTTP logs the HTTP server's
			}()
			// connect connects a client named name: over stdio, a server
			// process of its own on the same directory.
			connect := func(name string, opts *mcp.ClientOptions) *mcp.ClientSession {
				t.Helper()
				var tr mcp.Transport
				if transport == "stdio" {
					cmd := exec.Command(bin, append([]string{"mcp"}, args...)...)
					cmd.Stderr = &stdioErr
					tr = &mcp.CommandTransport{Command: cmd}
				} else {
					tr = &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{key}}}
				}
				cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, opts).Connect(ctx, tr, nil)
				if err != nil {
					t.Fatalf("%s: connect: %v", name, err)
				}
				return cs
			}
			listed := func(cs *mcp.ClientSession) map[string]*mcp.Tool {
				t.Helper()
				tools := map[string]*mcp.Tool{}
				for tool, err := range cs.Tools(ctx, nil) {
					if err != nil {
						t.Fatal(err)
					}
					tools[tool.Name] = tool
				}
				return tools
			}
			callTool := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return res
			}

			changed := make(chan struct{}, 1)
			cs := connect("go-test", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				select {
				case changed <- struct{}{}:
				default:
				}
			}})
			tools := listed(cs)
			for _, name := range []string{"get_account", "text_stats", "count_vowels", "trap", "fetch", "remember"} {
				if tools[name] == nil {
					t.Errorf("%s is not listed", name)
				}
			}
			if got := tools["get_account"].Meta["agentic-host/module"]; got != sha(files["get_account.wasm"]) {
				t.Errorf("get_account is served by %v", got)
			}

			// A Go, an AssemblyScript and a C plugin.
			for _, tc := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"get_account", map[string]any{"account_id": "42"}, `"owner":"Katherine Johnson"`},
				{"text_stats", map[string]any{"text": "Hello there. General Kenobi!"}, `"words":4`},
				{"count_vowels", map[string]any{"text": "Hello, plugins"}, `"count":4`},
			} {
				res := callTool(cs, tc.tool, tc.args)
				if res.IsError || !strings.Contains(goText(res), tc.want) || res.Meta["agentic-host/module"] != sha(files[tc.tool+".wasm"]) {
					t.Errorf("%s: %s (from %v), want %s from %s", tc.tool, goText(res), res.Meta["agentic-host/module"], tc.want, sha(files[tc.tool+".wasm"]))
				}
			}

			// A hot swap: a new version of text_stats, written beside the
			// directory's file and renamed over it.
			swapped := newVersion(files["text_stats.wasm"])
			tmp := filepath.Join(dir, ".text_stats.wasm.tmp")
			if err := os.WriteFile(tmp, swapped, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "text_stats.wasm")); err != nil {
				t.Fatal(err)
			}
			guard := time.After(2 * time.Minute)
			for swappedIn := false; !swappedIn; {
				select {
				case <-changed:
					swappedIn = listed(cs)["text_stats"].Meta["agentic-host/module"] == sha(swapped)
				case <-time.After(100 * time.Millisecond):
					if strings.Contains(serverLog(), "plugin rejected") {
						t.Fatalf("the new version was refused:\n%s", serverLog())
					}
				case <-guard:
					t.Fatalf("no notifications/tools/list_changed naming the new version of text_stats %s (a guard against a hang)", sha(swapped))
				}
			}
			if res := callTool(cs, "text_stats", map[string]any{"text": "one two"}); res.IsError || !strings.Contains(goText(res), `"words":2`) || res.Meta["agentic-host/module"] != sha(swapped) {
				t.Errorf("after the swap: %s from %v, want 2 words from %s", goText(res), res.Meta["agentic-host/module"], sha(swapped))
			}

			// A denial: the policy refuses the agent "intern" every tool.
			intern := connect("intern", nil)
			res := callTool(intern, "get_account", map[string]any{"account_id": "42"})
			if !res.IsError || res.Meta["agentic-host/error"] != "denied" || !strings.Contains(goText(res), "interns may not call get_account") {
				t.Errorf("intern's call: %s %v, want a denial", goText(res), res.Meta)
			}
			if err := intern.Close(); err != nil && transport == "stdio" {
				t.Errorf("close: %v", err)
			}
			// An external tool needs approval, and this client cannot be
			// asked (it offers no elicitation): refused, not run.
			res = callTool(cs, "fetch", map[string]any{"url": site.URL + "/from-go", "method": "GET"})
			if !res.IsError || res.Meta["agentic-host/error"] != "approval_required" || !strings.Contains(goText(res), "--approve fetch") || hits.Load() != 0 {
				t.Errorf("fetch without elicitation: %s %v, %d fetches; want a refusal that says how to approve it, and none", goText(res), res.Meta, hits.Load())
			}
			res = callTool(cs, "trap", map[string]any{})
			if !res.IsError || res.Meta["agentic-host/error"] != "trap" || !strings.HasPrefix(goText(res), "[trap] ") {
				t.Errorf("trap: %s %v", goText(res), res.Meta)
			}
			if server != nil {
				// Stopped with a session open: it ends the session, exits 0.
				stopMCP(t, server)
			}
			if err := cs.Close(); err != nil && transport == "stdio" {
				t.Errorf("close: %v", err)
			}
		})
	}
}

func goText(res *mcp.CallToolResult) string {
	if res == nil {
		return "(no result)"
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// needMCPClient returns the directory of the TypeScript client
// (@modelcontextprotocol/sdk, pinned by its package-lock.json), installed.
func needMCPClient(t *testing.T) string {
	t.Helper()
	return nodetest.Client(t, "../../protocol/mcp/testdata/mcp-client", "@modelcontextprotocol/sdk", "TypeScript MCP client")
}

// tsReport is what client.mjs saw.
type tsReport struct {
	Error        string `json:"error"`
	Unauthorized string `json:"unauthorized"`
	Tools        []struct {
		Name        string         `json:"name"`
		Annotations map[string]any `json:"annotations"`
		Module      string         `json:"module"`
		Schema      map[string]any `json:"schema"`
	} `json:"tools"`
	Calls map[string]tsOutcome `json:"calls"`
	Swap  struct {
		Notified bool      `json:"notified"`
		Module   string    `json:"module"`
		Call     tsOutcome `json:"call"`
	} `json:"swap"`
	Denied   tsOutcome `json:"denied"`
	Trap     tsOutcome `json:"trap"`
	Approved tsOutcome `json:"approved"`
	Asked    string    `json:"asked"`
}

type tsOutcome struct {
	IsError bool           `json:"isError"`
	Text    string         `json:"text"`
	Meta    map[string]any `json:"meta"`
}

// TestMCPTypeScriptClient: the official TypeScript MCP client
// (@modelcontextprotocol/sdk, pinned in protocol/mcp/testdata/mcp-client) drives the
// real binary over stdio and over streamable HTTP: it lists the tools with
// their annotations, calls a Go, an AssemblyScript and a C plugin, sees
// notifications/tools/list_changed after a hot swap (and the new version
// serving), gets a denial and a trap as tool errors, and approves an
// external call when asked (elicitation), which then runs.
func TestMCPTypeScriptClient(t *testing.T) {
	client := needMCPClient(t)
	bin := needBinary(t)
	const key = "ts-key-93b1"
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			dir, files := mcpPlugins(t)
			site, hits, allow := countingSite(t)
			swapped := newVersion(files["text_stats.wasm"])
			next := filepath.Join(t.TempDir(), "text_stats.wasm")
			if err := os.WriteFile(next, swapped, 0o644); err != nil {
				t.Fatal(err)
			}
			serverArgs := append([]string{"--plugins", dir, "--policy", "kit"}, allow...)
			cfg := map[string]any{
				"transport": transport, "dir": dir, "site": site.URL + "/from-ts",
				"swap": map[string]any{"from": next, "to": "text_stats.wasm", "tool": "text_stats", "args": map[string]any{"text": "one two"}},
			}
			var server *proc
			switch transport {
			case "stdio":
				cfg["command"], cfg["args"] = bin, append([]string{"mcp"}, serverArgs...)
			case "http":
				cfg["url"], server = mcpHTTP(t, bin, key, serverArgs...)
				cfg["key"] = key
			}
			raw, _ := json.Marshal(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", filepath.Join(client, "client.mjs"), string(raw))
			cmd.Dir = client
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var rep tsReport
			if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || rep.Error != "" {
				t.Fatalf("client.mjs: %v %v %s\nstdout %s\nstderr %s", err, jerr, rep.Error, out, stderr.String())
			}
			defer func() {
				if t.Failed() {
					t.Logf("report: %s\nclient stderr: %s", out, stderr.String())
					if server != nil {
						t.Logf("server stderr: %s", server.err.String())
					}
				}
			}()

			if transport == "http" && (!strings.Contains(rep.Unauthorized, "HTTP 401") || !strings.Contains(rep.Unauthorized, "Unauthorized")) {
				t.Errorf("a client without the key: %q, want a 401", rep.Unauthorized)
			}
			tools := map[string]int{}
			for i, tool := range rep.Tools {
				tools[tool.Name] = i
			}
			for _, tc := range []struct {
				name, annotations string
			}{
				{"get_account", `{"destructiveHint":false,"idempotentHint":true,"openWorldHint":true,"readOnlyHint":true}`}, // --allow-host: every tool may reach the web
				{"fetch", `{"destructiveHint":true,"idempotentHint":false,"openWorldHint":true,"readOnlyHint":false}`},
				{"remember", `{"destructiveHint":true,"idempotentHint":false,"openWorldHint":true,"readOnlyHint":false}`},
			} {
				i, ok := tools[tc.name]
				if !ok {
					t.Errorf("%s is not listed", tc.name)
					continue
				}
				if got, _ := json.Marshal(rep.Tools[i].Annotations); string(got) != tc.annotations {
					t.Errorf("%s: annotations %s, want %s", tc.name, got, tc.annotations)
				}
			}
			if i, ok := tools["count_vowels"]; !ok || rep.Tools[i].Schema["required"] == nil || rep.Tools[i].Module != sha(files["count_vowels.wasm"]) {
				t.Errorf("count_vowels: %+v", rep.Tools[i])
			}
			for name, want := range map[string]string{
				"get_account":  `"owner":"Katherine Johnson"`,
				"text_stats":   `"words":4`,
				"count_vowels": `"count":4`,
			} {
				if c := rep.Calls[name]; c.IsError || !strings.Contains(c.Text, want) || c.Meta["agentic-host/module"] != sha(files[name+".wasm"]) {
					t.Errorf("%s: %+v, want %q", name, c, want)
				}
			}
			if !rep.Swap.Notified || rep.Swap.Module != sha(swapped) || rep.Swap.Call.IsError || rep.Swap.Call.Meta["agentic-host/module"] != sha(swapped) {
				t.Errorf("hot swap: %+v, want list_changed and the new version %s serving", rep.Swap, sha(swapped))
			}
			if d := rep.Denied; !d.IsError || d.Meta["agentic-host/error"] != "denied" || !strings.Contains(d.Text, "interns may not call get_account") {
				t.Errorf("denial: %+v", d)
			}
			if tr := rep.Trap; !tr.IsError || tr.Meta["agentic-host/error"] != "trap" || !strings.HasPrefix(tr.Text, "[trap] ") {
				t.Errorf("trap: %+v", tr)
			}
			if a := rep.Approved; a.IsError || !strings.Contains(a.Text, "fetched /from-ts") || hits.Load() != 1 || !strings.Contains(rep.Asked, "/from-ts") {
				t.Errorf("approved external call: %+v after being asked %q; %d fetches", a, rep.Asked, hits.Load())
			}
		})
	}
}

// TestMCPHoldsWidening: agentic-host mcp follows its directory, but a new
// version of a module that widens what it offers — here a new tool, and a
// changed description of one it had — is held: the client keeps the old
// tools (no "extra", the old description and module), and the server says
// why; a restart, a person's doing, loads what the directory holds.
func TestMCPHoldsWidening(t *testing.T) {
	bin := needBinary(t)
	const key = "test-key-held"
	dir := t.TempDir()
	base, wider := widenWasm(t), widenWasm(t, `VERSION="B"`, "EXTRA", `DESC="Report the version, and send it somewhere."`)
	if err := os.WriteFile(filepath.Join(dir, "w.wasm"), base, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tools := func(endpoint string) map[string]*mcp.Tool {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "held", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{key}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		out := map[string]*mcp.Tool{}
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			out[tool.Name] = tool
		}
		return out
	}
	endpoint, server := mcpHTTP(t, bin, key, "--plugins", dir)
	if got := tools(endpoint); got["report"] == nil || got["extra"] != nil {
		t.Fatalf("the first version's tools: %v", got)
	}
	tmp := filepath.Join(dir, ".w.tmp")
	if err := os.WriteFile(tmp, wider, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "w.wasm")); err != nil {
		t.Fatal(err)
	}
	for guard := time.After(2 * time.Minute); !strings.Contains(server.err.String(), "plugin version held"); {
		select {
		case <-guard:
			t.Fatalf("the widening version was not held (a guard against a hang):\n%s", server.err.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if log := server.err.String(); !strings.Contains(log, "tool extra: new") || !strings.Contains(log, "tool report: description") {
		t.Errorf("the server's log does not say what the version widens:\n%s", log)
	}
	got := tools(endpoint)
	if got["extra"] != nil || got["report"].Description != "Report the plugin's version." || got["report"].Meta["agentic-host/module"] != sha(base) {
		t.Errorf("while held, the client sees %v (report: %q from %v), want the old version's tools", got, got["report"].Description, got["report"].Meta["agentic-host/module"])
	}
	stopMCP(t, server)
	endpoint, _ = mcpHTTP(t, bin, key, "--plugins", dir)
	if got := tools(endpoint); got["extra"] == nil || got["report"].Meta["agentic-host/module"] != sha(wider) {
		t.Errorf("after a restart, the client sees %v, want the directory's version", got)
	}
}

// TestMCPGrants: mcp --grant gives one plugin a share of the sandbox the
// other flags describe: granted the store alone, the fetch tool may not
// reach the site its sandbox allows; granted the site, it does.
func TestMCPGrants(t *testing.T) {
	bin := needBinary(t)
	const key = "test-key-grants"
	dir, _ := mcpPlugins(t)
	site, hits, allow := countingSite(t)
	u, _ := url.Parse(site.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fetch := func(grant string) *mcp.CallToolResult {
		t.Helper()
		endpoint, server := mcpHTTP(t, bin, key, append([]string{"--plugins", dir, "--approve", "fetch", "--grant", grant}, allow...)...)
		defer stopMCP(t, server)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "grants", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{key}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": site.URL + "/granted", "method": "GET"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := fetch("hostile=kv"); !res.IsError || !strings.Contains(goText(res), "HTTP is not allowed for this plugin") || hits.Load() != 0 {
		t.Errorf("the hostile plugin granted the store alone: %s (%d hits), want HTTP denied", goText(res), hits.Load())
	}
	if res := fetch("hostile=" + u.Host + ",private"); res.IsError || !strings.Contains(goText(res), "fetched /granted") || hits.Load() != 1 {
		t.Errorf("the hostile plugin granted the site: %s (%d hits), want it fetched", goText(res), hits.Load())
	}
}

// TestMCPTenantKV: mcp's plugins keep their key-value store in --storage
// under --tenant, "default" unless named, the tenant chat --plugins runs
// them for: a value a chat's plugin call set is read by mcp's call of the
// same plugin on the same storage, and not by another tenant's.
func TestMCPTenantKV(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hostile.wasm"), plugintest.GoPlugin(t, "../../plugins/testdata/hostile"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file:" + t.TempDir()
	model, err := fakemodel.Start(fakemodel.Options{Respond: func(req fakemodel.Request) fakemodel.Reply {
		if req.Messages[len(req.Messages)-1].Role == "tool" {
			return fakemodel.DefaultReply(req)
		}
		return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{Name: "kv", Arguments: `{"key":"note","value":"from-chat"}`}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	code, out, errOut := run(t, "", "chat", "--base-url", model.URL(), "--plugins", dir, "--plugin-kv", "--storage", store, "--session", "kv", "remember it")
	if code != 0 || !strings.Contains(out, `"value":"from-chat"`) {
		t.Fatalf("chat's call: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	read := func(tenant ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := append([]string{"mcp", "--plugins", dir, "--kv", "--storage", store}, tenant...)
		var stderr lockedBuffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "kv", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "kv", Arguments: map[string]any{"key": "note"}})
		if err != nil || res.IsError {
			t.Fatalf("mcp %v: call kv: %v %+v\n%s", tenant, err, res, stderr.String())
		}
		return goText(res)
	}
	if got := read(); !strings.Contains(got, `"value":"from-chat"`) || !strings.Contains(got, `"found":true`) {
		t.Errorf("mcp (tenant default) reads %s, want chat's value", got)
	}
	if got := read("--tenant", "default"); !strings.Contains(got, `"value":"from-chat"`) {
		t.Errorf("mcp --tenant default reads %s, want chat's value", got)
	}
	if got := read("--tenant", "other"); !strings.Contains(got, `"found":false`) {
		t.Errorf("mcp --tenant other reads %s, want nothing", got)
	}
}
