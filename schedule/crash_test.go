//go:build unix

package schedule_test

// SIGKILL at any point: a child process (this test binary, run again)
// runs a host and a schedule runner over the file storage on a clock the
// test sets, with a crash injected before or after its N-th write (a
// ledger append or a key-value write, counted over the process); the next
// child goes on to the end. Each occurrence must then be in the ledger
// once, answered once.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/schedule"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

const (
	envChild    = "SCHEDULE_CRASH_CHILD" // "1" in a child
	envDir      = "SCHEDULE_CRASH_DIR"
	envKillAt   = "SCHEDULE_CRASH_KILL_AT"   // the write that kills, from 1; 0: none
	envKillMode = "SCHEDULE_CRASH_KILL_MODE" // before | after
	doneLine    = "SCHEDULE-CHILD-DONE writes="
)

// The child's clock steps: the schedule is first seen, then two
// occurrences are due in turn.
var crashSteps = []string{"2026-12-03T07:59:30Z", "2026-12-03T08:00:05Z", "2026-12-03T08:01:05Z"}

const crashWant = "schedule:every@2026-12-03T08:00:00Z,schedule:every@2026-12-03T08:01:00Z"

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
	fmt.Fprintln(os.Stderr, "SCHEDULE-CHILD-KILL "+why)
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
		t.Skip("a child of TestScheduleSurvivesSIGKILL")
	}
	ctx := context.Background()
	fs, err := file.Open(os.Getenv(envDir), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := strconv.ParseInt(os.Getenv(envKillAt), 10, 64)
	store := &killStore{Store: fs, at: at, before: os.Getenv(envKillMode) == "before"}
	hs := hosttest.New(t, host.Options{Storage: store, AutoResume: &host.AutoResume{MaxAttempts: 100}})
	var now atomic.Pointer[time.Time]
	r, err := schedule.New(schedule.Options{Host: hs.Host, Storage: store, Now: func() time.Time { return *now.Load() },
		Schedules: []schedule.Schedule{{ID: "every", Session: "s", Cron: "* * * * *", Text: "tick"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-hs.Host.SweepDone()
	settled := func() bool {
		evs, err := store.Load(ctx, "s")
		return err == nil && (len(evs) == 0 || hosttest.Settled(evs))
	}
	for _, step := range crashSteps {
		tm, _ := time.Parse(time.RFC3339, step)
		now.Store(&tm)
		deadline := time.Now().Add(30 * time.Second)
		for !settled() {
			if time.Now().After(deadline) {
				t.Fatal("the session did not settle")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := r.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatal("the session did not settle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("%s%d\n", doneLine, store.n.Load())
}

// runChild runs a child over dir, killed at its at-th write (0: none).
func runChild(t *testing.T, dir string, at int64, mode string) (done bool, writes int64, out string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"=1", envDir+"="+dir, envKillAt+"="+strconv.FormatInt(at, 10), envKillMode+"="+mode)
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

// checkLedger fails the test unless each occurrence is in the session's
// ledger once (no copy, not even an alias), every message answered.
func checkLedger(t *testing.T, dir, outs string) {
	t.Helper()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	evs := hosttest.Load(t, fs, "s")
	var got []string
	for _, ev := range evs {
		if ev.Input != nil {
			got = append(got, ev.Input.RequestID)
		}
	}
	if strings.Join(got, ",") != crashWant || !hosttest.Settled(evs) || len(ledger.PendingInputs(evs)) > 0 {
		t.Fatalf("messages %v (settled %v), want %s once each, answered\n%s", got, hosttest.Settled(evs), crashWant, outs)
	}
	ends := 0
	for _, ev := range evs {
		if ev.RunEnd != nil && ev.RunEnd.Status == ledger.RunCompleted {
			ends++
		}
	}
	if ends == 0 || ends > 2 {
		t.Errorf("%d runs completed, want one or two (one per occurrence, or one answering both)", ends)
	}
}

// TestScheduleSurvivesSIGKILL: a host killed before or after any of its
// writes — the schedule first seen, an occurrence's message appended, its
// run's events, the occurrence recorded fired — and then started again:
// each occurrence is sent once (a message sent again after a crash
// between the append and the record carries the same request id and is
// not appended again) and answered once.
func TestScheduleSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	dir := t.TempDir()
	done, total, out := runChild(t, dir, 0, "")
	if !done {
		t.Fatalf("a child without a crash did not finish:\n%s", out)
	}
	checkLedger(t, dir, out)
	// Every write, before and after it.
	for i := range 2 * total {
		at, mode := 1+i/2, []string{"before", "after"}[i%2]
		t.Run(fmt.Sprintf("%s-write-%d-of-%d", mode, at, total), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var outs []string
			finished := false
			for try := 0; try < 3 && !finished; try++ {
				kill := at
				if try > 0 {
					kill = 0
				}
				var out string
				finished, _, out = runChild(t, dir, kill, mode)
				outs = append(outs, out)
			}
			t.Logf("children: %q", outs)
			if !finished {
				t.Fatalf("no child finished:\n%s", strings.Join(outs, "\n----\n"))
			}
			checkLedger(t, dir, strings.Join(outs, "\n----\n"))
		})
	}
}
