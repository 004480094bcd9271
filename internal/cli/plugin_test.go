package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestPluginCommand: plugin describe and plugin call on the get_account
// example (built from source), on a plain Extism module with and without
// its sidecar, and their errors.
func TestPluginCommand(t *testing.T) {
	dir := t.TempDir()
	acct := filepath.Join(dir, "get_account.wasm")
	if err := os.WriteFile(acct, plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "plugin", "describe", acct)
	var desc struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &desc) != nil || len(desc.Tools) != 1 || desc.Tools[0].Name != "get_account" {
		t.Fatalf("describe: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "", "plugin", "call", acct, "get_account", `{"account_id":"42"}`)
	if code != 0 || !strings.Contains(out, `"account_id":"42"`) {
		t.Fatalf("call: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown tool", []string{"call", acct, "nope", `{}`}},
		{"bad JSON", []string{"call", acct, "get_account", `{"account_id":`}},
		{"missing file", []string{"describe", filepath.Join(dir, "missing.wasm")}},
		{"not wasm", []string{"describe", filepath.Join(dir, "get_account.json")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, "get_account.json"), []byte("not wasm"), 0o644)
			if code, _, errOut := run(t, "", append([]string{"plugin"}, tc.args...)...); code == 0 || errOut == "" {
				t.Errorf("exit %d, stderr %q: want a failure with a reason", code, errOut)
			}
		})
	}

	// A plain Extism module, called by export with its raw input.
	kit, _ := filepath.Abs("../../pdk/c")
	plain := filepath.Join(dir, "count_vowels.wasm")
	wasm := plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil)
	if err := os.WriteFile(plain, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "", "plugin", "call", plain, "count_vowels", "Hello, plugins")
	if code != 0 || !strings.Contains(out, `"count":4`) {
		t.Fatalf("plain export: exit %d\n%s\n%s", code, out, errOut)
	}
}
