package cli_test

import (
	"strings"
	"testing"
)

// TestChatTimeouts: the --timeout-* flags reach the agent. A reply slower
// than --timeout-total ends the run timed_out: chat exits 124 naming the
// timeout, and the transcript shows the item timed_out with what streamed.
func TestChatTimeouts(t *testing.T) {
	bin := needBinary(t)
	model := slowModel(t)
	dir := "file:" + t.TempDir()
	code, out, errOut := runBin(t, bin, "chat", "--storage", dir, "--base-url", model.URL(), "--session", "s",
		"--timeout-total", "500ms", words("w", 400))
	if code != 124 || !strings.Contains(errOut, "timed out") || !strings.Contains(errOut, "total timeout of 500ms") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 124 naming the total timeout", code, out, errOut)
	}
	tr := transcriptOf(t, dir, "s")
	last := tr.Items[len(tr.Items)-1]
	if last.Status != "timed_out" || !strings.HasPrefix(last.Text, "You said: w0 w1") {
		t.Errorf("last item %+v, want timed_out with the text that streamed", last)
	}
	code, _, errOut = runBin(t, bin, "chat", "--storage", dir, "--base-url", model.URL(), "--timeout-step", "-1s", "hi")
	if code != 2 || !strings.Contains(errOut, "--timeout-step must not be negative") {
		t.Errorf("a negative timeout: exit %d, %q", code, errOut)
	}
}
