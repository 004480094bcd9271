package plugins_test

import (
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// The byte-level hostile modules of plugintest, for tests.

func startLoop() []byte { return plugintest.StartLoop() }

func nestedBlocks(n int) []byte { return plugintest.NestedBlocks(n) }

func withStart(t testing.TB, wasm []byte, export string) []byte {
	t.Helper()
	out, err := plugintest.WithStart(wasm, export)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func patchU64(t testing.TB, wasm []byte, old, v uint64) []byte {
	t.Helper()
	out, err := plugintest.PatchU64(wasm, old, v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
