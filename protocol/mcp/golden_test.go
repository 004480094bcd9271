package mcp_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
)

var update = flag.Bool("update", false, "rewrite the golden sessions of testdata/")

// moduleHash matches a module's content hash, which follows the toolchain
// that built the plugin, not the protocol.
var moduleHash = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// TestGoldenStdioSession: a whole session over stdio, as bytes: the
// handshake of revision 2025-11-25, the tool list, a call, a call to a
// tool that does not exist, and a call whose arguments the tool refuses.
// testdata/stdio-session.txt holds each request (">") and the server's
// answer ("<"); a change of what the server writes shows there (go test
// ./protocol/mcp -run TestGoldenStdioSession -update rewrites it, for a
// change that is meant).
func TestGoldenStdioSession(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)}, plugins.Limits{}, mcp.Options{Name: "agentic-host", Version: "golden"})
	r := startRawStdio(t, e.srv)
	var b strings.Builder
	exchange := func(id, req string) {
		t.Helper()
		r.send(req)
		b.WriteString("> " + req + "\n")
		if id == "" {
			return
		}
		b.WriteString("< " + moduleHash.ReplaceAllString(r.answer(id).raw, "sha256:MODULE") + "\n")
	}
	exchange("1", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"golden","version":"1"}}}`)
	exchange("", `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	exchange("2", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	exchange("3", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_account","arguments":{"account_id":"42"}}}`)
	exchange("4", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	exchange("5", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"get_account","arguments":{"account_id":42}}}`)
	got := b.String()
	path := filepath.Join("testdata", "stdio-session.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestGoldenStdioSession -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the session over stdio:\n%s\nthe golden session (%s):\n%s", got, path, want)
	}
}
