package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestChatTakesMCPServers: agentic-host chat offers the tools of MCP
// servers named on its command line — here agentic-host mcp itself, over
// stdio (--mcp-stdio) and over streamable HTTP with its API key as a
// bearer token (--mcp, --mcp-token-env), its annotations trusted
// (--mcp-trust-annotations) — under NAME__TOOL, and the
// transcript names the server, the tool and its definition's digest. A
// server that cannot be reached, or a token variable not set, is a clear
// error before anything runs.
func TestChatTakesMCPServers(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	const key = "mcp-key-9b2e"
	endpoint, _ := mcpHTTP(t, bin, key, "--plugins", dir)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stdio", []string{"--mcp-stdio", "acct=" + bin + " mcp --plugins " + dir, "--mcp-trust-annotations", "acct"}},
		{"http", []string{"--mcp", "acct=" + endpoint, "--mcp-token-env", "acct=ACCT_KEY", "--mcp-trust-annotations", "acct"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := "file:" + t.TempDir()
			args := append([]string{"chat", "--offline", "--storage", store, "--session", "m"}, tc.args...)
			code, out, errOut := runBinEnv(t, bin, []string{"ACCT_KEY=" + key}, append(args, "Please acct__get_account account_id=42")...)
			if code != 0 || !strings.Contains(out, "acct__get_account") || !strings.Contains(out, `"plan":"team"`) {
				t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
			}
			code, out, errOut = runBin(t, bin, "transcript", "--storage", store, "m")
			if code != 0 || !strings.Contains(out, `mcp:acct/get_account@sha256:`) {
				t.Errorf("transcript: exit %d\n%s\n%s", code, out, errOut)
			}
			if strings.Contains(out, key) {
				t.Error("the transcript holds the API key")
			}
		})
	}
	code, _, errOut := runBinEnv(t, bin, nil, "chat", "--offline", "--storage", "memory:", "--mcp", "acct="+endpoint, "--mcp-token-env", "acct=ACCT_KEY", "hi")
	if code != 2 || !strings.Contains(errOut, "$ACCT_KEY is not set") {
		t.Errorf("a token variable not set: exit %d %s", code, errOut)
	}
	code, _, errOut = runBin(t, bin, "chat", "--offline", "--storage", "memory:", "--mcp", "acct="+endpoint, "hi")
	if code != 1 || !strings.Contains(errOut, "MCP server acct") || !strings.Contains(errOut, "Unauthorized") {
		t.Errorf("a server that refuses us: exit %d %s", code, errOut)
	}
	code, _, errOut = runBin(t, bin, "chat", "--offline", "--storage", "memory:", "--mcp", "acct="+endpoint, "--mcp-trust-annotations", "nope", "hi")
	if code != 2 || !strings.Contains(errOut, "no --mcp or --mcp-stdio server is named nope") {
		t.Errorf("trusting a server not named: exit %d %s", code, errOut)
	}
}

// TestMCPGateway: agentic-host mcp serves the tools of another MCP server
// (--mcp-stdio; here agentic-host mcp itself, on another directory) beside
// its plugins', as NAME__TOOL: a client built with the official Go SDK
// lists both and calls the other server's through it.
func TestMCPGateway(t *testing.T) {
	bin := needBinary(t)
	inner, outer := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(inner, "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	kit := cKitDir(t)
	if err := os.WriteFile(filepath.Join(outer, "v.wasm"), plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"version.c", kit + "/agentic.c"}, []string{kit}, []string{`-DVERSION="outer"`}), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr lockedBuffer
	cmd := exec.Command(bin, "mcp", "--plugins", outer, "--mcp-stdio", "acct="+bin+" mcp --plugins "+inner, "--mcp-trust-annotations", "acct")
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Contains(names, "acct__get_account") || !slices.Contains(names, "version") {
		t.Fatalf("tools %v, want the plugin's and the other server's", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "acct__get_account", Arguments: map[string]any{"account_id": "42"}})
	if err != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"plan":"team"`) {
		t.Fatalf("the other server's tool through the gateway: %+v %v\n%s", res, err, stderr.String())
	}
}

// mcpEnvServer builds testdata/mcpenv, an MCP server over stdio whose
// tool env answers its environment.
func mcpEnvServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpenv")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/mcpenv").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/mcpenv: %v\n%s", err, out)
	}
	return bin
}

// TestMCPStdioEnvironment: a --mcp-stdio server gets PATH, HOME and the
// like, and the variables --mcp-env names for it, and no other of the
// host's: not the provider's key, not another MCP server's token. Its
// tool's readOnlyHint is trusted only with --mcp-trust-annotations.
func TestMCPStdioEnvironment(t *testing.T) {
	bin := needBinary(t)
	server := mcpEnvServer(t)
	env := []string{"OPENROUTER_API_KEY=sk-never-shown-31", "OTHER_TOKEN=tok-never-shown-32", "GRANTED=yes-granted"}
	for _, tc := range []struct {
		name  string
		args  []string
		given bool
	}{
		{"none named", nil, false},
		{"one named", []string{"--mcp-env", "envsrv=GRANTED"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"chat", "--offline", "--storage", "memory:", "--approve", "envsrv__env", "--mcp-stdio", "envsrv=" + server}, tc.args...)
			code, out, errOut := runBinEnv(t, bin, env, append(args, "Please envsrv__env")...)
			if code != 0 || !strings.Contains(out, "PATH=") {
				t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
			}
			if strings.Contains(out, "never-shown") {
				t.Errorf("the server sees the host's secrets:\n%s", out)
			}
			if strings.Contains(out, "yes-granted") != tc.given {
				t.Errorf("GRANTED given: %v, want %v:\n%s", !tc.given, tc.given, out)
			}
		})
	}
	// Its annotations (env claims readOnlyHint) are not trusted unless
	// --mcp-trust-annotations says so: the call waits for approval.
	code, out, errOut := runBinEnv(t, bin, env, "chat", "--offline", "--storage", "memory:", "--mcp-stdio", "envsrv="+server, "Please envsrv__env")
	if code != 3 || !strings.Contains(out, "tool envsrv__env waits for approval") || strings.Contains(out, "PATH=") {
		t.Errorf("annotations not trusted: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runBinEnv(t, bin, env, "chat", "--offline", "--storage", "memory:", "--mcp-stdio", "envsrv="+server, "--mcp-trust-annotations", "envsrv", "Please envsrv__env")
	if code != 0 || !strings.Contains(out, "PATH=") {
		t.Errorf("annotations trusted: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runBinEnv(t, bin, env, "chat", "--offline", "--storage", "memory:", "--mcp-stdio", "envsrv="+server, "--mcp-env", "envsrv=NOT_SET_ANYWHERE", "hi")
	if code != 2 || !strings.Contains(errOut, "$NOT_SET_ANYWHERE is not set") {
		t.Errorf("a variable not set: exit %d %s", code, errOut)
	}
	code, _, errOut = runBinEnv(t, bin, env, "chat", "--offline", "--storage", "memory:", "--mcp-stdio", "envsrv="+server, "--mcp-env", "other=GRANTED", "hi")
	if code != 2 || !strings.Contains(errOut, "no --mcp-stdio server is named other") {
		t.Errorf("a server not named: exit %d %s", code, errOut)
	}
}

// TestMCPNameCollision: MCP servers whose tools could take one name
// (a__b__c: server a's b__c, server a__b's c) are refused before anything
// starts, by chat and by mcp alike.
func TestMCPNameCollision(t *testing.T) {
	bin := needBinary(t)
	for _, args := range [][]string{
		{"chat", "--offline", "--storage", "memory:", "--mcp", "a=http://127.0.0.1:1/mcp", "--mcp-stdio", "a__b=/nonexistent/server", "hi"},
		{"mcp", "--plugins", t.TempDir(), "--mcp", "a=http://127.0.0.1:1/mcp", "--mcp", "a__b=http://127.0.0.1:2/mcp"},
	} {
		code, _, errOut := runBin(t, bin, args...)
		if code != 2 || !strings.Contains(errOut, "a (a__) and a__b (a__b__)") {
			t.Errorf("%s: exit %d %s", args[0], code, errOut)
		}
	}
}
