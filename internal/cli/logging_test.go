package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestChatLogs: --logs prints one line per live event of the run on
// stderr — in JSON with --log-format json, each naming the session, the
// run, the agent, the step and the time since the run started — and
// --log-level info shows the plugins loaded. A bad --log-format or
// --log-level is a usage error on every subcommand.
func TestChatLogs(t *testing.T) {
	bin := needBinary(t)
	wasm := plugintest.GoPlugin(t, "../../examples/plugins/get_account")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "get_account.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file:" + t.TempDir()
	code, out, errOut := runBin(t, bin, "chat", "--offline", "--plugins", dir, "--storage", store, "--session", "s",
		"--logs", "--log-format", "json", "--log-level", "info", "get_account account_id=42")
	if code != 0 || !strings.Contains(out, "The get_account tool returned") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	var events []string
	loaded := false
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		msg, _ := rec["msg"].(string)
		if strings.HasPrefix(msg, "plugin ") && rec["plugin"] == "get_account" {
			loaded = true
			continue
		}
		if _, ok := rec["elapsed_ms"]; !ok {
			continue
		}
		if rec["session"] != "s" || rec["run"] == nil || rec["agent"] != "default" || rec["step"] == nil {
			t.Errorf("event line without its ids: %q", line)
		}
		events = append(events, msg)
	}
	if want := "run-start step step run-end"; strings.Join(events, " ") != want {
		t.Errorf("event lines %q, want %q\n%s", strings.Join(events, " "), want, errOut)
	}
	if !loaded {
		t.Errorf("no info line for the plugin loaded:\n%s", errOut)
	}
	for _, args := range [][]string{
		{"chat", "--offline", "--storage", "memory:", "--log-format", "xml", "hi"},
		{"transcript", "--log-level", "loud", "s"},
		{"plugin", "list", "--log-format", "yaml", "--plugins", dir},
		{"approvals", "--storage", store, "--log-level", "chatty"},
	} {
		code, _, errOut := runBin(t, bin, args...)
		if code != 2 || !strings.Contains(errOut, "--log-") {
			t.Errorf("%q: exit %d, %q; want a usage error naming the flag", args, code, errOut)
		}
	}
}
