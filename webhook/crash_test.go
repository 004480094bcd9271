//go:build unix

package webhook_test

// SIGKILL at any point: a child process (this test binary, run again)
// runs a host and its outbox over the file storage, with a crash injected
// before or after its N-th write (a ledger append or a key-value write,
// counted over the process); the next child goes on to the end. The
// receiver must then have every event the ledgers tell, and nothing else.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/webhook"
)

const (
	envChild    = "WEBHOOK_CRASH_CHILD" // "1" in a child
	envDir      = "WEBHOOK_CRASH_DIR"
	envURL      = "WEBHOOK_CRASH_URL"
	envKillAt   = "WEBHOOK_CRASH_KILL_AT"   // the write that kills, from 1; 0: none
	envKillMode = "WEBHOOK_CRASH_KILL_MODE" // before | after
	doneLine    = "WEBHOOK-CHILD-DONE writes="
)

// crashSessions are the child's workload: two messages that ask for a
// publish (an approval each, which the child approves), two plain ones.
var crashSessions = map[string]string{"w0": "please publish the post", "w1": "hello there", "w2": "publish it now", "w3": "good morning"}

// killStore is the child's storage: the file store, with a crash injected
// at its N-th write.
type killStore struct {
	*file.Store
	at     int64
	before bool
	n      atomic.Int64
}

func (k *killStore) write(what string, fn func() error) error {
	n := k.n.Add(1)
	if n != k.at {
		return fn()
	}
	if k.before {
		die(what)
	}
	_ = fn() // what it did is what the next process finds; this one dies
	die(what)
	return nil
}

func die(why string) {
	fmt.Fprintln(os.Stderr, "WEBHOOK-CHILD-KILL "+why)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func (k *killStore) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	return k.write("append "+id, func() error { return k.Store.Append(ctx, id, evs...) })
}

func (k *killStore) Set(ctx context.Context, ns, key string, v []byte) error {
	return k.write("set "+ns, func() error { return k.Store.Set(ctx, ns, key, v) })
}

func (k *killStore) Delete(ctx context.Context, ns, key string) error {
	return k.write("delete "+ns, func() error { return k.Store.Delete(ctx, ns, key) })
}

var (
	_ storage.Lister = (*killStore)(nil)
	_ storage.KV     = (*killStore)(nil)
)

// TestCrashChild is the child's side; it skips unless run as a child.
func TestCrashChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("a child of TestWebhooksSurviveSIGKILL")
	}
	ctx := context.Background()
	fs, err := file.Open(os.Getenv(envDir), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := strconv.ParseInt(os.Getenv(envKillAt), 10, 64)
	store := &killStore{Store: fs, at: at, before: os.Getenv(envKillMode) == "before"}
	ob, err := webhook.New(webhook.Options{Storage: store, Endpoints: []webhook.Endpoint{{URL: os.Getenv(envURL)}}, Secret: secret,
		Poll: 20 * time.Millisecond, MinBackoff: 10 * time.Millisecond, Grace: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Int64
	hs := hosttest.New(t, host.Options{Storage: store, Outbox: ob, AutoResume: &host.AutoResume{MaxAttempts: 100},
		Agent: host.Agent{Tools: []host.Tool{publishTool(&published)}}})
	octx, stop := context.WithCancel(ctx)
	defer stop()
	go ob.Run(octx)
	go func() { // the approver
		for octx.Err() == nil {
			pending, _ := hs.Host.PendingApprovals(octx)
			for _, p := range pending {
				hs.Host.Session(p.SessionID).Decide(octx, p.ApprovalID, host.ApprovalDecision{Approve: true, By: "approver"})
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	<-hs.Host.SweepDone()
	for _, s := range slices.Sorted(func(yield func(string) bool) {
		for s := range crashSessions {
			if !yield(s) {
				return
			}
		}
	}) {
		if _, err := hs.Host.Session(s).Start(ctx, crashSessions[s], host.StartOptions{RequestID: s + "-m"}); err != nil && !strings.Contains(err.Error(), "busy") {
			t.Logf("start %s: %v", s, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		settled := true
		for s := range crashSessions {
			evs, err := store.Load(ctx, s)
			if err != nil || len(evs) == 0 || !hosttest.Settled(evs) || len(ledger.PendingInputs(evs)) > 0 {
				settled = false
			}
		}
		if n, err := ob.Waiting(ctx); settled && err == nil && n == 0 {
			fmt.Printf("%s%d\n", doneLine, store.n.Load())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the child did not finish its work")
}

// runChild runs a child over dir, killed at its at-th write (0: none).
func runChild(t *testing.T, dir, url string, at int64, mode string) (done bool, writes int64, out string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"=1", envDir+"="+dir, envURL+"="+url,
		envKillAt+"="+strconv.FormatInt(at, 10), envKillMode+"="+mode)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out = stdout.String() + stderr.String()
	if i := strings.Index(out, doneLine); i >= 0 {
		n, _ := strconv.ParseInt(strings.Fields(out[i+len(doneLine):])[0], 10, 64)
		return true, n, out
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return false, 0, out
		}
	}
	t.Fatalf("the child neither finished nor was killed: %v\n%s", err, out)
	return
}

// TestWebhooksSurviveSIGKILL: a host killed before or after any of its
// writes — a delivery staged, an event appended, a delivery recorded sent,
// moved or forgotten — and then started again: the receiver has been told
// every event the ledgers hold, with their ids, and none they do not hold
// (a crash neither loses nor invents one); an event is told twice only
// when the host died between an endpoint's answer and its record of it.
func TestWebhooksSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	clean := newReceiver(t)
	dir := t.TempDir()
	done, total, out := runChild(t, dir, clean.srv.URL, 0, "")
	if !done {
		t.Fatalf("a child without a crash did not finish:\n%s", out)
	}
	sessions := slices.Sorted(func(yield func(string) bool) {
		for s := range crashSessions {
			if !yield(s) {
				return
			}
		}
	})
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, dups := clean.ids(); !slices.Equal(ids, expected(t, fs, sessions...)) || dups != 0 || len(ids) != 8 {
		t.Fatalf("without a crash: received %v (%d twice), want the 8 of %v", ids, dups, expected(t, fs, sessions...))
	}
	fs.Close()
	const points = 10
	for i := range points {
		at := 1 + int64(i)*(total-1)/(points-1)
		mode := []string{"before", "after"}[i%2]
		t.Run(fmt.Sprintf("%s-write-%d-of-%d", mode, at, total), func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t)
			dir := t.TempDir()
			var outs []string
			finished := false
			for try := 0; try < 3 && !finished; try++ {
				kill := at
				if try > 0 {
					kill = 0
				}
				var out string
				finished, _, out = runChild(t, dir, rcv.srv.URL, kill, mode)
				outs = append(outs, out)
			}
			t.Logf("children: %q", outs)
			if !finished {
				t.Fatalf("no child finished:\n%s", strings.Join(outs, "\n----\n"))
			}
			fs, err := file.Open(dir, file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			want := expected(t, fs, sessions...)
			ids, dups := rcv.ids()
			if !slices.Equal(ids, want) {
				t.Fatalf("received %v, want %v\n%s", ids, want, strings.Join(outs, "\n----\n"))
			}
			// At most the deliveries in flight when it died (one per
			// session) come twice.
			if dups > len(crashSessions) {
				t.Errorf("%d events told twice after one crash", dups)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.bad) > 0 {
				t.Errorf("refused deliveries: %v", rcv.bad)
			}
		})
	}
}
