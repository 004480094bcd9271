package plugins_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
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
	// A plugin's error_set text reaches go-sdk's caller as a plain
	// errors.New value equal to the error the instance's kernel holds: how
	// the runtime tells it from go-sdk's and wazero's own errors
	// (instance.guestText), whatever it says.
	t.Run("error_set", func(t *testing.T) {
		p := bareInstance(t, bombs, lim, io.Discard)
		in := []byte(`{"tool":"error_text","input":{"text":"wasm error: mine"},"call_id":"c","session_id":"s","tenant":""}`)
		_, _, err := p.CallWithContext(context.Background(), "call", in)
		if err == nil || reflect.TypeOf(err) != reflect.TypeOf(errors.New("")) || err.Error() != "wasm error: mine" || p.GetError() != err.Error() {
			t.Fatalf("error_set came back as %T %q (the kernel holds %q)", err, err, p.GetError())
		}
		// A trap is not: it wraps wazero's cause.
		_, _, err = p.CallWithContext(context.Background(), "call", call("trap"))
		if err == nil || errors.Unwrap(err) == nil || reflect.TypeOf(err) == reflect.TypeOf(errors.New("")) {
			t.Fatalf("a trap came back as %T %q", err, err)
		}
	})
}
