package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// pluginFiles are a directory of plugins in three languages: get_account
// (Go), text_stats (AssemblyScript), count_vowels (C, a plain Extism
// module with its sidecar manifest), the hostile Go plugin (a tool per
// misbehaviour, a write tool, an external tool) and the AssemblyScript kit's
// test plugin (a policy).
func pluginFiles(t *testing.T) map[string][]byte {
	vowels, side := countVowelsWasm(t)
	return map[string][]byte{
		"get_account.wasm":  getAccountWasm(t),
		"text_stats.wasm":   textStatsWasm(t),
		"count_vowels.wasm": vowels,
		"count_vowels.json": side,
		"hostile.wasm":      hostileWasm(t),
		"kit.wasm":          kitWasm(t),
	}
}

// TestListTools: every plugin tool is an MCP tool with its name,
// description and input schema, annotations from its effect, and the
// module that serves it in _meta, over stdio and streamable HTTP.
func TestListTools(t *testing.T) {
	files := pluginFiles(t)
	e := newEnv(t, files, plugins.Limits{}, mcp.Options{})
	yes, no := true, false
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			cs := e.connect(t, transport, "lister", nil)
			tools := listTools(t, cs)
			served := e.srv.Tools()
			if len(tools) != len(served) || len(served) < 20 {
				t.Fatalf("listed %d tools, the server serves %d: %v", len(tools), len(served), served)
			}
			for _, tc := range []struct {
				tool, plugin, effect string
				want                 sdk.ToolAnnotations
			}{
				{"get_account", "get_account", "read", sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}},
				{"text_stats", "text_stats", "read", sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}},
				{"count_vowels", "count_vowels", "read", sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}},
				{"kv", "hostile", "write", sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}},
				{"remember", "kit", "write", sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}},
				{"fetch", "hostile", "external", sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}},
			} {
				got := tools[tc.tool]
				if got == nil {
					t.Errorf("%s is not listed", tc.tool)
					continue
				}
				spec, _ := e.reg.Tool("acme", tc.tool)
				m, _ := e.reg.Module("acme", tc.plugin)
				if got.Description != spec.Spec().Description || got.Description == "" {
					t.Errorf("%s: description %q, want %q", tc.tool, got.Description, spec.Spec().Description)
				}
				var want any
				json.Unmarshal(spec.Spec().InputSchema, &want)
				if tc.tool != "remember" && jsonOf(got.InputSchema) != jsonOf(want) {
					t.Errorf("%s: input schema %s, want %s", tc.tool, jsonOf(got.InputSchema), jsonOf(want))
				}
				if jsonOf(got.Annotations) != jsonOf(tc.want) {
					t.Errorf("%s: annotations %s, want %s", tc.tool, jsonOf(got.Annotations), jsonOf(tc.want))
				}
				if got.Meta[mcp.MetaModule] != m.Hash() || got.Meta[mcp.MetaPlugin] != tc.plugin || got.Meta[mcp.MetaEffect] != tc.effect {
					t.Errorf("%s: _meta %v, want module %s of %s, effect %s", tc.tool, got.Meta, m.Hash(), tc.plugin, tc.effect)
				}
			}
			// A tool without a schema of its own gets the ABI's default.
			if s := jsonOf(tools["remember"].InputSchema); s != `{"type":"object"}` {
				t.Errorf("remember: input schema %s", s)
			}
		})
	}
}

// TestOpenWorldFromSandbox: a read tool whose sandbox may reach HTTP hosts
// is announced as open-world.
func TestOpenWorldFromSandbox(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)},
		plugins.Limits{AllowedHosts: []string{"api.example.com"}}, mcp.Options{})
	got := listTools(t, e.connect(t, "stdio", "lister", nil))["get_account"]
	if got == nil || !got.Annotations.ReadOnlyHint || got.Annotations.OpenWorldHint == nil || !*got.Annotations.OpenWorldHint {
		t.Fatalf("annotations %s, want read-only and open-world", jsonOf(got.Annotations))
	}
}

// TestCallTools: a Go, an AssemblyScript and a C plugin answer through
// MCP, over both transports, in the tenant's sandbox (its key-value store
// too), each result naming the module that served it.
func TestCallTools(t *testing.T) {
	files := pluginFiles(t)
	e := newEnv(t, files, plugins.Limits{KV: true}, mcp.Options{})
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			cs := e.connect(t, transport, "caller", nil)
			for _, tc := range []struct {
				tool, file string
				args       any
				want       string
			}{
				{"get_account", "get_account.wasm", map[string]any{"account_id": "42"}, `{"account_id":"42","owner":"Katherine Johnson","plan":"team","balance_usd":350.11}`},
				{"text_stats", "text_stats.wasm", map[string]any{"text": "Hello there. General Kenobi!"}, `"words":4`},
				{"count_vowels", "count_vowels.wasm", map[string]any{"text": "Hello, plugins"}, `"count":4`},
				{"text", "hostile.wasm", nil, "plain text"},
				{"remember", "kit.wasm", map[string]any{"note": "n1"}, `"deleted":true`},
			} {
				res := call(t, cs, tc.tool, tc.args)
				if res.IsError || !strings.Contains(text(res), tc.want) {
					t.Errorf("%s: error %v, %q, want %q", tc.tool, res.IsError, text(res), tc.want)
				}
				if got, want := meta(res, mcp.MetaModule), hashOf(files[tc.file]); got != want {
					t.Errorf("%s: served by %s, want %s", tc.tool, got, want)
				}
			}
		})
	}
}

// TestFailuresAreToolErrors: a plugin that times out, traps, runs out of
// memory, answers too much, fails or is called with bad arguments is a
// tool error naming the kind (in the text and in _meta); the server serves
// the next call.
func TestFailuresAreToolErrors(t *testing.T) {
	// A memory bomb needs time to exhaust its memory on a loaded machine
	// (and under the race detector): the tenant's timeout leaves it that.
	// spin times out at its own 1s, on fuel for more than that (the
	// default is spent in about a second, sooner on an idle machine).
	e := newEnv(t, pluginFiles(t), plugins.Limits{CallTimeout: time.Minute, Fuel: 1 << 50}, mcp.Options{})
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			cs := e.connect(t, transport, "caller", nil)
			for _, tc := range []struct {
				tool       string
				args       any
				kind, text string
			}{
				{"spin", nil, mcp.KindTimeout, "timed out"},
				{"trap", nil, mcp.KindTrap, "trapped"},
				{"crash", map[string]any{"items": []int{1}}, mcp.KindTrap, "trapped"},
				{"memory_bomb", nil, mcp.KindOutOfMemory, "out of memory"},
				{"big_output", map[string]any{"bytes": 2 << 20}, mcp.KindOutputTooLarge, "output too large"},
				{"exit", nil, mcp.KindExited, "exit"},
				{"exit0", nil, mcp.KindMalformedOutput, ""},
				{"fail", nil, mcp.KindToolError, "account 7 not found"},
				{"get_account", map[string]any{"account_id": 42}, mcp.KindInvalidInput, "/account_id"},
			} {
				res := call(t, cs, tc.tool, tc.args)
				if !res.IsError || meta(res, mcp.MetaError) != tc.kind ||
					!strings.HasPrefix(text(res), "["+tc.kind+"] ") || !strings.Contains(text(res), tc.text) {
					t.Errorf("%s: error %v, _meta %v, %q: want a %s error saying %q", tc.tool, res.IsError, res.Meta, text(res), tc.kind, tc.text)
				}
				if res := call(t, cs, "ok", nil); res.IsError {
					t.Fatalf("after %s, ok failed: %s", tc.tool, text(res))
				}
			}
		})
	}
}
