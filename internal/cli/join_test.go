//go:build unix

package cli_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
)

// TestChatJoinsAnotherHostsRun: on one Redis, while process A's chat
// streams a reply, a one-shot chat in process B queues its message into
// A's run and prints the answer. After A is SIGKILLed mid-run, a chat in B
// (no --auto-resume) says it waits for A's lease, then takes the session
// over: it answers the message A died answering, into the item A had
// minted for it, and then its own — as a chat on file storage does.
func TestChatJoinsAnotherHostsRun(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	common := []string{"chat", "--storage", srv.URL(), "--base-url", model.URL(), "--lease-ttl", "2s", "--session", "s"}

	a := startProc(t, "A", bin, append(common, words("a", 300))...)
	a.waitOut("You said: a0 a1", 10*time.Second)
	b := startProc(t, "B", bin, append(common, "second")...)
	if code := b.wait(30 * time.Second); code != 0 || !strings.Contains(b.out.String(), "You said: second") {
		t.Fatalf("B: exit %d\nstdout %q\nstderr %q", code, b.out.String(), b.err.String())
	}
	if code := a.wait(30 * time.Second); code != 0 || !strings.Contains(a.out.String(), "\nYou said: second") {
		t.Fatalf("A: exit %d, want it to show the answer to B's message on a line of its own\n%s", code, a.out.String())
	}

	a = startProc(t, "A2", bin, append(common, words("c", 300))...)
	a.waitOut("You said: c0 c1", 10*time.Second)
	a.signal(syscall.SIGKILL)
	a.wait(5 * time.Second)
	b = startProc(t, "B2", bin, append(common, "third")...)
	if code := b.wait(30 * time.Second); code != 0 || !strings.Contains(b.err.String(), "for its lease") || !strings.Contains(b.err.String(), "[host ") {
		t.Fatalf("B after A died: exit %d\nstdout %q\nstderr %q", code, b.out.String(), b.err.String())
	}
	// B prints both answers, the dead run's first.
	out := b.out.String()
	if i, j := strings.Index(out, "You said: "+words("c", 300)), strings.Index(out, "You said: third"); i < 0 || j < i {
		t.Errorf("B's output does not answer A's message, then its own: %q", out)
	}
	// The transcript: A's first run answered both messages, each in its
	// own item; the run A died in is answered in the item it minted, by
	// B, and then the message B was sent.
	tr := transcriptOf(t, srv.URL(), "s")
	checkNoDuplicates(t, tr)
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
	}
	if want := "user: response:completed user: response:completed user: response:completed user: response:completed"; strings.Join(got, " ") != want {
		t.Fatalf("transcript %q, want %q", strings.Join(got, " "), want)
	}
	for i, want := range map[int]string{4: words("c", 300), 5: "You said: " + words("c", 300), 6: "third", 7: "You said: third"} {
		if tr.Items[i].Text != want {
			t.Errorf("item %d = %.60q, want %.60q", i, tr.Items[i].Text, want)
		}
	}
	if tr.Items[5].RunID != tr.Items[4].RunID {
		t.Errorf("A's message was answered by run %s, not by the run A died in, %s", tr.Items[5].RunID, tr.Items[4].RunID)
	}
}
