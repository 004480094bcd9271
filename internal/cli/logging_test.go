package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
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

// logged returns the messages of the JSON log lines of stderr that are
// live events (they have elapsed_ms), for session (any, when "").
func logged(t *testing.T, stderr, session string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if _, ok := rec["elapsed_ms"]; ok && (session == "" || rec["session"] == session) {
			out = append(out, rec)
		}
	}
	return out
}

// messages returns the records' messages, space-separated.
func messages(recs []map[string]any) string {
	var out []string
	for _, r := range recs {
		out = append(out, r["msg"].(string))
	}
	return strings.Join(out, " ")
}

// TestLogsEventVocabulary: --logs prints the events that runs do not
// always tell: auto-resume (with its attempt, and the run-start resumed),
// poke (a task's reminder) and compaction.
func TestLogsEventVocabulary(t *testing.T) {
	t.Run("auto-resume", func(t *testing.T) {
		dir := t.TempDir()
		leftRun(t, dir, "dead", "dead")
		code, _, errOut := run(t, "", "chat", "--offline", "--storage", "file:"+dir, "--session", "other", "--auto-resume",
			"--logs", "--log-format", "json", "hi")
		if code != 0 {
			t.Fatalf("exit %d %s", code, errOut)
		}
		recs := logged(t, errOut, "dead")
		if got, want := messages(recs), "auto-resume run-start step run-end"; got != want {
			t.Fatalf("the dead session's event lines %q, want %q\n%s", got, want, errOut)
		}
		if recs[0]["attempt"] != float64(1) || recs[1]["resumed"] != true {
			t.Errorf("auto-resume %v, run-start %v", recs[0], recs[1])
		}
	})
	t.Run("poke", func(t *testing.T) {
		model, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{
			{Text: "Here is a title: Hello."},
			{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"Hello"}`}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer model.Close()
		schema := filepath.Join(t.TempDir(), "title.json")
		os.WriteFile(schema, []byte(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`), 0o644)
		code, out, errOut := run(t, "", "task", "--base-url", model.URL(), "--model", "fake/echo", "--storage", "memory:", "--session", "t",
			"--prompt", "Write a title.", "--schema", schema, "--logs", "--log-format", "json")
		if code != 0 || !strings.Contains(out, "Hello") {
			t.Fatalf("exit %d %s %s", code, out, errOut)
		}
		if got, want := messages(logged(t, errOut, "t")), "run-start step poke step run-end"; got != want {
			t.Errorf("event lines %q, want %q\n%s", got, want, errOut)
		}
	})
	t.Run("compaction", func(t *testing.T) {
		// Every pass reports most of a 1000-token window used: once
		// the session holds more than the turns kept verbatim, a run
		// compacts before its pass.
		model, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"fake/window": 1000},
			Respond: func(req fakemodel.Request) fakemodel.Reply {
				r := fakemodel.DefaultReply(req)
				r.Usage = &fakemodel.Usage{PromptTokens: 900, CompletionTokens: 10}
				return r
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer model.Close()
		store := "file:" + t.TempDir()
		var all []string
		for i := range 4 {
			code, _, errOut := run(t, "", "chat", "--base-url", model.URL(), "--model", "fake/window", "--storage", store, "--session", "c",
				"--logs", "--log-format", "json", fmt.Sprintf("turn %d", i))
			if code != 0 {
				t.Fatalf("turn %d: exit %d %s", i, code, errOut)
			}
			all = append(all, messages(logged(t, errOut, "c")))
		}
		if got := strings.Join(all, " | "); !strings.Contains(got, "run-start compaction step run-end") {
			t.Errorf("no compaction line: %s", got)
		}
	})
}
