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
// says it waits for A's lease, then resumes the run and answers.
func TestChatJoinsAnotherHostsRun(t *testing.T) {
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
	if code := b.wait(30 * time.Second); code != 0 || !strings.Contains(b.out.String(), "You said: third") ||
		!strings.Contains(b.err.String(), "for its lease") || !strings.Contains(b.err.String(), "[host ") {
		t.Fatalf("B after A died: exit %d\nstdout %q\nstderr %q", code, b.out.String(), b.err.String())
	}
	// The transcript: A's first run answered both messages, each in its
	// own item; the run A died in shows interrupted (what streamed kept),
	// and the run B took over with answered the rest.
	tr := transcriptOf(t, srv.URL(), "s")
	checkNoDuplicates(t, tr)
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
	}
	if want := "user: response:completed user: response:completed user: response:interrupted user: response:completed"; strings.Join(got, " ") != want {
		t.Errorf("transcript %q, want %q", strings.Join(got, " "), want)
	}
}
