package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestEventCLI: a one-shot chat whose plugin call waits for an event
// parks its run and exits 4, telling how to post it; a new process posts
// it with the event command and continues the run to its answer; an event
// for which no call waits is kept, and the next wait takes it at once.
func TestEventCLI(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "wait_event.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/wait_event"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--offline", "--storage", "file:" + t.TempDir(), "--plugins", dir}
	code, out, errOut := runBin(t, bin, append(append([]string{"chat", "--session", "ev"}, common...), "please wait_event key=order-5")...)
	if code != 4 || !strings.Contains(errOut, "agentic-host event ev order-5 PAYLOAD") || !strings.Contains(errOut, `waits for the event "order-5"`) {
		t.Fatalf("chat: exit %d, want 4 and how to post the event\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runBin(t, bin, append(append([]string{"event"}, common...), "ev", "order-5", "paid in full")...)
	if code != 0 || !strings.Contains(out, `The wait_event tool returned: {"key":"order-5","payload":"paid in full"}`) {
		t.Fatalf("event: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runBin(t, bin, append(append([]string{"event"}, common...), "ev", "early", "first")...)
	if code != 0 || !strings.Contains(errOut, "is kept") {
		t.Fatalf("an event nobody waits for: exit %d\n%s", code, errOut)
	}
	code, out, errOut = runBin(t, bin, append(append([]string{"chat", "--session", "ev"}, common...), "please wait_event key=early")...)
	if code != 0 || !strings.Contains(out, `"payload":"first"`) {
		t.Fatalf("a wait for a kept event: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runBin(t, bin, append(append([]string{"event"}, common...), "ev", "bad\x01key", "x")...)
	if code != 1 || !strings.Contains(errOut, "control characters") {
		t.Errorf("a bad key: exit %d %s", code, errOut)
	}
}
