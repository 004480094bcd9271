package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestChatTakesMCPServers: agentic-host chat offers the tools of MCP
// servers named on its command line — here agentic-host mcp itself, over
// stdio (--mcp-stdio) and over streamable HTTP with its API key as a
// bearer token (--mcp, --mcp-token-env) — under NAME__TOOL, and the
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
		{"stdio", []string{"--mcp-stdio", "acct=" + bin + " mcp --plugins " + dir}},
		{"http", []string{"--mcp", "acct=" + endpoint, "--mcp-token-env", "acct=ACCT_KEY"}},
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
}
