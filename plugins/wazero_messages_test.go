package plugins_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// TestWazeroMessages pins the text of the wazero and Extism errors the
// runtime recognises by their message (wazero exports no types for them):
// each case makes the failure happen on a bare Extism instance and checks
// that the text the runtime matches is still there. If an upgrade of
// wazero or Extism changes one, this test names it, and the matching in
// Module.classify must follow.
func TestWazeroMessages(t *testing.T) {
	hostile, bombs := hostileWasm(t), bombsWasm(t)
	call := func(tool string) []byte {
		return []byte(`{"tool":"` + tool + `","input":{},"call_id":"c","session_id":"s","tenant":""}`)
	}
	lim := plugins.Limits{CallTimeout: time.Minute}
	for _, tc := range []struct {
		name     string
		wasm     []byte
		calls    [][]byte // the last one fails
		want     string   // in the error, or (stderr) in stderr
		exact    bool
		inStderr bool
	}{
		{name: "trap", wasm: bombs, calls: [][]byte{call("trap")}, want: "wasm error: unreachable\nwasm stack trace:"},
		{name: "host function panic", wasm: hostile, calls: [][]byte{call("var_bomb")}, want: "(recovered by wazero)"},
		{name: "native stack overflow", wasm: bombs, calls: [][]byte{call("recurse")}, want: "stack overflow", exact: true},
		{name: "call after exit", wasm: hostile, calls: [][]byte{call("exit0"), call("ok")}, want: "module is closed", exact: true},
		{name: "initialisation trap", wasm: liarWasm(t, "INIT_TRAP"), calls: [][]byte{call("t")}, want: "failed to initialize runtime"},
		{name: "Go out of memory", wasm: hostile, calls: [][]byte{call("memory_bomb")}, want: "out of memory", inStderr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			p := bareInstance(t, tc.wasm, lim, &stderr)
			var err error
			for _, in := range tc.calls {
				_, _, err = p.CallWithContext(context.Background(), "call", in)
			}
			if err == nil {
				t.Fatal("no error")
			}
			got := err.Error()
			if tc.inStderr {
				got = stderr.String()
			}
			if tc.exact && got != tc.want || !tc.exact && !strings.Contains(got, tc.want) {
				t.Fatalf("the message changed: %.300q, the runtime matches %q", got, tc.want)
			}
		})
	}
}
