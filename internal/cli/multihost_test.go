//go:build unix

package cli_test

// Several real agentic-host processes on one real redis-server: takeover
// after SIGKILL, fencing of a host paused past its lease (SIGSTOP), and a
// Redis killed mid-run and restarted from its append-only file. The fake
// model runs in the test process, so that it outlives the killed children.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/redis"
)

// lockedBuffer is an io.Writer safe to read while a process writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a running agentic-host process.
type proc struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out, err lockedBuffer
	done     chan struct{} // closed when the process has exited
}

// startProc starts the binary with args; its stdin is a pipe.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", p.name, p.out.String(), p.name, p.err.String())
		}
	})
	return p
}

// send writes a line to the process's stdin.
func (p *proc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("%s: write stdin: %v", p.name, err)
	}
}

// waitOut waits until the process's stdout contains s.
func (p *proc) waitOut(s string, d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.out.String(), s) {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before printing %q: stdout %q, stderr %q", p.name, s, p.out.String(), p.err.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not print %q within %v: stdout %q", p.name, s, d, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// wait waits for the process to exit and returns its exit code (-1 when a
// signal killed it).
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %v; stdout %q, stderr %q", p.name, d, p.out.String(), p.err.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// words returns n distinct words: a message whose echo streams for n
// one-word chunks.
func words(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(w, " ")
}

func needBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return bin
}

func slowModel(t *testing.T) *fakemodel.Server {
	t.Helper()
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 10 * time.Millisecond, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// ledgerOf opens a Store of the test's own on the server.
func ledgerOf(t *testing.T, url string) *redis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.Open(ctx, url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func eventIDs(evs []ledger.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// waitLeaseFree waits until no host holds the session's lease.
func waitLeaseFree(t *testing.T, srv *redistest.Server, session string, d time.Duration) {
	t.Helper()
	key := "agentic:{default:" + session + "}:lease"
	deadline := time.Now().Add(d)
	for {
		reply, err := srv.Do("EXISTS", key)
		if err == nil && reply == ":0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s is still held after %v (%q, %v)", session, d, reply, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNoDuplicates fails when a response's text holds the echo of a
// message more than once, or the same item shows twice.
func checkNoDuplicates(t *testing.T, tr wireTranscript) {
	t.Helper()
	seen := map[string]bool{}
	for _, it := range tr.Items {
		if seen[it.ID] {
			t.Errorf("item %s shows twice", it.ID)
		}
		seen[it.ID] = true
		if it.Kind == "response" && strings.Count(it.Text, "You said:") > 1 {
			t.Errorf("response %s duplicates text: %.120q…", it.ID, it.Text)
		}
	}
}

// TestMultiHostChatTakeover: two interactive agentic-host chat processes
// with auto-resume share session s on one Redis. A is sent a message whose
// reply streams slowly and is SIGKILLed mid-stream; B, idle at its prompt,
// leaves the run alone while A lives and resumes it once A's lease lapses
// (its sweep repeats every lease ttl). A message typed into B while the
// resumed run streams must be answered by that run.
func TestMultiHostChatTakeover(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	store := ledgerOf(t, srv.URL())
	common := []string{"chat", "--storage", srv.URL(), "--base-url", model.URL(), "--auto-resume", "--lease-ttl", "1s", "--session", "s"}
	long := words("a", 250)
	// A's pass pauses mid-stream for good (A is killed in it), and the
	// pass B resumes until the message typed into B is durable, whatever
	// the machine's speed; the pass that answers that message is the
	// model's echo.
	killedIn, resumedHeld := make(chan struct{}), make(chan struct{})
	releaseResumed := sync.OnceFunc(func() { close(resumedHeld) })
	t.Cleanup(func() { close(killedIn); releaseResumed() })
	model.Enqueue(fakemodel.Reply{Text: "You said: " + long, Hold: killedIn, HoldAfter: 10},
		fakemodel.Reply{Text: "You said: " + long, Hold: resumedHeld, HoldAfter: 10})

	b := startProc(t, "B", bin, common...)
	a := startProc(t, "A", bin, common...)
	a.waitOut("> ", 10*time.Second)
	b.waitOut("> ", 10*time.Second)
	a.send(long)
	a.waitOut("You said: a0 a1 a2", 10*time.Second)
	// B's sweeps (every second) leave the run alone while A lives.
	time.Sleep(1200 * time.Millisecond)
	if evs := hosttest.Load(t, store, "s"); hosttest.CountKind(evs, ledger.KindResumeAttempt) != 0 {
		t.Fatalf("B resumed the run A leads: %s", hosttest.Kinds(evs))
	}
	a.signal(syscall.SIGKILL)
	a.wait(5 * time.Second)
	killedAt := time.Now()

	// (Its sweeps repeat every lease ttl: within a few seconds on a quiet
	// machine, logged; the bound guards against a hang.)
	evs := hosttest.WaitLedger(t, store, "s", time.Minute, "B resumed the run", func(evs []ledger.Event) bool {
		return hosttest.CountKind(evs, ledger.KindResumeAttempt) > 0
	})
	t.Logf("B resumed the run %v after A was killed", time.Since(killedAt))
	runID := evs[1].RunID
	var attempt *ledger.Event
	for i := range evs {
		if evs[i].ResumeAttempt != nil {
			attempt = &evs[i]
		}
	}
	if attempt.RunID != runID || !strings.HasSuffix(attempt.ResumeAttempt.Host, fmt.Sprintf("-%d", b.pid())) {
		t.Fatalf("resume attempt %+v, want run %s by B (pid %d)", attempt.ResumeAttempt, runID, b.pid())
	}
	if hosttest.Settled(evs) {
		t.Fatal("the resumed run ended while the model held its pass")
	}
	// While the resumed run streams (the model got its request: A's was
	// the first), a message typed into B.
	for deadline := time.Now().Add(time.Minute); model.RequestCount() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's resumed run never called the model")
		}
	}
	b.send("second")
	sentAt := time.Now()
	// The typed message is durable while the run is in flight (queued
	// into it), not only once that run has ended: the model holds the
	// run's pass until the message is in the ledger.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		evs := hosttest.Load(t, store, "s")
		if slices.ContainsFunc(evs, func(e ledger.Event) bool { return e.Input != nil && ledger.TextOf(e.Input.Parts) == "second" }) {
			if len(ledger.OpenRuns(evs)) != 1 {
				t.Fatalf("the message typed into B is durable, but the run it should join is not in flight: %s", hosttest.Kinds(evs))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message typed into B is not durable a minute after it was typed: %s", hosttest.Kinds(evs))
		}
	}
	t.Logf("the message typed into B was durable %v after it was typed", time.Since(sentAt).Round(time.Millisecond))
	releaseResumed()
	evs = hosttest.WaitLedger(t, store, "s", 20*time.Second, "the message to B was answered", func(evs []ledger.Event) bool {
		if !hosttest.Settled(evs) {
			return false
		}
		for _, e := range evs {
			if e.Input != nil && ledger.TextOf(e.Input.Parts) == "second" {
				return true
			}
		}
		return false
	})
	t.Logf("the message to B was answered %v after it was typed; ledger: %s", time.Since(sentAt), hosttest.Kinds(evs))
	b.stdin.Close()
	if code := b.wait(10 * time.Second); code != 0 {
		t.Errorf("B exited %d", code)
	}
	t.Logf("B's stdout: %q", b.out.String())
	if !strings.Contains(b.out.String(), "You said: second") {
		t.Errorf("B did not print the answer to the message typed into it: %q", b.out.String())
	}

	// The ledger: the run A started ended completed, resumed once.
	if hosttest.CountKind(evs, ledger.KindResumeAttempt) != 1 {
		t.Errorf("resume attempts: %s", hosttest.Kinds(evs))
	}
	run, _ := ledger.ProjectRun(evs, runID)
	if !run.Ended || run.Status != ledger.RunCompleted {
		t.Errorf("run %s: ended %v, status %s", runID, run.Ended, run.Status)
	}

	tr := transcriptOf(t, srv.URL(), "s")
	checkNoDuplicates(t, tr)
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
		if it.Kind == "response" && it.Status != "completed" {
			t.Errorf("response %s is %s", it.ID, it.Status)
		}
	}
	if want := "user: response:completed user: response:completed"; strings.Join(got, " ") != want {
		t.Fatalf("transcript = %q, want %q", strings.Join(got, " "), want)
	}
	if it := tr.Items[0]; it.Text != long || it.RunID != runID {
		t.Errorf("the message sent to A was not kept: %.40q… of run %s", it.Text, it.RunID)
	}
	if it := tr.Items[1]; it.Text != "You said: "+long || it.RunID != runID {
		t.Errorf("the resumed answer = %.60q… of run %s", it.Text, it.RunID)
	}
	if it := tr.Items[2]; it.Text != "second" {
		t.Errorf("item 2 = %q, want the message typed into B", it.Text)
	}
	if it := tr.Items[3]; it.Text != "You said: second" {
		t.Errorf("item 3 = %q", it.Text)
	}
	// The message typed into B while the resumed run streamed is answered
	// in that run.
	if tr.Items[2].RunID != runID || tr.Items[3].RunID != runID {
		t.Errorf("the message typed into B while it streamed the resumed run %s was answered by run %s (response of run %s); ledger: %s",
			runID, tr.Items[2].RunID, tr.Items[3].RunID, hosttest.Kinds(evs))
	}
}

// TestFencingChatSIGSTOP: process A leads a run with a 1s lease and is
// stopped (SIGSTOP) mid-stream past its lease; process B resumes the run,
// finishes it and answers its own message; when A continues (SIGCONT), its
// appends are refused: the ledger does not change, and A exits reporting
// the lost lease.
func TestFencingChatSIGSTOP(t *testing.T) {
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	store := ledgerOf(t, srv.URL())
	common := []string{"chat", "--storage", srv.URL(), "--base-url", model.URL(), "--lease-ttl", "1s", "--session", "f"}
	long := words("f", 200)

	a := startProc(t, "A", bin, append(slices.Clone(common), long)...)
	a.waitOut("You said: f0 f1", 10*time.Second)
	a.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	waitLeaseFree(t, srv, "f", 5*time.Second)
	t.Logf("A's lease lapsed %v after SIGSTOP", time.Since(stoppedAt))
	if evs := hosttest.Load(t, store, "f"); hosttest.Kinds(evs) != "input run-start" {
		t.Fatalf("ledger while A is stopped: %s", hosttest.Kinds(evs))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(slices.Clone(common), "after takeover")...).CombinedOutput()
	if err != nil {
		t.Fatalf("B: %v\n%s", err, out)
	}
	for _, want := range []string{"[resuming an interrupted run]", "You said: " + long, "You said: after takeover"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("B's output lacks %.60q", want)
		}
	}
	before := hosttest.Load(t, store, "f")
	if got, want := hosttest.Kinds(before), "input run-start resume-attempt step run-end input run-start step run-end"; got != want {
		t.Fatalf("ledger after B = %q, want %q", got, want)
	}

	a.signal(syscall.SIGCONT)
	code := a.wait(15 * time.Second)
	t.Logf("A exited %d: %s", code, strings.TrimSpace(a.err.String()))
	if code == 0 {
		t.Error("A exited 0 after losing its lease")
	}
	if !strings.Contains(a.err.String(), "lease was lost") {
		t.Errorf("A's stderr does not report the lost lease: %q", a.err.String())
	}
	after := hosttest.Load(t, store, "f")
	if !slices.Equal(eventIDs(after), eventIDs(before)) {
		t.Fatalf("A wrote after B took over: %s\nthen: %s", hosttest.Kinds(before), hosttest.Kinds(after))
	}
	tr := transcriptOf(t, srv.URL(), "f")
	checkNoDuplicates(t, tr)
	if len(tr.Items) != 4 || tr.Items[1].Status != "completed" || tr.Items[3].Status != "completed" || tr.Items[0].Text != long {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

// TestRedisRestartShortOutage: Redis is SIGKILLed while a chat's reply
// streams and restarted from its append-only file (fsync always) 2s later,
// before the pass ends and within the lease ttl (5s), though past one
// renewal: the run completes in place — the lease survived in the AOF, the
// host's renewals and appends reconnect — with nothing lost or duplicated.
func TestRedisRestartShortOutage(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	model := slowModel(t)
	store := ledgerOf(t, srv.URL())
	long := words("r", 400)
	// The pass pauses mid-stream until Redis is back, whatever the
	// machine's speed.
	held := make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	model.Enqueue(fakemodel.Reply{Text: "You said: " + long, Hold: held, HoldAfter: 10})

	a := startProc(t, "A", bin, "chat", "--storage", srv.URL(), "--base-url", model.URL(), "--lease-ttl", "5s", "--session", "r", long)
	a.waitOut("You said: r0 r1", 10*time.Second)
	acked := hosttest.Load(t, store, "r")
	start := time.Now()
	srv.Kill()
	time.Sleep(2 * time.Second) // past a renewal (every 5s/3), within the ttl
	srv.Restart()
	t.Logf("Redis was down %v", time.Since(start))
	if strings.Contains(a.out.String(), "You said: "+long) {
		t.Fatal("the pass ended while the model held it")
	}
	release()
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("chat exited %d: %s", code, a.err.String())
	}
	if !strings.HasSuffix(a.out.String(), "You said: "+long+"\n") {
		t.Errorf("chat output ends %q", a.out.String()[max(0, len(a.out.String())-60):])
	}
	evs := hosttest.Load(t, store, "r")
	if !slices.Equal(eventIDs(evs[:len(acked)]), eventIDs(acked)) {
		t.Fatalf("events acknowledged before the kill are lost: %s, now %s", hosttest.Kinds(acked), hosttest.Kinds(evs))
	}
	if got, want := hosttest.Kinds(evs), "input run-start step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	tr := transcriptOf(t, srv.URL(), "r")
	checkNoDuplicates(t, tr)
	if len(tr.Items) != 2 || tr.Items[1].Status != "completed" || tr.Items[1].Text != "You said: "+long {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

// TestRedisRestartLongOutage: Redis is SIGKILLed while a chat's reply
// streams and stays down past the end of the pass: the pass cannot be
// recorded, so the run is interrupted and chat exits 1 with the storage
// error. Redis restarts from its AOF with every event acknowledged before
// the kill; chat again in the session resumes the run (the pass streams
// again, recorded once) and then answers the new message.
func TestRedisRestartLongOutage(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, AppendFsync: "always"})
	model := slowModel(t)
	store := ledgerOf(t, srv.URL())
	long := words("l", 100)
	common := []string{"chat", "--storage", srv.URL(), "--base-url", model.URL(), "--lease-ttl", "1s", "--session", "l"}

	a := startProc(t, "A", bin, append(slices.Clone(common), long)...)
	a.waitOut("You said: l0 l1", 10*time.Second)
	acked := hosttest.Load(t, store, "l")
	if got := hosttest.Kinds(acked); got != "input run-start" {
		t.Fatalf("ledger before the kill = %q", got)
	}
	srv.Kill()
	code := a.wait(30 * time.Second)
	t.Logf("with Redis down, chat exited %d: %s", code, strings.TrimSpace(a.err.String()))
	if code != 1 {
		t.Errorf("chat exited %d, want 1", code)
	}
	if !strings.Contains(a.out.String(), "You said: "+long) {
		t.Errorf("the reply did not stream to its end: %q", a.out.String())
	}
	srv.Restart()
	evs := hosttest.Load(t, store, "l")
	if !slices.Equal(eventIDs(evs), eventIDs(acked)) {
		t.Fatalf("after the restart the ledger is %s, want what was acknowledged: %s", hosttest.Kinds(evs), hosttest.Kinds(acked))
	}
	waitLeaseFree(t, srv, "l", 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(slices.Clone(common), "again")...).CombinedOutput()
	if err != nil {
		t.Fatalf("chat again: %v\n%s", err, out)
	}
	for _, want := range []string{"[resuming an interrupted run]", "You said: " + long, "You said: again"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("second chat's output lacks %.60q", want)
		}
	}
	evs = hosttest.Load(t, store, "l")
	if got, want := hosttest.Kinds(evs), "input run-start resume-attempt step run-end input run-start step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	tr := transcriptOf(t, srv.URL(), "l")
	checkNoDuplicates(t, tr)
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
	}
	if want := "user: response:completed user: response:completed"; strings.Join(got, " ") != want {
		t.Fatalf("transcript = %q, want %q", strings.Join(got, " "), want)
	}
	if tr.Items[0].Text != long || tr.Items[1].Text != "You said: "+long || tr.Items[3].Text != "You said: again" {
		t.Errorf("transcript texts: %.40q / %.40q / %q", tr.Items[0].Text, tr.Items[1].Text, tr.Items[3].Text)
	}
}

// TestMultiHostChatOneShotRedis: a one-shot chat on a redis:// URL.
func TestMultiHostChatOneShotRedis(t *testing.T) {
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{})
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", srv.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "chat", "--storage", url, "--base-url", model.URL(), "hello").CombinedOutput()
	if err != nil || string(out) != "You said: hello\n" {
		t.Fatalf("chat: %v\n%q", err, out)
	}
	tr := transcriptOf(t, url, "cli")
	if len(tr.Items) != 2 || tr.Items[0].Text != "hello" || tr.Items[1].Status != "completed" || tr.Items[1].Text != "You said: hello" {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

// TestChatNoticesAnotherHost: a chat whose session another host leads
// says so on stderr, naming the host and how long it waits for its lease,
// and the message is answered once that host's lease lapsed (the host is
// gone: nobody renews it).
func TestChatNoticesAnotherHost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	store := ledgerOf(t, srv.URL())
	if _, err := store.AcquireLease(t.Context(), "s", "host-x", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "chat", "--storage", srv.URL(), "--base-url", model.URL(), "--session", "s", "hello")
	if code != 0 || out != "You said: hello\n" {
		t.Fatalf("chat: exit %d, %q\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "[host host-x runs session s: the message joins its run (if that host died, this one takes over: waiting up to ") {
		t.Errorf("stderr %q, want the notice naming host-x and the wait for its lease", errOut)
	}
}
