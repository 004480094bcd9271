package mcpclient_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/nodetest"
	"github.com/agentichost/agentic/protocol/mcpclient"
)

// TestTypeScriptServer: the tools of a server built with the official
// TypeScript SDK (testdata/mcp-server), over streamable HTTP and over
// stdio, join with their annotations' effects and answer; a tool's error
// is ErrToolError; over HTTP, a description the server changes while
// connected (its list_changed notification) is held, and approved.
func TestTypeScriptServer(t *testing.T) {
	dir := nodetest.Client(t, "testdata/mcp-server", "@modelcontextprotocol/sdk", "TypeScript MCP server")
	check := func(t *testing.T, src *mcpclient.Source) {
		t.Helper()
		if got := namesOf(src); !slices.Equal(got, []string{"ts__change", "ts__echo", "ts__fail", "ts__note"}) {
			t.Fatalf("tools %v", got)
		}
		if s := toolOf(t, src, "ts__echo").Spec(); s.Effect != host.EffectRead || !s.Idempotent || !strings.Contains(string(s.InputSchema), `"text"`) {
			t.Errorf("echo: %+v", s)
		}
		if s := toolOf(t, src, "ts__note").Spec(); s.Effect != host.EffectWrite {
			t.Errorf("note: %+v", s)
		}
		if s := toolOf(t, src, "ts__fail").Spec(); s.Effect != host.EffectExternal {
			t.Errorf("fail: %+v", s)
		}
		if res, err := call(t, toolOf(t, src, "ts__echo"), `{"text":"héllo"}`); err != nil || res.Output != "echo: héllo" || !strings.HasPrefix(res.Source, "mcp:ts/echo@sha256:") {
			t.Errorf("echo: %+v %v", res, err)
		}
		if _, err := call(t, toolOf(t, src, "ts__fail"), `{}`); !errors.Is(err, mcpclient.ErrToolError) || !strings.Contains(err.Error(), "as it always does") {
			t.Errorf("fail: %v", err)
		}
	}
	t.Run("http", func(t *testing.T) {
		cmd := exec.Command("node", "server.mjs", "http")
		cmd.Dir = dir
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		var addr struct{ URL string }
		if err != nil || json.Unmarshal([]byte(line), &addr) != nil {
			t.Fatalf("the server's first line %q: %v", line, err)
		}
		src := open(t, mcpclient.Server{Name: "ts", URL: addr.URL, TrustAnnotations: true})
		check(t, src)
		if _, err := call(t, toolOf(t, src, "ts__change"), `{}`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "echo's new description held", func() bool { return len(src.Held()) == 1 })
		h := src.Held()[0]
		if h.Name != "echo" || h.Old == nil || h.Old.Description != "Echo the text." || !strings.Contains(h.New.Description, "mail it") || slices.Contains(namesOf(src), "ts__echo") {
			t.Fatalf("held %+v; serving %v", h, namesOf(src))
		}
		if err := src.Approve("echo", h.Digest); err != nil || toolOf(t, src, "ts__echo").Spec().Description != h.New.Description {
			t.Errorf("approve: %v", err)
		}
	})
	t.Run("stdio", func(t *testing.T) {
		check(t, open(t, mcpclient.Server{Name: "ts", Command: []string{"node", dir + "/server.mjs", "stdio"}, TrustAnnotations: true}))
	})
}
